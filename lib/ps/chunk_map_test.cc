#include "lib/ps/chunk_map.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <random>

namespace hetps {
namespace ps {
namespace {

TEST_CASE("layout covers the vector exactly once", "[chunk]") {
  for (uint64_t n : {64ull, 65ull, 235146ull, 5824522ull}) {
    for (uint32_t c : {64u, 1000u, 16384u}) {
      auto l = ChunkLayout::Create(n, c);
      REQUIRE(l.ok());
      uint64_t next = 0;
      for (uint32_t i = 0; i < l->num_chunks(); ++i) {
        const Chunk ch = l->chunk(i);
        CHECK(ch.offset == next);
        CHECK(ch.floats > 0);
        CHECK(ch.floats <= c);
        if (i + 1 < l->num_chunks()) CHECK(ch.floats == c);
        next += ch.floats;
      }
      CHECK(next == n);
    }
  }
}

TEST_CASE("layout bounds are errors naming the limit", "[chunk]") {
  CHECK(!ChunkLayout::Create(0, 1024).ok());
  CHECK(ChunkLayout::Create(1000, 8).status().message().find("chunk_size 8") != std::string::npos);
  CHECK(!ChunkLayout::Create(1000, ChunkLayout::kChunkFloatsMax + 1).ok());
  CHECK(ChunkLayout::Create(uint64_t(ChunkLayout::kChunksMax) * 64 + 1, 64)
            .status()
            .message()
            .find("raise chunk_size") != std::string::npos);
}

TEST_CASE("even split: contiguous runs whose sizes differ by at most one chunk", "[chunk]") {
  auto l = *ChunkLayout::Create(235146, 4096);  // 58 chunks
  for (uint32_t servers : {1u, 2u, 3u, 7u, 58u, 100u}) {
    auto m = ChunkMap::EvenSplit(l, servers, 1);
    REQUIRE(m.ok());
    CHECK(m->version() == 1);
    size_t lo = SIZE_MAX, hi = 0, total = 0;
    for (uint32_t s = 0; s < servers; ++s) {
      auto mine = m->ChunksOf(s);
      lo = std::min(lo, mine.size());
      hi = std::max(hi, mine.size());
      total += mine.size();
      for (size_t i = 1; i < mine.size(); ++i) CHECK(mine[i] == mine[i - 1] + 1);
    }
    CHECK(total == l.num_chunks());
    CHECK(hi - lo <= 1);
    auto floats = m->FloatsPerServer(l);
    CHECK(std::accumulate(floats.begin(), floats.end(), uint64_t{0}) == l.num_params());
  }
  CHECK(!ChunkMap::EvenSplit(l, 0, 1).ok());
}

TEST_CASE("a policy map is validated and diffs against the previous version", "[chunk]") {
  auto l = *ChunkLayout::Create(10000, 1000);  // 10 chunks
  auto even = *ChunkMap::EvenSplit(l, 2, 1);
  std::vector<uint32_t> owners = even.owners();
  owners[0] = 1;
  owners[9] = 0;
  auto next = ChunkMap::FromOwners(l, 2, owners, 2);
  REQUIRE(next.ok());
  CHECK(next->Moved(even) == std::vector<uint32_t>{0, 9});
  CHECK(even.Moved(even).empty());
  owners[3] = 2;
  CHECK(
      ChunkMap::FromOwners(l, 2, owners, 3).status().message().find("chunk 3 owned by server 2") !=
      std::string::npos);
  CHECK(!ChunkMap::FromOwners(l, 2, std::vector<uint32_t>(9, 0), 3).ok());
}

}  // namespace
}  // namespace ps
}  // namespace hetps
