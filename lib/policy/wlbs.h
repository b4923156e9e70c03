// WLBS: weight-based balancing of training work across workers of unequal
// speed (paper: ../shared/papers/wlbs-weight-based-load-balancing.txt,
// section 3.2). Pure functions of plain values; thread-compatible.
//
// Two levels, as in the paper:
// - initial division, before training, from static capability indicators
//   (cores, memory, GPUs): each worker's samples per epoch and batch size
//   in proportion to its indicator;
// - partial adjustment, during training, between the slowest and the
//   fastest worker of the last period only, so one adjustment moves little
//   work: major (samples per epoch, while epoch times differ by more than
//   theta_e) and minor (batch size, while batch times differ by more than
//   theta_b). A failed worker's work goes to the others.
//
// The paper does not say how much work one adjustment moves. We re-split
// the pair's units so that, at the speeds just measured (units / time),
// both would take the same time: one step equalises the pair exactly under
// a linear cost model, and repeated steps approach the ideal split
// (units proportional to speed). docs/policy.md.
#ifndef HETPS_LIB_POLICY_WLBS_H_
#define HETPS_LIB_POLICY_WLBS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {
namespace policy {

struct NodeCapability {
  double cores = 0;
  double memory_gib = 0;
  int gpus = 0;
};

// Indicator = per_core * cores + per_memory_gib * memory + per_gpu * gpus.
// The paper aggregates "CPUs, cores and memory" without giving weights.
// These defaults are starting guesses, not measurements: the initial split
// only has to be roughly right, since partial adjustment then follows the
// speeds actually measured.
struct CapabilityWeights {
  double per_core = 1.0;
  double per_memory_gib = 0.05;
  double per_gpu = 8.0;
};

double CapabilityIndicator(const NodeCapability& c, const CapabilityWeights& w);

// Splits `total` units in proportion to `weights` (each finite, >= 0, not
// all 0) by largest remainder, each part at least min_each (InvalidArgument
// when total < N min_each). Sums to total exactly. O(N log N).
absl::StatusOr<std::vector<int64_t>> SplitProportional(int64_t total,
                                                       const std::vector<double>& weights,
                                                       int64_t min_each);

struct WorkerShares {
  std::vector<int64_t> samples;  // per epoch
  std::vector<int64_t> batch;    // per iteration
};

// Initial division: samples and batch in proportion to the indicators
// (every worker gets at least one sample and a batch of 1). O(N log N).
absl::StatusOr<WorkerShares> InitialDivision(const std::vector<NodeCapability>& nodes,
                                             int64_t total_samples, int64_t total_batch,
                                             const CapabilityWeights& weights = {});

struct Adjustment {
  std::vector<int64_t> units;  // the new split (same sum)
  bool adjusted = false;       // false: within theta (or nothing to move)
  int from = -1;               // the slowest worker (gave units)
  int to = -1;                 // the fastest worker (took units)
};

// One partial adjustment of `units` (samples per epoch for a major one,
// batch size for a minor one) from each worker's measured time for its
// current units: if max - min time exceeds theta_s, the slowest and fastest
// workers' units are re-split so both would take equally long at their
// measured speeds; each keeps at least min_units. Times must be finite and
// > 0, units >= min_units. O(N).
absl::StatusOr<Adjustment> PartialAdjust(const std::vector<int64_t>& units,
                                         const std::vector<double>& time_s, double theta_s,
                                         int64_t min_units);

// Failed workers' units go to the others in proportion to their measured
// speeds (units / time); failed workers end with 0. The sum is kept.
// InvalidArgument when every worker failed. O(N log N).
absl::StatusOr<std::vector<int64_t>> RedistributeFailed(const std::vector<int64_t>& units,
                                                        const std::vector<double>& time_s,
                                                        const std::vector<bool>& failed);

}  // namespace policy
}  // namespace hetps

#endif  // HETPS_LIB_POLICY_WLBS_H_
