#include "lib/data/sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

namespace hetps {
namespace {

TEST_CASE("each epoch visits the worker's shard exactly once, in a new order", "[sampler]") {
  ShardSampler s(1000, 1, 2, 7, 100);  // shard of 500: 5 iterations per epoch
  CHECK(s.shard_size() == 500);
  std::vector<uint32_t> e0, e1;
  for (int it = 0; it < 5; ++it) {
    auto b = s.Batch(it);
    CHECK(b.size() == 100);
    e0.insert(e0.end(), b.begin(), b.end());
  }
  for (int it = 5; it < 10; ++it) {
    auto b = s.Batch(it);
    e1.insert(e1.end(), b.begin(), b.end());
  }
  CHECK(std::set<uint32_t>(e0.begin(), e0.end()).size() == 500);
  CHECK(e0 != e1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  CHECK(e0 == e1);
  CHECK(s.EpochOf(4) == 0);
  CHECK(s.EpochOf(5) == 1);
}

TEST_CASE("batches are full across epoch boundaries and reproducible anywhere", "[sampler]") {
  ShardSampler a(1000, 0, 3, 9, 128), b(1000, 0, 3, 9, 128);
  for (uint64_t it : {0ull, 2ull, 3ull, 40ull}) {
    CHECK(a.Batch(it).size() == 128);
  }
  CHECK(a.Batch(7) == b.Batch(7));  // any order of calls gives the same batch
  ShardSampler other(1000, 1, 3, 9, 128);
  auto x = a.Batch(0), y = other.Batch(0);
  std::set<uint32_t> xs(x.begin(), x.end());
  for (uint32_t i : y) CHECK(xs.count(i) == 0);  // workers' shards are disjoint
}

}  // namespace
}  // namespace hetps
