// Policy value: the diff counts what changed, UPDATE_RATE holds back small
// changes, versions only grow, and chunk rebalancing moves the fewest chunks.
#include "lib/policy/policy_value.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>

namespace hetps {
namespace policy {
namespace {

AggregationTree Chain(int n, int root) {
  AggregationTree t;
  t.root = root;
  t.parent.assign(n, -1);
  t.route.assign(n, Route{});
  for (int v = 0; v < n; ++v) {
    if (v == root) continue;
    t.parent[v] = v == 0 ? root : (v - 1 == root ? root : v - 1);
    t.route[v] = Route{v, t.parent[v]};
  }
  return t;
}

}  // namespace

TEST_CASE("diff counts moved chunks, changed tree edges and batches", "[policy_value]") {
  PolicyValue a;
  a.version = 3;
  a.chunk_server = {0, 0, 1, 1};
  a.trees = {Chain(4, 0), Chain(4, 1)};
  a.batch = {32, 32, 32, 32};
  PolicyValue b = a;
  PolicyDiff d = Diff(a, b);
  CHECK(d.rate == 0);
  CHECK(d.chunks == 4);
  CHECK(d.tree_edges == 6);
  CHECK(d.workers == 4);
  b.chunk_server[3] = 0;
  b.batch[2] = 40;
  b.trees[1].parent[3] = 1;
  b.trees[1].route[3] = Route{3, 1};
  d = Diff(a, b);
  CHECK(d.chunks_moved == 1);
  CHECK(d.workers_changed == 1);
  CHECK(d.tree_edges_changed == 1);
  CHECK(d.rate == Approx(3.0 / 14));
  // A root that disappears counts all its edges as changed.
  b.trees.pop_back();
  d = Diff(a, b);
  CHECK(d.tree_edges_changed == 3);
  CHECK(d.tree_edges == 6);
}

TEST_CASE("UPDATE_RATE: small changes keep the current version", "[policy_value]") {
  PolicyValue none;
  PolicyValue p;
  p.chunk_server.assign(100, 0);
  p.batch = {10, 10};
  auto r = Update(none, p, 0.2);
  REQUIRE(r.ok());
  CHECK(r->issued);  // the first value is always issued
  CHECK(r->value.version == 1);
  PolicyValue q = r->value;
  for (int c = 0; c < 10; ++c) q.chunk_server[c] = 1;  // 10 of 102 decisions
  auto r2 = Update(r->value, q, 0.2);
  REQUIRE(r2.ok());
  CHECK_FALSE(r2->issued);
  CHECK(r2->value.version == 1);
  CHECK(r2->value.chunk_server[0] == 0);
  for (int c = 0; c < 30; ++c) q.chunk_server[c] = 1;  // 30 of 102
  auto r3 = Update(r->value, q, 0.2);
  REQUIRE(r3.ok());
  CHECK(r3->issued);
  CHECK(r3->value.version == 2);
  CHECK(r3->diff.chunks_moved == 30);
  // Nothing changed: nothing issued, even at rate 0.
  auto r4 = Update(r3->value, r3->value, 0.0);
  REQUIRE(r4.ok());
  CHECK_FALSE(r4->issued);
  CHECK(!Update(none, p, 1.5).ok());
  CHECK(!Update(none, p, NAN).ok());
}

TEST_CASE("chunk rebalancing keeps counts and moves the fewest chunks", "[policy_value]") {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 500; ++trial) {
    const int s = 1 + static_cast<int>(rng() % 9);
    const int64_t chunks = static_cast<int64_t>(rng() % 200);
    std::vector<int> servers(s);
    for (int i = 0; i < s; ++i) servers[i] = 3 * i + static_cast<int>(rng() % 3);
    auto random_counts = [&] {
      std::vector<int64_t> c(s, 0);
      for (int64_t k = 0; k < chunks; ++k) ++c[rng() % s];
      return c;
    };
    const auto c1 = random_counts();
    auto m1 = RebalanceChunks({}, servers, c1);
    REQUIRE(m1.ok());
    const auto c2 = random_counts();
    auto m2 = RebalanceChunks(*m1, servers, c2);
    REQUIRE(m2.ok());
    std::map<int, int64_t> have;
    for (int x : *m2) ++have[x];
    int64_t lower_bound = 0;  // each server must shed its surplus at least
    for (int i = 0; i < s; ++i) {
      CHECK(have[servers[i]] == c2[i]);
      lower_bound += std::max<int64_t>(0, c1[i] - c2[i]);
    }
    int64_t moved = 0;
    for (size_t c = 0; c < m2->size(); ++c) moved += (*m1)[c] != (*m2)[c];
    CHECK(moved == lower_bound);
  }
  CHECK(!RebalanceChunks({}, {1, 1}, {1, 1}).ok());
  CHECK(!RebalanceChunks({}, {1}, {-1}).ok());
  CHECK(!RebalanceChunks({0, 0}, {0}, {3}).ok());
}

}  // namespace policy
}  // namespace hetps
