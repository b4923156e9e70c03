// NetStorm: property tests on random overlays. Trees span every reachable
// node; Theorem 1's delay matches an independent walk of every path; on
// graphs of at most 7 nodes the FAPT is as good as the best of all spanning
// trees (exhaustive search); auxiliary paths are valid and link-disjoint
// from the primary and each other; baselines have their defining property.
#include "lib/policy/netstorm.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <queue>
#include <random>
#include <set>

namespace hetps {
namespace policy {
namespace {

// Random overlay: a random spanning tree plus extra links (connected), or,
// with `may_split`, sometimes two separate parts. No two links join the
// same pair.
std::vector<OverlayLink> RandomLinks(std::mt19937_64& rng, int n, int extra, bool may_split) {
  std::uniform_real_distribution<double> rate(20e6 / 8, 155e6 / 8);
  std::uniform_real_distribution<double> lat(0.0, 0.05);
  std::vector<OverlayLink> links;
  const int split = (may_split && n > 3 && rng() % 3 == 0) ? n / 2 : n;
  for (int v = 1; v < n; ++v) {
    if (v == split) continue;  // no link joins the two parts
    const int lo = v < split ? 0 : split;
    const int u = lo + static_cast<int>(rng() % (v - lo));
    links.push_back({u, v, rate(rng), lat(rng)});
  }
  for (int i = 0; i < extra; ++i) {
    const int a = static_cast<int>(rng() % n);
    const int b = static_cast<int>(rng() % n);
    if (a == b || (a < split) != (b < split)) continue;
    bool has = false;
    for (const auto& l : links) has = has || (l.a == a && l.b == b) || (l.a == b && l.b == a);
    if (has) continue;
    links.push_back({a, b, rate(rng), lat(rng)});
  }
  return links;
}

std::vector<int> Reachable(const Overlay& g, int root) {
  std::vector<int> seen(g.nodes(), 0);
  std::vector<int> stack{root};
  seen[root] = 1;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int l : g.incident(v)) {
      const int w = g.Other(l, v);
      if (!seen[w]) seen[w] = 1, stack.push_back(w);
    }
  }
  return seen;
}

// Independent of TreeSyncDelay: follow every node's parents to the root,
// adding each route's links one by one.
double WalkMaxPathDelay(const Overlay& g, const AggregationTree& t, double bytes) {
  double worst = 0;
  for (int v = 0; v < g.nodes(); ++v) {
    if (t.parent[v] < 0) continue;
    double d = 0;
    int u = v;
    int hops = 0;
    while (u != t.root) {
      const Route& r = t.route[u];
      REQUIRE(r.size() >= 2);
      REQUIRE(r.front() == u);
      REQUIRE(r.back() == t.parent[u]);
      for (size_t i = 0; i + 1 < r.size(); ++i) {
        double best = INFINITY;
        for (const OverlayLink& l : g.links()) {
          if ((l.a == r[i] && l.b == r[i + 1]) || (l.b == r[i] && l.a == r[i + 1])) {
            best = std::min(best, l.latency_s + bytes / l.throughput_Bps);
          }
        }
        REQUIRE(std::isfinite(best));
        d += best;
      }
      u = t.parent[u];
      REQUIRE(++hops <= g.nodes());
    }
    worst = std::max(worst, d);
  }
  return worst;
}

// Calls f(idx) for every spanning tree of a connected simple graph with
// n <= 7 nodes, idx the n - 1 links it takes.
template <class F>
void ForEachSpanningTree(const std::vector<OverlayLink>& links, int n, F f) {
  const int e = static_cast<int>(links.size());
  std::vector<int> idx(n - 1);
  std::iota(idx.begin(), idx.end(), 0);
  while (true) {
    // Union-find check that the chosen links form a spanning tree.
    std::vector<int> uf(n);
    std::iota(uf.begin(), uf.end(), 0);
    auto find = [&](int x) {
      while (uf[x] != x) x = uf[x] = uf[uf[x]];
      return x;
    };
    bool tree = true;
    for (int i : idx) {
      const int a = find(links[i].a), b = find(links[i].b);
      if (a == b) {
        tree = false;
        break;
      }
      uf[a] = b;
    }
    if (tree) f(idx);
    // Next combination.
    int i = n - 2;
    while (i >= 0 && idx[i] == e - (n - 1) + i) --i;
    if (i < 0) break;
    ++idx[i];
    for (int j = i + 1; j < n - 1; ++j) idx[j] = idx[j - 1] + 1;
  }
}

// The largest distance from the root within the tree `idx` (per-link cost
// latency + bytes / throughput), and the tree's slowest link.
std::pair<double, double> FarthestAndSlowest(const std::vector<OverlayLink>& links,
                                             const std::vector<int>& idx, int n, int root,
                                             double bytes) {
  std::vector<double> dist(n, -1);
  dist[root] = 0;
  std::vector<int> q{root};
  double slowest = INFINITY;
  for (size_t h = 0; h < q.size(); ++h) {
    for (int i : idx) {
      const OverlayLink& l = links[i];
      for (auto [x, y] : {std::pair{l.a, l.b}, std::pair{l.b, l.a}}) {
        if (x == q[h] && dist[y] < 0) {
          dist[y] = dist[x] + l.latency_s + bytes / l.throughput_Bps;
          slowest = std::min(slowest, l.throughput_Bps);
          q.push_back(y);
        }
      }
    }
  }
  return {*std::max_element(dist.begin(), dist.end()), slowest};
}

double BestSpanningTreeDelay(const std::vector<OverlayLink>& links, int n, int root, double bytes) {
  double best = INFINITY;
  ForEachSpanningTree(links, n, [&](const std::vector<int>& idx) {
    best = std::min(best, FarthestAndSlowest(links, idx, n, root, bytes).first);
  });
  return best;
}

// The least pipelined delay over all spanning trees.
double BestSpanningTreePipelined(const std::vector<OverlayLink>& links, int n, int root,
                                 double model, double chunk) {
  double best = INFINITY;
  ForEachSpanningTree(links, n, [&](const std::vector<int>& idx) {
    const auto [far, slowest] = FarthestAndSlowest(links, idx, n, root, chunk);
    best = std::min(best, far + (model - chunk) / slowest);
  });
  return best;
}

// A connected simple graph of n nodes: a random tree plus each other pair
// with probability 1/2.
std::vector<OverlayLink> SmallGraph(std::mt19937_64& rng, int n) {
  std::vector<OverlayLink> links;
  std::uniform_real_distribution<double> rate(1e6, 20e6);
  std::uniform_real_distribution<double> lat(0.0, 0.05);
  for (int v = 1; v < n; ++v)
    links.push_back({static_cast<int>(rng() % v), v, rate(rng), lat(rng)});
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      bool has = false;
      for (const auto& l : links) has = has || (l.a == a && l.b == b) || (l.a == b && l.b == a);
      if (!has && rng() % 2) links.push_back({a, b, rate(rng), lat(rng)});
    }
  }
  return links;
}

// The busiest link direction of a multi-root plan: each tree link carries
// the tree's chunks once each way.
double BusiestLink(const Overlay& g, const MultiRootFapt& m, double chunk_size) {
  std::vector<double> load(g.links().size(), 0);
  for (size_t i = 0; i < m.trees.size(); ++i) {
    for (int v = 0; v < g.nodes(); ++v) {
      if (m.trees[i].parent[v] < 0) continue;
      const int e = g.LinkBetween(v, m.trees[i].parent[v]);
      REQUIRE(e >= 0);
      load[e] += m.chunks[i] * chunk_size;
    }
  }
  double busiest = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    busiest = std::max(busiest, load[e] / g.links()[e].throughput_Bps);
  }
  return busiest;
}

}  // namespace

TEST_CASE("FAPT spans every reachable node and its delay is the slowest path", "[netstorm]") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    auto g = Overlay::Create(n, RandomLinks(rng, n, static_cast<int>(rng() % (2 * n + 1)), true));
    REQUIRE(g.ok());
    const double bytes = std::uniform_real_distribution<double>(1e3, 3e8)(rng);
    const std::vector<double> all = AllFaptDelays(*g, bytes);
    for (int root = 0; root < n; root += 1 + n / 7) {
      CAPTURE(trial, n, root);
      auto t = FaptTree(*g, root, bytes);
      REQUIRE(t.ok());
      const std::vector<int> reach = Reachable(*g, root);
      for (int v = 0; v < n; ++v) {
        CHECK((v == root || t->parent[v] >= 0) == bool(reach[v]));
      }
      CHECK(TreeSize(*t) == std::accumulate(reach.begin(), reach.end(), 0));
      const double d = TreeSyncDelay(*g, *t, bytes);
      CHECK(d == Approx(WalkMaxPathDelay(*g, *t, bytes)).epsilon(1e-12));
      CHECK(d == Approx(all[root]).epsilon(1e-12));
    }
  }
}

TEST_CASE("FAPT delay equals the best of all spanning trees on graphs of up to 7 nodes",
          "[netstorm]") {
  std::mt19937_64 rng(5);
  int compared = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);  // 2..7
    const std::vector<OverlayLink> links = SmallGraph(rng, n);
    auto g = Overlay::Create(n, links);
    REQUIRE(g.ok());
    const double bytes = 1e7;
    for (int root = 0; root < n; ++root) {
      CAPTURE(trial, n, root, links.size());
      auto t = FaptTree(*g, root, bytes);
      REQUIRE(t.ok());
      CHECK(TreeSyncDelay(*g, *t, bytes) ==
            Approx(BestSpanningTreeDelay(links, n, root, bytes)).epsilon(1e-12));
      ++compared;
    }
  }
  CHECK(compared > 400);
}

TEST_CASE("pipelined FAPT is the best of all spanning trees under the pipelined delay",
          "[netstorm]") {
  std::mt19937_64 rng(23);
  int compared = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);  // 2..7
    const std::vector<OverlayLink> links = SmallGraph(rng, n);
    auto g = Overlay::Create(n, links);
    REQUIRE(g.ok());
    const double model = 2e8;
    const double chunk = std::uniform_real_distribution<double>(1e5, 2e7)(rng);
    for (int root = 0; root < n; ++root) {
      CAPTURE(trial, n, root, chunk);
      auto t = PipelinedFaptTree(*g, root, model, chunk);
      REQUIRE(t.ok());
      CHECK(TreeSize(*t) == n);
      const double d = PipelinedTreeDelay(*g, *t, model, chunk);
      CHECK(d == Approx(BestSpanningTreePipelined(links, n, root, model, chunk)).epsilon(1e-12));
      // Never worse than the maximum-throughput tree (MST) or Theorem 1's FAPT.
      auto mst = MaxThroughputTree(*g, root);
      auto fapt = FaptTree(*g, root, model);
      REQUIRE((mst.ok() && fapt.ok()));
      CHECK(d <= PipelinedTreeDelay(*g, *mst, model, chunk) * (1 + 1e-12));
      CHECK(d <= PipelinedTreeDelay(*g, *fapt, model, chunk) * (1 + 1e-12));
      ++compared;
    }
    // A chunk of the whole model is Theorem 1: the same delay as FaptTree.
    auto whole = PipelinedFaptTree(*g, 0, model, model);
    auto fapt = FaptTree(*g, 0, model);
    REQUIRE((whole.ok() && fapt.ok()));
    CHECK(PipelinedTreeDelay(*g, *whole, model, model) ==
          Approx(TreeSyncDelay(*g, *fapt, model)).epsilon(1e-12));
  }
  CHECK(compared > 400);
  // Disconnected: the tree spans the root's part only.
  std::mt19937_64 rng2(3);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 4 + static_cast<int>(rng2() % 30);
    auto g = Overlay::Create(n, RandomLinks(rng2, n, n, true));
    REQUIRE(g.ok());
    auto t = PipelinedFaptTree(*g, 0, 1e8, 4e6);
    REQUIRE(t.ok());
    const std::vector<int> reach = Reachable(*g, 0);
    CHECK(TreeSize(*t) == std::accumulate(reach.begin(), reach.end(), 0));
  }
  CHECK(!PipelinedFaptTree(Overlay::Create(2, {{0, 1, 1e6, 0}}).value(), 0, 0, 1).ok());
  CHECK(!PipelinedFaptTree(Overlay::Create(2, {{0, 1, 1e6, 0}}).value(), 0, 1e6, 0).ok());
  CHECK(!PipelinedFaptTree(Overlay::Create(2, {{0, 1, 1e6, 0}}).value(), 2, 1e6, 1).ok());
}

TEST_CASE("packed multi-root trees reach the known optimal packing on rings and complete graphs",
          "[netstorm]") {
  // With equal links of throughput c and no latency, the best split of the
  // model M over spanning trees loads the busiest link with M / P, P the
  // fractional spanning-tree packing number (Nash-Williams/Tutte): n / (n-1)
  // for a ring (each tree drops one link), n / 2 for the complete graph.
  const double c = 1e7, model = 1e9;
  const int64_t chunks = 4000;
  struct Case {
    std::vector<OverlayLink> links;
    int n;
    double packing;
  };
  std::vector<Case> cases;
  for (int n : {3, 5, 9}) {
    Case ring{{}, n, n / (n - 1.0)};
    for (int v = 0; v < n; ++v) ring.links.push_back({v, (v + 1) % n, c, 0});
    cases.push_back(ring);
  }
  for (int n : {4, 6}) {
    Case full{{}, n, n / 2.0};
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) full.links.push_back({a, b, c, 0});
    cases.push_back(full);
  }
  for (const Case& k : cases) {
    CAPTURE(k.n, k.links.size());
    auto g = Overlay::Create(k.n, k.links);
    REQUIRE(g.ok());
    auto m = DecidePackedMultiRoot(*g, model, model / chunks, chunks, k.n, {});
    REQUIRE(m.ok());
    REQUIRE(m->trees.size() == static_cast<size_t>(k.n));
    int64_t sum = 0;
    for (size_t i = 0; i < m->trees.size(); ++i) {
      CHECK(TreeSize(m->trees[i]) == k.n);
      CHECK(m->chunks[i] >= 0);
      sum += m->chunks[i];
    }
    CHECK(sum == chunks);
    const double optimum = model / k.packing / c;
    const double busiest = BusiestLink(*g, *m, model / chunks);
    CHECK(busiest >= optimum * (1 - 1e-9));  // no packing beats the bound
    CHECK(busiest <= optimum * 1.03);
    double planned = 0;
    for (double t : m->link_busy_s) planned = std::max(planned, t);
    CHECK(planned == Approx(busiest).epsilon(1e-9));
  }
}

TEST_CASE("packed multi-root on random overlays: spans, keeps roots, never busier than MR-FAPT",
          "[netstorm]") {
  std::mt19937_64 rng(31);
  int better = 0, trials = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 30);
    auto g = Overlay::Create(n, RandomLinks(rng, n, 2 * n, false));
    REQUIRE(g.ok());
    const double model = 2.28e8, chunk = 4e6;
    const int64_t chunks = 57;
    const int k = 1 + static_cast<int>(rng() % n);
    CAPTURE(trial, n, k);
    auto packed = DecidePackedMultiRoot(*g, model, chunk, chunks, k, {});
    auto paper = DecideMultiRootFapt(*g, model, chunks, k, {});
    REQUIRE((packed.ok() && paper.ok()));
    REQUIRE(packed->roots.size() == static_cast<size_t>(k));
    int64_t sum = 0;
    for (size_t i = 0; i < packed->trees.size(); ++i) {
      CHECK(packed->trees[i].root == packed->roots[i]);
      CHECK(TreeSize(packed->trees[i]) == n);
      sum += packed->chunks[i];
    }
    CHECK(sum == chunks);
    // Roots given are kept.
    auto kept = DecidePackedMultiRoot(*g, model, chunk, chunks, k, packed->roots);
    REQUIRE(kept.ok());
    CHECK(kept->roots == packed->roots);
    const double a = BusiestLink(*g, *packed, model / chunks);
    const double b = BusiestLink(*g, *paper, model / chunks);
    CHECK(a <= b * 1.001);
    better += a < b * 0.999;
    ++trials;
  }
  CHECK(better > trials / 2);
  auto g = Overlay::Create(2, {{0, 1, 1e6, 0}});
  REQUIRE(g.ok());
  CHECK(!DecidePackedMultiRoot(*g, 0, 1, 1, 1, {}).ok());
  CHECK(!DecidePackedMultiRoot(*g, 1e6, 1e3, 0, 1, {}).ok());
  CHECK(!DecidePackedMultiRoot(*g, 1e6, 1e3, 10, 3, {}).ok());
  CHECK(!DecidePackedMultiRoot(*g, 1e6, 1e3, 10, 1, {5}).ok());
}

TEST_CASE("auxiliary paths are valid routes, link-disjoint from the primary and each other",
          "[netstorm]") {
  std::mt19937_64 rng(3);
  int found = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    auto links = RandomLinks(rng, n, static_cast<int>(rng() % (3 * n + 1)), false);
    auto g = Overlay::Create(n, links);
    REQUIRE(g.ok());
    const double bytes = 4e6;
    const int root = static_cast<int>(rng() % n);
    auto t = FaptTree(*g, root, bytes);
    REQUIRE(t.ok());
    const int max_paths = 1 + static_cast<int>(rng() % 4);
    const auto aux = TreeAuxiliaryPaths(*g, *t, bytes, max_paths);
    for (int v = 0; v < n; ++v) {
      CAPTURE(trial, v);
      if (t->parent[v] < 0) {
        CHECK(aux[v].empty());
        continue;
      }
      CHECK(static_cast<int>(aux[v].size()) <= max_paths);
      // Links used, by id: the primary's one hop, then each path's.
      std::multiset<std::pair<int, int>> used;
      auto key = [](int a, int b) { return std::pair{std::min(a, b), std::max(a, b)}; };
      used.insert(key(v, t->parent[v]));
      double last = 0;
      for (const Route& r : aux[v]) {
        REQUIRE(r.size() >= 2);
        CHECK(r.front() == v);
        CHECK(r.back() == t->parent[v]);
        const double d = RouteDelay(*g, r, bytes);
        CHECK(std::isfinite(d));
        CHECK(d >= last * (1 - 1e-12));  // fastest first
        last = d;
        std::set<int> nodes(r.begin(), r.end());
        CHECK(nodes.size() == r.size());  // a simple path
        for (size_t i = 0; i + 1 < r.size(); ++i) used.insert(key(r[i], r[i + 1]));
        ++found;
      }
      for (const auto& k : used) CHECK(used.count(k) == 1);
    }
  }
  CHECK(found > 100);
}

TEST_CASE("auxiliary paths of several trees reuse each pair's search", "[netstorm]") {
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 25);
    auto g = Overlay::Create(n, RandomLinks(rng, n, 2 * n, false));
    REQUIRE(g.ok());
    std::vector<AggregationTree> trees;
    for (int r = 0; r < n; r += 2) trees.push_back(*FaptTree(*g, r, 1e6));
    const auto all = MultiTreeAuxiliaryPaths(*g, trees, 1e6, 2);
    REQUIRE(all.size() == trees.size());
    for (size_t i = 0; i < trees.size(); ++i) {
      const auto one = TreeAuxiliaryPaths(*g, trees[i], 1e6, 2);
      for (int v = 0; v < n; ++v) {
        CAPTURE(trial, i, v);
        REQUIRE(all[i][v].size() == one[v].size());
        for (size_t j = 0; j < one[v].size(); ++j) {
          // Same endpoints and the same delay (ties may pick another route).
          CHECK(all[i][v][j].front() == v);
          CHECK(all[i][v][j].back() == trees[i].parent[v]);
          CHECK(RouteDelay(*g, all[i][v][j], 1e6) == Approx(RouteDelay(*g, one[v][j], 1e6)));
        }
      }
    }
  }
}

TEST_CASE("auxiliary paths on a ring and a complete graph", "[netstorm]") {
  // Ring of 6: between neighbours, the primary is the link, the one
  // auxiliary path goes the other way round.
  std::vector<OverlayLink> ring;
  for (int v = 0; v < 6; ++v) ring.push_back({v, (v + 1) % 6, 1e6, 0.01});
  auto g = Overlay::Create(6, ring);
  REQUIRE(g.ok());
  auto aux = AuxiliaryPaths(*g, 0, 1, Route{0, 1}, 1e6, 4);
  REQUIRE(aux.size() == 1);
  CHECK(aux[0] == Route{0, 5, 4, 3, 2, 1});
  // K5: 3 two-hop paths besides the direct link.
  std::vector<OverlayLink> k5;
  for (int a = 0; a < 5; ++a) {
    for (int b = a + 1; b < 5; ++b) k5.push_back({a, b, 1e6, 0.01});
  }
  auto k = Overlay::Create(5, k5);
  REQUIRE(k.ok());
  aux = AuxiliaryPaths(*k, 0, 4, Route{0, 4}, 1e6, 8);
  REQUIRE(aux.size() == 3);
  for (const Route& r : aux) CHECK(r.size() == 3);
  CHECK(AuxiliaryPaths(*k, 0, 4, Route{0, 4}, 1e6, 1).size() == 1);
  CHECK(AuxiliaryPaths(*k, 0, 0, Route{}, 1e6, 3).empty());
}

TEST_CASE("the sender's path choice follows PRIMARY_BUSY_BOUND and AUXILIARY_QUEUE_LENGTH",
          "[netstorm]") {
  const std::vector<int> aux{1, 0, 3};
  CHECK(ChooseSendPath(0, aux, 2, 1) == 0);  // primary not busy
  CHECK(ChooseSendPath(1, aux, 2, 1) == 0);
  CHECK(ChooseSendPath(2, aux, 2, 1) == 2);  // busy: first aux path with room (the second)
  CHECK(ChooseSendPath(2, aux, 2, 2) == 1);  // longer aux queues: the fastest has room
  CHECK(ChooseSendPath(5, std::vector<int>{1, 1, 3}, 2, 1) == 0);  // all full: primary anyway
  CHECK(ChooseSendPath(7, std::vector<int>{}, 2, 5) == 0);         // no aux paths
}

TEST_CASE("baselines: STAR routes by fewest hops, BKT is balanced, MST maximises throughput",
          "[netstorm]") {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 25);
    auto links = RandomLinks(rng, n, static_cast<int>(rng() % (2 * n)), false);
    auto g = Overlay::Create(n, links);
    REQUIRE(g.ok());
    const int root = static_cast<int>(rng() % n);
    CAPTURE(trial, n, root);
    // Hop distances by BFS.
    std::vector<int> hops(n, -1);
    hops[root] = 0;
    std::queue<int> q;
    q.push(root);
    while (!q.empty()) {
      const int v = q.front();
      q.pop();
      for (int l : g->incident(v)) {
        const int w = g->Other(l, v);
        if (hops[w] < 0) hops[w] = hops[v] + 1, q.push(w);
      }
    }
    auto star = StarTree(*g, root, 1e7);
    REQUIRE(star.ok());
    for (int v = 0; v < n; ++v) {
      if (v == root) continue;
      CHECK(star->parent[v] == root);
      CHECK(static_cast<int>(star->route[v].size()) == hops[v] + 1);
    }
    CHECK(TreeSyncDelay(*g, *star, 1e7) == Approx(WalkMaxPathDelay(*g, *star, 1e7)));

    const int k = 1 + static_cast<int>(rng() % 3);
    auto bkt = BalancedTree(*g, root, k, 1e7);
    REQUIRE(bkt.ok());
    std::vector<int> children(n, 0), depth(n, 0);
    for (int v = 0; v < n; ++v) {
      if (bkt->parent[v] >= 0) ++children[bkt->parent[v]];
    }
    CHECK(TreeSize(*bkt) == n);
    int max_depth = 0;
    for (int v = 0; v < n; ++v) {
      CHECK(children[v] <= k);
      int d = 0;
      for (int u = v; u != root; u = bkt->parent[u]) ++d;
      max_depth = std::max(max_depth, d);
    }
    // Heap layout: depth is the smallest that holds n nodes.
    int cap = 1, level = 1, need = 0;
    while (cap < n) level *= k, cap += level, ++need;
    if (k == 1) need = n - 1;
    CHECK(max_depth == need);
    CHECK(TreeSyncDelay(*g, *bkt, 1e7) == Approx(WalkMaxPathDelay(*g, *bkt, 1e7)));

    auto mst = MaxThroughputTree(*g, root);
    REQUIRE(mst.ok());
    CHECK(TreeSize(*mst) == n);
    // Kruskal (maximum) gives the same total throughput.
    std::vector<int> order(links.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return links[a].throughput_Bps > links[b].throughput_Bps; });
    std::vector<int> uf(n);
    std::iota(uf.begin(), uf.end(), 0);
    auto find = [&](int x) {
      while (uf[x] != x) x = uf[x] = uf[uf[x]];
      return x;
    };
    double kruskal = 0, prim = 0;
    for (int i : order) {
      const int a = find(links[i].a), b = find(links[i].b);
      if (a != b) uf[a] = b, kruskal += links[i].throughput_Bps;
    }
    for (int v = 0; v < n; ++v) {
      if (mst->parent[v] < 0) continue;
      double best = 0;
      for (const auto& l : links) {
        if ((l.a == v && l.b == mst->parent[v]) || (l.b == v && l.a == mst->parent[v])) {
          best = std::max(best, l.throughput_Bps);
        }
      }
      prim += best;
    }
    CHECK(prim == Approx(kruskal).epsilon(1e-12));
    // FAPT is never slower than any baseline with the same root.
    auto fapt = FaptTree(*g, root, 1e7);
    REQUIRE(fapt.ok());
    const double f = TreeSyncDelay(*g, *fapt, 1e7);
    CHECK(f <= TreeSyncDelay(*g, *star, 1e7) * (1 + 1e-12));
    CHECK(f <= TreeSyncDelay(*g, *bkt, 1e7) * (1 + 1e-12));
    CHECK(f <= TreeSyncDelay(*g, *mst, 1e7) * (1 + 1e-12));
  }
}

TEST_CASE("multi-root FAPT: top-k roots by score, kept when given, chunks by score", "[netstorm]") {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    auto g = Overlay::Create(n, RandomLinks(rng, n, n, false));
    REQUIRE(g.ok());
    const int k = 1 + static_cast<int>(rng() % n);
    const int64_t chunks = 1 + static_cast<int64_t>(rng() % 200);
    auto m = DecideMultiRootFapt(*g, 2e8, chunks, k, {});
    REQUIRE(m.ok());
    CAPTURE(trial, n, k, chunks);
    REQUIRE(static_cast<int>(m->roots.size()) == k);
    CHECK(std::accumulate(m->chunks.begin(), m->chunks.end(), int64_t{0}) == chunks);
    const auto all = AllFaptDelays(*g, 2e8);
    double worst_kept = INFINITY;
    for (int i = 0; i < k; ++i) {
      CHECK(m->delay_s[i] == Approx(all[m->roots[i]]));
      worst_kept = std::min(worst_kept, QualityScore(all[m->roots[i]]));
      if (chunks >= k) CHECK(m->chunks[i] >= 1);
      if (i > 0) CHECK(m->score[i] <= m->score[i - 1]);
    }
    // No node left out scores better than the worst root kept.
    std::set<int> kept(m->roots.begin(), m->roots.end());
    for (int v = 0; v < n; ++v) {
      if (!kept.count(v)) CHECK(QualityScore(all[v]) <= worst_kept);
    }
    // Given roots are kept as they are.
    std::vector<int> fixed{static_cast<int>(rng() % n)};
    auto again = DecideMultiRootFapt(*g, 2e8, chunks, k, fixed);
    REQUIRE(again.ok());
    CHECK(again->roots == fixed);
    CHECK(again->chunks[0] == chunks);
  }
}

TEST_CASE("bad overlays and arguments are rejected with a reason", "[netstorm]") {
  CHECK(!Overlay::Create(0, {}).ok());
  CHECK(!Overlay::Create(2, {{0, 2, 1e6, 0}}).ok());
  CHECK(!Overlay::Create(2, {{1, 1, 1e6, 0}}).ok());
  CHECK(!Overlay::Create(2, {{0, 1, 0, 0}}).ok());
  CHECK(!Overlay::Create(2, {{0, 1, NAN, 0}}).ok());
  CHECK(!Overlay::Create(2, {{0, 1, 1e6, -1}}).ok());
  CHECK(!Overlay::Create(3, {{0, 1, 1e6, 0}, {1, 2, 1e6, 0}, {1, 0, 2e6, 0}}).ok());
  auto g = Overlay::Create(2, {{0, 1, 1e6, 0.01}});
  REQUIRE(g.ok());
  CHECK(!FaptTree(*g, 2, 1).ok());
  CHECK(!StarTree(*g, -1, 1).ok());
  CHECK(!BalancedTree(*g, 0, 0, 1).ok());
  CHECK(!DecideMultiRootFapt(*g, 1e6, 0, 1, {}).ok());
  CHECK(!DecideMultiRootFapt(*g, 1e6, 4, 3, {}).ok());
  CHECK(!DecideMultiRootFapt(*g, 1e6, 4, 1, {5}).ok());
  auto s = Overlay::Create(1, {});
  REQUIRE(s.ok());
  auto t = FaptTree(*s, 0, 1e6);
  REQUIRE(t.ok());
  CHECK(TreeSyncDelay(*s, *t, 1e6) == 0);
}

}  // namespace policy
}  // namespace hetps
