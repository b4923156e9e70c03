// NetStorm: aggregation topologies for a wide-area overlay (paper:
// ../shared/papers/netstorm-fapt-auxiliary-routes.txt, sections III, IV and
// VI). Pure functions of plain values: no I/O, no threads, no clock.
// Thread-compatible: an Overlay is immutable after Create and may be shared.
//
// Model: an undirected overlay graph of data centers; each link has a
// measured throughput (bytes/s, per direction) and a one-way latency. The
// transfer delay of a link for a payload of `bytes` is latency + bytes /
// throughput. An aggregation tree sends every node's update to the root;
// a parent forwards only after all its children arrived, so (Theorem 1) the
// tree's synchronization delay is the largest sum of link delays on a path
// from a node to the root. A FAPT (fastest aggregation path tree) is the
// shortest-path tree to its root under those delays, which minimises every
// path and so that maximum too.
//
// Where we differ from the paper (docs/policy.md):
// - Algorithm 3 as printed removes every edge used by any pair's path from
//   one global graph and repeats; after one round almost nothing is left.
//   We search per sender/receiver pair: successive shortest paths, each on
//   the graph minus the edges of the primary route and of the earlier
//   auxiliary paths of that pair, up to a bound. Same guarantee (the paths
//   of a pair are edge-disjoint), useful paths for every pair.
// - Only the pairs a tree actually uses (child to parent) get auxiliary
//   paths; the paper computes all N^2 pairs.
// - The quality score is 1 / delay (the paper names a score without giving
//   its formula; any decreasing function gives the same top-k).
#ifndef HETPS_LIB_POLICY_NETSTORM_H_
#define HETPS_LIB_POLICY_NETSTORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetps {
namespace policy {

struct OverlayLink {
  int a = 0;
  int b = 0;
  double throughput_Bps = 0;  // measured, per direction, > 0
  double latency_s = 0;       // one way, >= 0
};

// Route: the nodes a transfer passes, sender first, receiver last.
using Route = std::vector<int>;

// An aggregation tree over the overlay. parent[v] is the node v sends to
// (-1 for the root and for nodes the tree cannot reach); route[v] is how v's
// transfer to its parent travels over the overlay (one link for FAPT and
// MST, possibly several for STAR and BKT, whose logical edges are routed).
struct AggregationTree {
  int root = -1;
  std::vector<int> parent;
  std::vector<Route> route;
};

// Adjacency of a validated overlay graph. Immutable.
class Overlay {
 public:
  // InvalidArgument on nodes < 1, an endpoint out of range, a self-loop,
  // two links joining the same pair (merge them first), or a throughput that is not finite and > 0
  // or a latency not finite and >= 0. O(N + E).
  static absl::StatusOr<Overlay> Create(int nodes, std::vector<OverlayLink> links);

  int nodes() const { return nodes_; }
  const std::vector<OverlayLink>& links() const { return links_; }
  // Link ids incident to v.
  absl::Span<const int> incident(int v) const {
    return absl::MakeConstSpan(incident_.data() + start_[v], start_[v + 1] - start_[v]);
  }
  int Other(int link, int v) const { return links_[link].a == v ? links_[link].b : links_[link].a; }
  // The link joining a and b; -1 if none. O(deg a).
  int LinkBetween(int a, int b) const;
  double LinkDelay(int link, double bytes) const {
    return links_[link].latency_s + bytes / links_[link].throughput_Bps;
  }

 private:
  int nodes_ = 0;
  std::vector<OverlayLink> links_;
  std::vector<int> start_;     // CSR offsets, nodes_ + 1
  std::vector<int> incident_;  // link ids
};

// Sum of link delays along a route. +inf if two consecutive nodes are not
// adjacent. O(route length max degree).
double RouteDelay(const Overlay& g, const Route& r, double bytes);

// Theorem 1: the largest total delay from any node the tree reaches to its
// root. +inf if a route is broken. O(N + total route length).
double TreeSyncDelay(const Overlay& g, const AggregationTree& t, double bytes);

// Nodes reachable from the root in the tree (the root included). O(N).
int TreeSize(const AggregationTree& t);

// FAPT: the shortest-path tree to `root` under link delays for `bytes`
// (Dijkstra, binary heap). Unreachable nodes get parent -1. Ties go to the
// lower link id, so the result is deterministic. O(E log N).
absl::StatusOr<AggregationTree> FaptTree(const Overlay& g, int root, double bytes);

// The synchronization delay of every node's FAPT (one Dijkstra per node,
// tree delays only, no trees kept). O(N E log N).
std::vector<double> AllFaptDelays(const Overlay& g, double bytes);

// Quality score of a tree: 1 / delay (0 for an infinite delay).
double QualityScore(double delay_s);

// The k nodes with the highest scores, best first (ties: lower id).
// O(N log k).
std::vector<int> TopKRoots(const std::vector<double>& scores, int k);

// Multi-root FAPT (Definition 3, Algorithms 1 and 2). `roots`: the root set
// kept from the first decision (empty: choose the top k by score now). Each
// root's tree is its FAPT for its own share of the model; chunks are split
// among roots in proportion to score (largest remainder; every root at
// least one chunk when chunks >= roots).
struct MultiRootFapt {
  std::vector<int> roots;
  std::vector<AggregationTree> trees;  // per root
  std::vector<double> delay_s;         // per root, for the whole model
  std::vector<double> score;           // per root
  std::vector<int64_t> chunks;         // per root; sums to the chunk count
  double cost_s = 0;                   // max over roots of the delay of its share
  // DecidePackedMultiRoot only: the planned bytes per direction on each
  // link divided by its throughput (the link's busy time per round).
  std::vector<double> link_busy_s;
};

// O(N E log N) when choosing roots (every node scored), O(k E log N) after.
absl::StatusOr<MultiRootFapt> DecideMultiRootFapt(const Overlay& g, double model_bytes,
                                                  int64_t chunk_count, int k,
                                                  const std::vector<int>& roots);

// Our multi-root variant for links the trees share (docs/policy.md): the
// paper treats the k trees as independent, but trees that pick the same fast
// links split them, so the busiest link sets the pace. Trees are built one
// after another (roots in the given order) by Dijkstra on link delays that
// count the bytes earlier trees already put on each link (latency + (load +
// share) / throughput); then the roots' shares are balanced (a few
// multiplicative steps) so that no tree's busiest link is far slower than
// another's. Roots as DecideMultiRootFapt (chosen by score once, then kept).
// O(k E log N + iterations k N).
absl::StatusOr<MultiRootFapt> DecideSharedLinkMultiRoot(const Overlay& g, double model_bytes,
                                                        int64_t chunk_count, int k,
                                                        const std::vector<int>& roots);

// Our pipelined tree delay (docs/policy.md). Theorem 1 charges every hop
// the whole model (latency + model / throughput), as if a node forwarded
// only after receiving everything; NetStorm sends chunks and forwards each
// as soon as the children delivered it, so a path pays each hop's latency
// plus one chunk to fill the pipe, and the rest of the model flows at the
// pace of the slowest tree link (each tree link carries the model once per
// direction):
//   max over nodes v of sum over v's path (latency + chunk / throughput)
//   + (model - chunk) / min over the tree's links of throughput.
// chunk_bytes >= model_bytes gives Theorem 1's delay. Links shared by
// several routes of a routed tree (STAR, BKT) are not charged twice.
// +inf if a route is broken. O(N + total route length).
double PipelinedTreeDelay(const Overlay& g, const AggregationTree& t, double model_bytes,
                          double chunk_bytes);

// The spanning tree of the root's component with the least
// PipelinedTreeDelay (exact). For a threshold b, the shortest-path tree
// (latency + chunk / throughput) over the links of throughput >= b is, by
// construction, no worse than any tree whose slowest link is b; thresholds
// are tried from the fastest that still spans down, and the search stops
// once (model - chunk) / b plus the unrestricted largest distance cannot
// beat the best found. With chunk_bytes >= model_bytes it is FaptTree.
// O(T E log N) for the T thresholds tried (usually a handful; E at most).
absl::StatusOr<AggregationTree> PipelinedFaptTree(const Overlay& g, int root, double model_bytes,
                                                  double chunk_bytes);

// Our multi-root variant for trees that share links (docs/policy.md): the
// model is split among k trees, one per root, so that the busiest link
// direction is as idle as possible (a fractional spanning-tree packing, one
// tree per root). Roots: the top k by pipelined FAPT score, then kept (as
// DecideMultiRootFapt). Trees: each rebuilt in turn as the minimum spanning
// tree under the marginal cost of the others' load (a soft maximum of link
// utilisation), shares re-solved between passes by pairwise Frank-Wolfe on
// that soft maximum; `passes` rounds. Tree depth (sum of latency + chunk /
// throughput to the root) is capped at 1, 1.5, 2 times the root's
// shortest-path tree's or not at all, whichever gives the least busiest
// link time plus pipeline fill (probed with one short pass each). Only the
// first min(k, chunk_count) roots get trees that carry chunks; the others
// get no chunk and a tree of the root alone. Chunks: the floor of
// each share, the rest one by one where the busiest link grows least.
// Roots are scored with one search per node (the pipelined delay at the
// widest spanning threshold), not PipelinedFaptTree. link_busy_s is filled;
// cost_s is the busiest link time plus the deepest tree's fill, up and down.
// O(N E log N) to score roots; then O(passes (k' E log E + I (k' N + E)))
// with k' = min(k, chunks) and I = 200 share iterations.
absl::StatusOr<MultiRootFapt> DecidePackedMultiRoot(const Overlay& g, double model_bytes,
                                                    double chunk_bytes, int64_t chunk_count, int k,
                                                    const std::vector<int>& roots, int passes = 4);

// Algorithm 3, per pair: up to max_paths routes from src to dst, each the
// shortest (delay for `bytes`) on the overlay minus the links of `primary`
// and of the routes found before it; shortest first. Every route is
// link-disjoint from the primary and from the others (for a one-hop primary
// that is the one link used, not the other parallel links). O(max_paths E
// log N), usually far less: each search stops when it reaches dst.
// `excluded` (per link, may be null): links no route may use. max_stretch
// > 0 (ours): routes slower than max_stretch times the primary's delay are
// not searched for (each search stops there), which bounds the work on big
// graphs and skips routes too slow to relieve the primary.
std::vector<Route> AuxiliaryPaths(const Overlay& g, int src, int dst, const Route& primary,
                                  double bytes, int max_paths,
                                  const std::vector<char>* excluded = nullptr,
                                  double max_stretch = 0);

// Auxiliary routes for every child-to-parent edge of a tree (indexed by the
// child; empty for the root). O(N max_paths E log N) worst case.
std::vector<std::vector<Route>> TreeAuxiliaryPaths(const Overlay& g, const AggregationTree& t,
                                                   double bytes, int max_paths);

// The same for several trees (a multi-root FAPT): each unordered node pair
// is searched once and reused, reversed where the trees use it the other
// way (delays are symmetric). Indexed [tree][child]. O(P max_paths E log N)
// for P distinct pairs (at most E: tree edges are overlay links).
// `excluded` and max_stretch as AuxiliaryPaths (ours: the packed trees
// exclude the links they already keep busy).
std::vector<std::vector<std::vector<Route>>> MultiTreeAuxiliaryPaths(
    const Overlay& g, const std::vector<AggregationTree>& trees, double bytes, int max_paths,
    const std::vector<char>* excluded = nullptr, double max_stretch = 0);

// Ours, for a DecidePackedMultiRoot plan: relieve the busy links through
// the idle ones. A link is busy when the trees keep it busy more than half
// the busiest link's time. Tree edges over busy links get routes (as
// MultiTreeAuxiliaryPaths) over idle links only, at most 2 times the
// primary's delay; edges over idle links need no relief and get none (an
// auxiliary chunk on a busy link would only slow a primary down). Without link_busy_s (other
// plans): every link, no stretch bound.
std::vector<std::vector<std::vector<Route>>> PackedAuxiliaryPaths(const Overlay& g,
                                                                  const MultiRootFapt& m,
                                                                  double bytes, int max_paths);

// Section VI-A, the sender's choice for a new chunk: the primary path while
// fewer than primary_busy_bound chunks occupy its queue; else the first
// auxiliary path (callers order them fastest first) with fewer than
// auxiliary_queue_length; else the primary anyway. Returns 0 for the
// primary, i + 1 for auxiliary path i. O(number of auxiliary paths).
int ChooseSendPath(int primary_occupied, absl::Span<const int> auxiliary_occupied,
                   int primary_busy_bound, int auxiliary_queue_length);

// Baselines. Logical edges of STAR and BKT are routed by the fewest hops
// (ties: lower delay for `bytes`), as IP routing over the overlay would.
// STAR (one PS, MXNet): every node sends to the root. O(E log N).
absl::StatusOr<AggregationTree> StarTree(const Overlay& g, int root, double bytes);
// BKT (balanced k-ary tree, MLNET): the root, then the other nodes in id
// order, in heap layout (node at position i sends to position (i - 1) / k).
// O(N E log N) for the routes.
absl::StatusOr<AggregationTree> BalancedTree(const Overlay& g, int root, int k, double bytes);
// MST (TSEngine): the maximum-throughput spanning tree (Prim), rooted at
// `root`. O(E log N).
absl::StatusOr<AggregationTree> MaxThroughputTree(const Overlay& g, int root);

}  // namespace policy
}  // namespace hetps

#endif  // HETPS_LIB_POLICY_NETSTORM_H_
