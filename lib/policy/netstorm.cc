#include "lib/policy/netstorm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/policy/wlbs.h"

namespace hetps {
namespace policy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Search key: with by_hops, fewest hops first and delay to break ties; else
// delay only (hops kept at 0).
struct Key {
  int hops = 0;
  double delay = 0;
  bool operator<(const Key& o) const { return hops != o.hops ? hops < o.hops : delay < o.delay; }
  bool operator>(const Key& o) const { return o < *this; }
};

struct Search {
  std::vector<Key> dist;
  std::vector<int> via;  // link by which a node was reached; -1 for the source
  std::vector<char> done;
};

// Dijkstra from `source` over links not marked in `removed` (may be null).
// Stops once `target` (if >= 0) is settled. Symmetric delays make the tree
// it finds both "from the source" and "to the source".
// Nodes farther than `limit` are left unsettled (via -1).
void RunSearch(const Overlay& g, int source, double bytes, bool by_hops,
               const std::vector<char>* removed, int target, Search* s, double limit = kInf) {
  const int n = g.nodes();
  s->dist.assign(n, Key{std::numeric_limits<int>::max(), kInf});
  s->via.assign(n, -1);
  s->done.assign(n, 0);
  using Item = std::pair<Key, int>;
  auto greater = [](const Item& x, const Item& y) {
    return x.first > y.first || (!(y.first > x.first) && x.second > y.second);
  };
  std::priority_queue<Item, std::vector<Item>, decltype(greater)> heap(greater);
  s->dist[source] = Key{0, 0};
  heap.push({s->dist[source], source});
  while (!heap.empty()) {
    const auto [key, v] = heap.top();
    heap.pop();
    if (s->done[v]) continue;
    if (key.delay > limit) {
      // Everything left is farther: forget what was reached beyond the limit.
      for (int w = 0; w < n; ++w) {
        if (!s->done[w]) s->via[w] = -1;
      }
      return;
    }
    s->done[v] = 1;
    if (v == target) return;
    for (int link : g.incident(v)) {
      if (removed != nullptr && (*removed)[link]) continue;
      const int w = g.Other(link, v);
      if (s->done[w]) continue;
      const Key next{by_hops ? key.hops + 1 : 0, key.delay + g.LinkDelay(link, bytes)};
      if (next < s->dist[w] || (!(s->dist[w] < next) && s->via[w] > link && s->via[w] >= 0)) {
        s->dist[w] = next;
        s->via[w] = link;
        heap.push({next, w});
      }
    }
  }
}

// The route from v back to the search's source.
Route RouteToSource(const Overlay& g, const Search& s, int v) {
  Route r{v};
  while (s.via[v] >= 0) {
    v = g.Other(s.via[v], v);
    r.push_back(v);
  }
  return r;
}

absl::Status CheckRoot(const Overlay& g, int root) {
  if (root < 0 || root >= g.nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not a node (", g.nodes(), " nodes)"));
  }
  return absl::OkStatus();
}

// A tree whose every node routes straight back to the root along the search.
AggregationTree ShortestPathTree(const Overlay& g, const Search& s, int root, bool full_routes) {
  const int n = g.nodes();
  AggregationTree t;
  t.root = root;
  t.parent.assign(n, -1);
  t.route.assign(n, Route{});
  for (int v = 0; v < n; ++v) {
    if (v == root || s.via[v] < 0) continue;
    if (full_routes) {
      t.route[v] = RouteToSource(g, s, v);
      t.parent[v] = root;
    } else {
      t.parent[v] = g.Other(s.via[v], v);
      t.route[v] = Route{v, t.parent[v]};
    }
  }
  return t;
}

// Prim's minimum spanning tree of the root's component under `weight`
// (per link; ties: lower link id), rooted at `root`, one-link routes. With
// `fill` (per link, seconds) a link is taken only while the node it attaches
// stays within `cap` of the root (sum of fill along its path); links that
// would exceed it wait and are used, lightest first, only when nothing else
// can grow the tree, so the tree always spans the component. O(E log E).
AggregationTree MinWeightTree(const Overlay& g, int root, const std::vector<double>& weight,
                              const std::vector<double>* fill = nullptr, double cap = kInf) {
  const int n = g.nodes();
  AggregationTree t;
  t.root = root;
  t.parent.assign(n, -1);
  t.route.assign(n, Route{});
  std::vector<char> in(n, 0);
  std::vector<double> depth(n, 0);
  using Item = std::pair<double, int>;  // (weight, link)
  using Heap = std::priority_queue<Item, std::vector<Item>, std::greater<Item>>;
  Heap heap, deferred;
  auto add = [&](int v) {
    in[v] = 1;
    for (int link : g.incident(v)) {
      if (!in[g.Other(link, v)]) heap.push({weight[link], link});
    }
  };
  add(root);
  while (!heap.empty() || !deferred.empty()) {
    const bool over_cap = heap.empty();
    Heap& from_heap = over_cap ? deferred : heap;
    const int link = from_heap.top().second;
    from_heap.pop();
    const OverlayLink& l = g.links()[link];
    const int from = in[l.a] ? l.a : l.b;
    const int to = g.Other(link, from);
    if (in[to]) continue;
    const double d = fill != nullptr ? depth[from] + (*fill)[link] : 0;
    if (!over_cap && d > cap) {
      deferred.push({weight[link], link});
      continue;
    }
    depth[to] = d;
    t.parent[to] = from;
    t.route[to] = Route{to, from};
    add(to);
  }
  return t;
}

}  // namespace

absl::StatusOr<Overlay> Overlay::Create(int nodes, std::vector<OverlayLink> links) {
  if (nodes < 1) return absl::InvalidArgumentError(absl::StrCat("overlay: ", nodes, " nodes"));
  Overlay g;
  g.nodes_ = nodes;
  g.start_.assign(nodes + 1, 0);
  absl::flat_hash_map<std::pair<int, int>, int> seen;
  for (size_t i = 0; i < links.size(); ++i) {
    const OverlayLink& l = links[i];
    if (l.a < 0 || l.a >= nodes || l.b < 0 || l.b >= nodes || l.a == l.b) {
      return absl::InvalidArgumentError(
          absl::StrCat("overlay: link ", i, " joins ", l.a, " and ", l.b, " (", nodes, " nodes)"));
    }
    if (!std::isfinite(l.throughput_Bps) || l.throughput_Bps <= 0 || !std::isfinite(l.latency_s) ||
        l.latency_s < 0) {
      return absl::InvalidArgumentError(absl::StrCat("overlay: link ", i, " has throughput ",
                                                     l.throughput_Bps, " B/s and latency ",
                                                     l.latency_s, " s"));
    }
    const auto [it, fresh] =
        seen.try_emplace(std::pair{std::min(l.a, l.b), std::max(l.a, l.b)}, static_cast<int>(i));
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat("overlay: links ", it->second, " and ", i,
                                                     " both join ", l.a, " and ", l.b,
                                                     " (merge parallel links into one)"));
    }
    ++g.start_[l.a + 1];
    ++g.start_[l.b + 1];
  }
  for (int v = 0; v < nodes; ++v) g.start_[v + 1] += g.start_[v];
  g.incident_.assign(2 * links.size(), 0);
  std::vector<int> fill(g.start_.begin(), g.start_.end() - 1);
  for (size_t i = 0; i < links.size(); ++i) {
    g.incident_[fill[links[i].a]++] = static_cast<int>(i);
    g.incident_[fill[links[i].b]++] = static_cast<int>(i);
  }
  g.links_ = std::move(links);
  return g;
}

int Overlay::LinkBetween(int a, int b) const {
  if (a < 0 || a >= nodes_) return -1;
  for (int link : incident(a)) {
    if (Other(link, a) == b) return link;
  }
  return -1;
}

double RouteDelay(const Overlay& g, const Route& r, double bytes) {
  double d = 0;
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    const int link = g.LinkBetween(r[i], r[i + 1]);
    if (link < 0) return kInf;
    d += g.LinkDelay(link, bytes);
  }
  return d;
}

double TreeSyncDelay(const Overlay& g, const AggregationTree& t, double bytes) {
  const int n = g.nodes();
  // dist[v]: delay from v to the root; resolved by walking up parent
  // pointers, memoised, so O(N + total route length) overall.
  std::vector<double> dist(n, -1);
  if (t.root < 0 || t.root >= n) return kInf;
  dist[t.root] = 0;
  double worst = 0;
  std::vector<int> stack;
  for (int v = 0; v < n; ++v) {
    if (t.parent[v] < 0) continue;
    int u = v;
    while (dist[u] < 0) {
      if (t.parent[u] < 0 || static_cast<int>(stack.size()) > n) return kInf;  // broken or cycle
      stack.push_back(u);
      u = t.parent[u];
    }
    while (!stack.empty()) {
      const int w = stack.back();
      stack.pop_back();
      const Route& r = t.route[w];
      if (r.size() < 2 || r.front() != w || r.back() != t.parent[w]) return kInf;
      dist[w] = RouteDelay(g, r, bytes) + dist[t.parent[w]];
    }
    worst = std::max(worst, dist[v]);
  }
  return worst;
}

int TreeSize(const AggregationTree& t) {
  int size = 0;
  for (size_t v = 0; v < t.parent.size(); ++v) {
    size += static_cast<int>(v) == t.root || t.parent[v] >= 0;
  }
  return size;
}

absl::StatusOr<AggregationTree> FaptTree(const Overlay& g, int root, double bytes) {
  if (auto st = CheckRoot(g, root); !st.ok()) return st;
  Search s;
  RunSearch(g, root, bytes, /*by_hops=*/false, nullptr, -1, &s);
  return ShortestPathTree(g, s, root, /*full_routes=*/false);
}

std::vector<double> AllFaptDelays(const Overlay& g, double bytes) {
  std::vector<double> out(g.nodes());
  Search s;
  for (int r = 0; r < g.nodes(); ++r) {
    RunSearch(g, r, bytes, false, nullptr, -1, &s);
    // The shortest-path tree's delay is the largest shortest distance; an
    // unreachable node does not count (the tree spans what it can reach).
    double worst = 0;
    for (const Key& k : s.dist) {
      if (std::isfinite(k.delay)) worst = std::max(worst, k.delay);
    }
    out[r] = worst;
  }
  return out;
}

double QualityScore(double delay_s) {
  if (!std::isfinite(delay_s)) return 0;
  return delay_s > 0 ? 1.0 / delay_s : std::numeric_limits<double>::max();
}

std::vector<int> TopKRoots(const std::vector<double>& scores, int k) {
  std::vector<int> ids(scores.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  k = std::clamp(k, 0, static_cast<int>(ids.size()));
  auto better = [&](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  ids.resize(k);
  return ids;
}

absl::StatusOr<MultiRootFapt> DecideMultiRootFapt(const Overlay& g, double model_bytes,
                                                  int64_t chunk_count, int k,
                                                  const std::vector<int>& roots) {
  if (!(model_bytes > 0) || !std::isfinite(model_bytes) || chunk_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("multi-root FAPT: model of ", model_bytes,
                                                   " bytes in ", chunk_count, " chunks"));
  }
  MultiRootFapt out;
  if (roots.empty()) {
    if (k < 1 || k > g.nodes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("multi-root FAPT: ", k, " roots among ", g.nodes(), " nodes"));
    }
    const std::vector<double> delays = AllFaptDelays(g, model_bytes);
    std::vector<double> scores(delays.size());
    for (size_t i = 0; i < delays.size(); ++i) scores[i] = QualityScore(delays[i]);
    out.roots = TopKRoots(scores, k);
  } else {
    for (int r : roots) {
      if (auto st = CheckRoot(g, r); !st.ok()) return st;
    }
    out.roots = roots;
  }
  for (int r : out.roots) {
    auto t = FaptTree(g, r, model_bytes);
    if (!t.ok()) return t.status();
    out.delay_s.push_back(TreeSyncDelay(g, *t, model_bytes));
    out.score.push_back(QualityScore(out.delay_s.back()));
    out.trees.push_back(std::move(*t));
  }
  const int64_t nroots = static_cast<int64_t>(out.roots.size());
  std::vector<double> weights = out.score;
  bool any = false;
  for (double w : weights) any = any || w > 0;
  if (!any) std::fill(weights.begin(), weights.end(), 1.0);
  auto split = SplitProportional(chunk_count, weights, chunk_count >= nroots ? 1 : 0);
  if (!split.ok()) return split.status();
  out.chunks = std::move(*split);
  for (int64_t i = 0; i < nroots; ++i) {
    const double share = model_bytes * static_cast<double>(out.chunks[i]) / chunk_count;
    if (out.chunks[i] > 0) {
      out.cost_s = std::max(out.cost_s, TreeSyncDelay(g, out.trees[i], share));
    }
  }
  return out;
}

absl::StatusOr<MultiRootFapt> DecideSharedLinkMultiRoot(const Overlay& g, double model_bytes,
                                                        int64_t chunk_count, int k,
                                                        const std::vector<int>& roots) {
  // Roots and scores as the paper's; the trees and shares are ours.
  auto base = DecideMultiRootFapt(g, model_bytes, chunk_count, k, roots);
  if (!base.ok()) return base;
  MultiRootFapt out = std::move(*base);
  const size_t nroots = out.roots.size();
  const size_t nlinks = g.links().size();
  const double share0 = model_bytes / static_cast<double>(nroots);
  // Load-aware trees: a copy of the overlay whose delays grow with the load.
  std::vector<double> load(nlinks, 0);
  std::vector<std::vector<int>> tree_links(nroots);
  for (size_t i = 0; i < nroots; ++i) {
    std::vector<OverlayLink> links = g.links();
    for (size_t e = 0; e < nlinks; ++e) {
      // Delay for `share0` bytes when the link also carries `load`:
      // (load + share0) / S = share0 / S' with S' = S share0 / (load + share0).
      links[e].throughput_Bps *= share0 / (load[e] + share0);
    }
    auto loaded = Overlay::Create(g.nodes(), std::move(links));
    if (!loaded.ok()) return loaded.status();
    auto t = FaptTree(*loaded, out.roots[i], share0);
    if (!t.ok()) return t.status();
    for (int v = 0; v < g.nodes(); ++v) {
      if (t->parent[v] < 0) continue;
      const int e = g.LinkBetween(v, t->parent[v]);
      load[e] += share0;
      tree_links[i].push_back(e);
    }
    out.trees[i] = std::move(*t);
    out.delay_s[i] = TreeSyncDelay(g, out.trees[i], model_bytes);
  }
  // Balance shares: a tree's pace is its busiest link's time, load / S.
  std::vector<double> share(nroots, share0);
  std::vector<double> pace(nroots, 0);
  for (int iter = 0; iter < 30; ++iter) {
    std::fill(load.begin(), load.end(), 0);
    for (size_t i = 0; i < nroots; ++i) {
      for (int e : tree_links[i]) load[e] += share[i];
    }
    double mean = 0;
    for (size_t i = 0; i < nroots; ++i) {
      pace[i] = 0;
      for (int e : tree_links[i])
        pace[i] = std::max(pace[i], load[e] / g.links()[e].throughput_Bps);
      mean += pace[i] / static_cast<double>(nroots);
    }
    double sum = 0;
    for (size_t i = 0; i < nroots; ++i) {
      if (pace[i] > 0) share[i] *= std::sqrt(mean / pace[i]);
      sum += share[i];
    }
    for (double& x : share) x *= model_bytes / sum;
  }
  auto split = SplitProportional(chunk_count, share, 0);
  if (!split.ok()) return split.status();
  out.chunks = std::move(*split);
  out.cost_s = 0;
  for (size_t i = 0; i < nroots; ++i) {
    out.score[i] = QualityScore(out.delay_s[i]);
    if (out.chunks[i] > 0) {
      out.cost_s =
          std::max(out.cost_s,
                   TreeSyncDelay(g, out.trees[i],
                                 model_bytes * static_cast<double>(out.chunks[i]) / chunk_count));
    }
  }
  return out;
}

namespace {

// The slowest link of the maximum-throughput spanning tree of the root's
// component: the fastest throughput threshold whose links still span it
// (+inf for a lone node). O(E log E).
absl::StatusOr<double> WidestSpanningThreshold(const Overlay& g, int root) {
  auto widest = MaxThroughputTree(g, root);
  if (!widest.ok()) return widest.status();
  double top = kInf;
  for (int v = 0; v < g.nodes(); ++v) {
    if (widest->parent[v] >= 0) {
      top = std::min(top, g.links()[g.LinkBetween(v, widest->parent[v])].throughput_Bps);
    }
  }
  return top;
}

}  // namespace

double PipelinedTreeDelay(const Overlay& g, const AggregationTree& t, double model_bytes,
                          double chunk_bytes) {
  const double chunk = std::min(chunk_bytes, model_bytes);
  const double fill = TreeSyncDelay(g, t, chunk);
  if (!std::isfinite(fill)) return fill;
  double slowest = kInf;
  for (size_t v = 0; v < t.route.size(); ++v) {
    if (t.parent[v] < 0) continue;
    const Route& r = t.route[v];
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      slowest = std::min(slowest, g.links()[g.LinkBetween(r[i], r[i + 1])].throughput_Bps);
    }
  }
  return std::isfinite(slowest) ? fill + (model_bytes - chunk) / slowest : fill;
}

absl::StatusOr<AggregationTree> PipelinedFaptTree(const Overlay& g, int root, double model_bytes,
                                                  double chunk_bytes) {
  if (auto st = CheckRoot(g, root); !st.ok()) return st;
  if (!(model_bytes > 0) || !std::isfinite(model_bytes) || !(chunk_bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("pipelined FAPT: model of ", model_bytes,
                                                   " bytes in chunks of ", chunk_bytes));
  }
  const double chunk = std::min(chunk_bytes, model_bytes);
  const double rest = model_bytes - chunk;
  Search s;
  RunSearch(g, root, chunk, false, nullptr, -1, &s);
  int reach = 0;
  double full_max = 0;
  for (const Key& k : s.dist) {
    if (!std::isfinite(k.delay)) continue;
    ++reach;
    full_max = std::max(full_max, k.delay);
  }
  if (rest <= 0 || reach <= 1) return ShortestPathTree(g, s, root, false);
  // The fastest threshold that still spans.
  auto top = WidestSpanningThreshold(g, root);
  if (!top.ok()) return top.status();
  std::vector<double> rates;
  for (const OverlayLink& l : g.links()) {
    if (l.throughput_Bps <= *top) rates.push_back(l.throughput_Bps);
  }
  std::sort(rates.begin(), rates.end(), std::greater<double>());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
  std::vector<char> removed(g.links().size(), 0);
  AggregationTree best;
  double best_cost = kInf;
  for (double b : rates) {
    // Every later threshold is slower and no search beats the unrestricted one.
    if (full_max + rest / b >= best_cost) break;
    for (size_t e = 0; e < removed.size(); ++e) removed[e] = g.links()[e].throughput_Bps < b;
    RunSearch(g, root, chunk, false, &removed, -1, &s);
    int n = 0;
    double far = 0, slowest = kInf;
    for (int v = 0; v < g.nodes(); ++v) {
      if (!std::isfinite(s.dist[v].delay)) continue;
      ++n;
      far = std::max(far, s.dist[v].delay);
      if (s.via[v] >= 0) slowest = std::min(slowest, g.links()[s.via[v]].throughput_Bps);
    }
    if (n < reach) continue;
    const double cost = far + rest / slowest;
    if (cost < best_cost) {
      best_cost = cost;
      best = ShortestPathTree(g, s, root, false);
    }
  }
  return best;
}

namespace {

// The shares of fixed trees that make the busiest link direction least busy:
// min over share >= 0, sum share = total, of max_e load_e / c_e with
// load_e = sum of the shares of the trees using e. Pairwise Frank-Wolfe on
// the soft maximum (1 / beta) log sum_e exp(beta u_e / scale), beta raised
// over the iterations; each step moves share from the tree with the largest
// gradient to the one with the smallest, the amount by golden-section search.
void SolveTreeShares(const std::vector<std::vector<int>>& tree_links,
                     const std::vector<double>& capacity, double total, double scale,
                     int iterations, std::vector<double>* share) {
  const size_t k = tree_links.size();
  const size_t nlinks = capacity.size();
  std::vector<double> u(nlinks, 0), p(nlinks), grad(k);
  auto refresh = [&] {
    std::fill(u.begin(), u.end(), 0);
    for (size_t i = 0; i < k; ++i) {
      for (int e : tree_links[i]) u[e] += (*share)[i] / capacity[e];
    }
  };
  refresh();
  std::vector<int> in_a(nlinks, 0);
  std::vector<int> changed;
  for (int it = 0; it < iterations; ++it) {
    const double beta = (8.0 + 56.0 * it / std::max(1, iterations - 1)) / scale;
    const double umax = *std::max_element(u.begin(), u.end());
    for (size_t e = 0; e < nlinks; ++e) p[e] = std::exp(beta * (u[e] - umax)) / capacity[e];
    size_t a = k, b = k;
    for (size_t i = 0; i < k; ++i) {
      grad[i] = 0;
      for (int e : tree_links[i]) grad[i] += p[e];
      if ((*share)[i] > 0 && (a == k || grad[i] > grad[a])) a = i;
      if (b == k || grad[i] < grad[b]) b = i;
    }
    if (a == k || a == b || grad[a] <= grad[b] * (1 + 1e-12)) continue;
    // Links whose load changes: +delta on b's, -delta on a's (not both).
    changed.clear();
    for (int e : tree_links[a]) in_a[e] -= 1;
    for (int e : tree_links[b]) in_a[e] += 1;
    for (int e : tree_links[a]) {
      if (in_a[e] != 0) changed.push_back(e);
    }
    for (int e : tree_links[b]) {
      if (in_a[e] != 0) changed.push_back(e);
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    // The soft maximum along the move is convex in delta: find where its
    // derivative (only the changed links vary) crosses zero, by Newton's
    // method kept inside a shrinking bracket.
    auto slope = [&](double delta, double* curvature) {
      double d1 = 0, d2 = 0;
      for (int e : changed) {
        const double r = beta * in_a[e] / capacity[e];
        const double w = std::exp(std::min(700.0, beta * (u[e] - umax) + r * delta));
        d1 += r * w;
        d2 += r * r * w;
      }
      *curvature = d2;
      return d1;
    };
    double lo = 0, hi = (*share)[a], curvature = 0;
    double delta = hi;
    if (slope(hi, &curvature) > 0) {
      // Newton's step where it shrinks the bracket fast enough, else
      // bisection (far from the root an exponential's Newton step is short).
      delta = 0.5 * hi;
      double last_step = hi;
      for (int step = 0; step < 60; ++step) {
        const double d1 = slope(delta, &curvature);
        (d1 > 0 ? hi : lo) = delta;
        double next = curvature > 0 ? delta - d1 / curvature : lo;
        if (!(next > lo && next < hi) || std::abs(2 * d1) > std::abs(last_step * curvature)) {
          next = 0.5 * (lo + hi);
        }
        last_step = std::abs(next - delta);
        delta = next;
        if (hi - lo <= 1e-7 * total || last_step <= 1e-9 * total) break;
      }
    }
    for (int e : changed) {
      u[e] += in_a[e] * delta / capacity[e];
      in_a[e] = 0;
    }
    (*share)[a] -= delta;
    (*share)[b] += delta;
    if ((*share)[a] < total * 1e-12) (*share)[a] = 0;
  }
}

// One packing of DecidePackedMultiRoot with tree depth capped at
// depth_factor times each root's least possible (kInf: no cap).
struct Packing {
  std::vector<AggregationTree> trees;
  std::vector<int64_t> chunks;
  std::vector<double> link_busy_s;
  double busy_s = 0;      // the busiest link direction
  double fill_s = 0;      // the deepest used tree's chunk path, up and down
  double estimate_s = 0;  // busy_s + fill_s
};

// least_depth: per root, its shortest-path tree's depth (LeastDepths).
Packing PackTrees(const Overlay& g, const std::vector<int>& roots,
                  const std::vector<double>& least_depth, double model_bytes, double chunk_bytes,
                  int64_t chunk_count, int passes, int iterations, double depth_factor) {
  Packing out;
  const size_t nroots = roots.size();
  const size_t nlinks = g.links().size();
  std::vector<double> capacity(nlinks), fill(nlinks);
  double capacity_sum = 0;
  const double chunk = std::min(chunk_bytes, model_bytes);
  for (size_t e = 0; e < nlinks; ++e) {
    capacity[e] = g.links()[e].throughput_Bps;
    capacity_sum += capacity[e];
    fill[e] = g.LinkDelay(static_cast<int>(e), chunk);
  }
  std::vector<double> cap(nroots, kInf);
  for (size_t i = 0; i < nroots && std::isfinite(depth_factor); ++i) {
    cap[i] = least_depth[i] * depth_factor;
  }
  // Scale of a link's busy time: the ideal if every link were equally busy.
  const double scale =
      capacity_sum > 0 ? model_bytes * std::max(1, g.nodes() - 1) / capacity_sum : 1.0;
  constexpr double kBeta = 10;
  std::vector<double> share(nroots, model_bytes / static_cast<double>(nroots));
  std::vector<double> load(nlinks, 0);  // bytes per direction
  std::vector<std::vector<int>> tree_links(nroots);
  out.trees.assign(nroots, AggregationTree{});
  std::vector<double> key(nlinks);
  auto rebuild = [&](size_t i) {
    for (int e : tree_links[i]) load[e] -= share[i];
    // Exact marginal cost of putting share[i] on link e under the potential
    // sum exp(kBeta u / scale), as a log so nothing overflows; a minimum
    // spanning tree under it minimises the potential's growth.
    const double add = std::max(share[i], model_bytes * 1e-9);
    for (size_t e = 0; e < nlinks; ++e) {
      const double x = kBeta * load[e] / capacity[e] / scale;
      const double d = kBeta * add / capacity[e] / scale;
      key[e] = x + d + std::log(-std::expm1(-d));
    }
    out.trees[i] = MinWeightTree(g, roots[i], key, &fill, cap[i]);
    tree_links[i].clear();
    for (int v = 0; v < g.nodes(); ++v) {
      if (out.trees[i].parent[v] >= 0) {
        tree_links[i].push_back(g.LinkBetween(v, out.trees[i].parent[v]));
      }
    }
    for (int e : tree_links[i]) load[e] += share[i];
  };
  for (size_t i = 0; i < nroots; ++i) rebuild(i);
  for (int pass = 0; pass < passes; ++pass) {
    SolveTreeShares(tree_links, capacity, model_bytes, scale, iterations, &share);
    std::fill(load.begin(), load.end(), 0);
    for (size_t i = 0; i < nroots; ++i) {
      for (int e : tree_links[i]) load[e] += share[i];
    }
    if (pass + 1 < passes) {
      for (size_t i = 0; i < nroots; ++i) rebuild(i);
    }
  }
  // Whole chunks: the floor of each share, then each remaining chunk to
  // the tree whose busiest link stays least busy with it.
  const double chunk_size = model_bytes / static_cast<double>(chunk_count);
  out.chunks.assign(nroots, 0);
  std::fill(load.begin(), load.end(), 0);
  int64_t given = 0;
  for (size_t i = 0; i < nroots; ++i) {
    out.chunks[i] = std::min(chunk_count - given,
                             static_cast<int64_t>(std::floor(share[i] / chunk_size + 1e-9)));
    given += out.chunks[i];
    for (int e : tree_links[i]) load[e] += out.chunks[i] * chunk_size;
  }
  for (int64_t c = given; c < chunk_count; ++c) {
    size_t pick = 0;
    double pick_busy = kInf;
    for (size_t i = 0; i < nroots; ++i) {
      double busy = tree_links[i].empty() ? kInf : 0;  // a lone root uses no link
      for (int e : tree_links[i]) busy = std::max(busy, (load[e] + chunk_size) / capacity[e]);
      if (busy < pick_busy) {
        pick_busy = busy;
        pick = i;
      }
    }
    ++out.chunks[pick];
    for (int e : tree_links[pick]) load[e] += chunk_size;
  }
  out.link_busy_s.assign(nlinks, 0);
  for (size_t e = 0; e < nlinks; ++e) {
    out.link_busy_s[e] = load[e] / capacity[e];
    out.busy_s = std::max(out.busy_s, out.link_busy_s[e]);
  }
  for (size_t i = 0; i < nroots; ++i) {
    if (out.chunks[i] > 0)
      out.fill_s = std::max(out.fill_s, 2 * TreeSyncDelay(g, out.trees[i], chunk));
  }
  out.estimate_s = out.busy_s + out.fill_s;
  return out;
}

}  // namespace

absl::StatusOr<MultiRootFapt> DecidePackedMultiRoot(const Overlay& g, double model_bytes,
                                                    double chunk_bytes, int64_t chunk_count, int k,
                                                    const std::vector<int>& roots, int passes) {
  if (!(model_bytes > 0) || !std::isfinite(model_bytes) || chunk_count < 1 || !(chunk_bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("packed multi-root: model of ", model_bytes,
                                                   " bytes in ", chunk_count, " chunks of ",
                                                   chunk_bytes));
  }
  MultiRootFapt out;
  if (roots.empty()) {
    if (k < 1 || k > g.nodes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed multi-root: ", k, " roots among ", g.nodes(), " nodes"));
    }
    // Score: the pipelined delay of each node's shortest-path tree over the
    // links at least as fast as the widest spanning tree's slowest (one
    // search per node; PipelinedFaptTree would try more thresholds).
    auto widest = WidestSpanningThreshold(g, 0);
    if (!widest.ok()) return widest.status();
    const double top = *widest;
    std::vector<char> slow(g.links().size(), 0);
    for (size_t e = 0; e < slow.size(); ++e) slow[e] = g.links()[e].throughput_Bps < top;
    const double chunk = std::min(chunk_bytes, model_bytes);
    std::vector<double> scores(g.nodes());
    Search s;
    for (int v = 0; v < g.nodes(); ++v) {
      RunSearch(g, v, chunk, false, &slow, -1, &s);
      double far = 0;
      for (const Key& key : s.dist) {
        if (std::isfinite(key.delay)) far = std::max(far, key.delay);
      }
      scores[v] = QualityScore(far + (std::isfinite(top) ? (model_bytes - chunk) / top : 0));
    }
    out.roots = TopKRoots(scores, k);
  } else {
    for (int r : roots) {
      if (auto st = CheckRoot(g, r); !st.ok()) return st;
    }
    out.roots = roots;
  }
  // One tree per root, but at most one root per chunk carries any: the
  // first chunk_count roots (best first) are packed; the rest get a tree
  // (for a later decision) and no chunk.
  const size_t packed = std::min<size_t>(out.roots.size(), static_cast<size_t>(chunk_count));
  const std::vector<int> pack_roots(out.roots.begin(), out.roots.begin() + packed);
  // Deeper trees spread the load better but fill the chunk pipeline
  // later: probe a few depth caps with one short pass each, then pack
  // with the best one in full.
  // Each root's least possible depth: its shortest-path tree's.
  std::vector<double> least_depth(packed, 0);
  Search search;
  for (size_t i = 0; i < packed; ++i) {
    RunSearch(g, pack_roots[i], std::min(chunk_bytes, model_bytes), false, nullptr, -1, &search);
    for (const Key& key : search.dist) {
      if (std::isfinite(key.delay)) least_depth[i] = std::max(least_depth[i], key.delay);
    }
  }
  double best_factor = kInf, best_estimate = kInf;
  for (double factor : {1.0, 1.5, 2.0, kInf}) {
    const Packing p =
        PackTrees(g, pack_roots, least_depth, model_bytes, chunk_bytes, chunk_count, 1, 60, factor);
    if (p.estimate_s < best_estimate) {
      best_estimate = p.estimate_s;
      best_factor = factor;
    }
  }
  Packing best = PackTrees(g, pack_roots, least_depth, model_bytes, chunk_bytes, chunk_count,
                           std::max(1, passes), 200, best_factor);
  for (size_t i = packed; i < out.roots.size(); ++i) {
    // A root beyond the chunk count aggregates nothing in this version.
    AggregationTree alone;
    alone.root = out.roots[i];
    alone.parent.assign(g.nodes(), -1);
    alone.route.assign(g.nodes(), Route{});
    best.trees.push_back(std::move(alone));
    best.chunks.push_back(0);
  }
  out.trees = std::move(best.trees);
  out.chunks = std::move(best.chunks);
  out.link_busy_s = std::move(best.link_busy_s);
  out.cost_s = best.estimate_s;
  for (const AggregationTree& t : out.trees) {
    out.delay_s.push_back(PipelinedTreeDelay(g, t, model_bytes, chunk_bytes));
    out.score.push_back(QualityScore(out.delay_s.back()));
  }
  return out;
}

std::vector<Route> AuxiliaryPaths(const Overlay& g, int src, int dst, const Route& primary,
                                  double bytes, int max_paths, const std::vector<char>* excluded,
                                  double max_stretch) {
  std::vector<Route> out;
  if (src < 0 || dst < 0 || src >= g.nodes() || dst >= g.nodes() || src == dst) return out;
  std::vector<char> removed(g.links().size(), 0);
  if (excluded != nullptr && excluded->size() == removed.size()) removed = *excluded;
  auto remove_route = [&](const Route& r) {
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      const int link = g.LinkBetween(r[i], r[i + 1]);
      if (link >= 0) removed[link] = 1;
    }
  };
  const double limit = max_stretch > 0 ? max_stretch * RouteDelay(g, primary, bytes) : kInf;
  remove_route(primary);
  Search s;
  for (int p = 0; p < max_paths; ++p) {
    // Search from dst so the route reads src ... dst when walked back.
    RunSearch(g, dst, bytes, false, &removed, src, &s, limit);
    if (s.via[src] < 0) break;
    Route r = RouteToSource(g, s, src);
    remove_route(r);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::vector<Route>> TreeAuxiliaryPaths(const Overlay& g, const AggregationTree& t,
                                                   double bytes, int max_paths) {
  std::vector<std::vector<Route>> out(g.nodes());
  for (int v = 0; v < g.nodes(); ++v) {
    if (t.parent[v] < 0) continue;
    out[v] = AuxiliaryPaths(g, v, t.parent[v], t.route[v], bytes, max_paths);
  }
  return out;
}

std::vector<std::vector<std::vector<Route>>> MultiTreeAuxiliaryPaths(
    const Overlay& g, const std::vector<AggregationTree>& trees, double bytes, int max_paths,
    const std::vector<char>* excluded, double max_stretch) {
  std::vector<std::vector<std::vector<Route>>> out(trees.size());
  // (lo, hi) -> routes from lo to hi.
  absl::flat_hash_map<std::pair<int, int>, std::vector<Route>> cache;
  for (size_t i = 0; i < trees.size(); ++i) {
    const AggregationTree& t = trees[i];
    out[i].assign(g.nodes(), {});
    for (int v = 0; v < g.nodes(); ++v) {
      const int p = t.parent[v];
      if (p < 0) continue;
      const int lo = std::min(v, p), hi = std::max(v, p);
      auto it = cache.find({lo, hi});
      if (it == cache.end()) {
        Route primary = t.route[v];
        if (v != lo) std::reverse(primary.begin(), primary.end());
        it = cache
                 .emplace(std::pair{lo, hi}, AuxiliaryPaths(g, lo, hi, primary, bytes, max_paths,
                                                            excluded, max_stretch))
                 .first;
      }
      out[i][v] = it->second;
      if (v != lo) {
        for (Route& r : out[i][v]) std::reverse(r.begin(), r.end());
      }
    }
  }
  return out;
}

std::vector<std::vector<std::vector<Route>>> PackedAuxiliaryPaths(const Overlay& g,
                                                                  const MultiRootFapt& m,
                                                                  double bytes, int max_paths) {
  constexpr double kBusyFraction = 0.5;
  constexpr double kStretch = 2;
  if (m.link_busy_s.size() != g.links().size()) {
    return MultiTreeAuxiliaryPaths(g, m.trees, bytes, max_paths);
  }
  const double busiest = *std::max_element(m.link_busy_s.begin(), m.link_busy_s.end());
  std::vector<char> busy(g.links().size());
  for (size_t e = 0; e < busy.size(); ++e) busy[e] = m.link_busy_s[e] > kBusyFraction * busiest;
  // Only busy primaries need relief: the others' edges get no routes.
  std::vector<AggregationTree> trees = m.trees;
  for (AggregationTree& t : trees) {
    for (int v = 0; v < g.nodes(); ++v) {
      if (t.parent[v] >= 0 && !busy[g.LinkBetween(v, t.parent[v])]) t.parent[v] = -1;
    }
  }
  return MultiTreeAuxiliaryPaths(g, trees, bytes, max_paths, &busy, kStretch);
}

int ChooseSendPath(int primary_occupied, absl::Span<const int> auxiliary_occupied,
                   int primary_busy_bound, int auxiliary_queue_length) {
  if (primary_occupied < primary_busy_bound) return 0;
  for (size_t i = 0; i < auxiliary_occupied.size(); ++i) {
    if (auxiliary_occupied[i] < auxiliary_queue_length) return static_cast<int>(i) + 1;
  }
  return 0;
}

absl::StatusOr<AggregationTree> StarTree(const Overlay& g, int root, double bytes) {
  if (auto st = CheckRoot(g, root); !st.ok()) return st;
  Search s;
  RunSearch(g, root, bytes, /*by_hops=*/true, nullptr, -1, &s);
  return ShortestPathTree(g, s, root, /*full_routes=*/true);
}

absl::StatusOr<AggregationTree> BalancedTree(const Overlay& g, int root, int k, double bytes) {
  if (auto st = CheckRoot(g, root); !st.ok()) return st;
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat("balanced tree: arity ", k));
  const int n = g.nodes();
  // Only nodes the root can reach take part; the others stay detached.
  Search s;
  RunSearch(g, root, bytes, true, nullptr, -1, &s);
  std::vector<int> order{root};
  for (int v = 0; v < n; ++v) {
    if (v != root && s.via[v] >= 0) order.push_back(v);
  }
  AggregationTree t;
  t.root = root;
  t.parent.assign(n, -1);
  t.route.assign(n, Route{});
  // Group children by parent so each parent needs one search.
  for (size_t pi = 0; pi < order.size(); ++pi) {
    const size_t first = pi * k + 1;
    if (first >= order.size()) break;
    const int p = order[pi];
    RunSearch(g, p, bytes, true, nullptr, -1, &s);
    for (size_t c = first; c < std::min(order.size(), first + k); ++c) {
      t.parent[order[c]] = p;
      t.route[order[c]] = RouteToSource(g, s, order[c]);
    }
  }
  return t;
}

absl::StatusOr<AggregationTree> MaxThroughputTree(const Overlay& g, int root) {
  if (auto st = CheckRoot(g, root); !st.ok()) return st;
  std::vector<double> weight(g.links().size());
  for (size_t e = 0; e < weight.size(); ++e) weight[e] = -g.links()[e].throughput_Bps;
  return MinWeightTree(g, root, weight);
}

}  // namespace policy
}  // namespace hetps
