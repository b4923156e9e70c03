// The policy value schedd issues: one versioned struct holding every
// decision a node needs for a round (which server aggregates each chunk, the
// aggregation trees with their auxiliary routes, each worker's batch), a
// diff between two values, and the UPDATE_RATE rule: a new version is issued
// only when enough of the policy changed, so small measurement noise does not
// make the cluster switch policies (and migrate chunks) every period.
// Plain values; pure functions; thread-compatible.
#ifndef HETPS_LIB_POLICY_POLICY_VALUE_H_
#define HETPS_LIB_POLICY_POLICY_VALUE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/policy/netstorm.h"

namespace hetps {
namespace policy {

struct PolicyValue {
  uint64_t version = 0;
  std::vector<int> chunk_server;  // chunk -> the node that aggregates it
  // One tree per aggregating node (trees[i].root), and per tree the
  // auxiliary routes of each child-to-parent edge (indexed by child; may be
  // empty when auxiliary paths are off).
  std::vector<AggregationTree> trees;
  std::vector<std::vector<std::vector<Route>>> auxiliary;
  std::vector<int64_t> batch;  // per worker
};

struct PolicyDiff {
  int64_t chunks_moved = 0;        // chunks whose server changed (or added/removed)
  int64_t chunks = 0;              // max of the two chunk counts
  int64_t tree_edges_changed = 0;  // (root, child) whose route changed
  int64_t tree_edges = 0;          // edges of the larger of the two per root
  int64_t auxiliary_changed = 0;   // (root, child) whose auxiliary routes changed
  int64_t workers_changed = 0;     // workers whose batch changed
  int64_t workers = 0;
  // Fraction of decisions that changed: (chunks_moved + tree_edges_changed +
  // workers_changed) / (chunks + tree_edges + workers); 0 when both empty.
  // Auxiliary routes do not count: they follow the trees and cost nothing
  // to switch.
  double rate = 0;
};

// O(C + sum of tree sizes and route lengths + W).
PolicyDiff Diff(const PolicyValue& from, const PolicyValue& to);

// Issues `proposal` as version current.version + 1 when Diff(current,
// proposal).rate >= update_rate (and something changed), else keeps
// `current`. A current value with version 0 (nothing issued yet) always
// takes the proposal. update_rate in [0, 1] (InvalidArgument otherwise).
struct UpdateResult {
  PolicyValue value;
  bool issued = false;
  PolicyDiff diff;
};
absl::StatusOr<UpdateResult> Update(const PolicyValue& current, PolicyValue proposal,
                                    double update_rate);

// A chunk map with counts[i] chunks on servers[i] (sum = chunk count) that
// moves as few chunks as possible from `previous` (a map of the same length,
// or empty): a chunk stays where it is while its server is within its new
// count; the surplus moves to servers below theirs. Chunks of servers not
// in `servers` always move. O(C + S). InvalidArgument on negative counts,
// duplicate servers, or a previous map of another length.
absl::StatusOr<std::vector<int>> RebalanceChunks(const std::vector<int>& previous,
                                                 const std::vector<int>& servers,
                                                 const std::vector<int64_t>& counts);

}  // namespace policy
}  // namespace hetps

#endif  // HETPS_LIB_POLICY_POLICY_VALUE_H_
