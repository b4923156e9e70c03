// Scenarios for the policy simulator: a YAML file describes the network
// (an overlay of data centers, an access network of hosts behind one
// non-blocking core, or a random graph), how link rates change, the model,
// the workers' compute speeds, and the policies to compare. RunScenario
// replays the same rate sequence (seeded) for each policy, running the real
// lib/policy decisions every update period, and reports per-policy mean
// iteration time and speed-up against the baseline; FormatTable and PlotSvg
// render the results. Not thread-safe; deterministic for a given file.
// Format: docs/simulator.md.
#ifndef HETPS_LIB_SIM_SCENARIO_H_
#define HETPS_LIB_SIM_SCENARIO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {
namespace sim {

struct Scenario {
  std::string name;
  std::string description;
  uint64_t seed = 1;
  double horizon_s = 600;  // simulated time per policy
  int max_rounds = 100000;
  double model_bytes = 0;
  double chunk_bytes = 4e6;
  // Compute: worker v takes batch_v * sample_s / speed_v per round.
  double sample_s = 0;
  int64_t batch = 32;          // per worker; the total batch is batch * workers
  std::vector<double> speeds;  // per worker, default 1
  // Network.
  enum class Kind { kOverlay, kAccess, kRandom };
  Kind kind = Kind::kOverlay;
  int nodes = 0;  // workers (overlay and random: every node; access: hosts)
  std::vector<std::string> names;
  std::vector<std::pair<int, int>> links;  // overlay
  double degree = 4;                       // random: mean degree
  double rate_min_Bps = 0, rate_max_Bps = 0;
  // access: each host's rate (rates_mbit_s), instead of drawing them;
  // rotated by one host each change_every_s.
  std::vector<double> fixed_rates_Bps;
  double latency_s = 0;
  double change_every_s = 0;  // 0: rates drawn once
  // Policies.
  std::vector<std::string> policies;
  std::string baseline;
  int roots = 0;  // mr-fapt; 0: every node
  int bkt_arity = 2;
  int primary_busy_bound = 2;      // paper Table II
  int auxiliary_queue_length = 1;  // paper Table II
  int auxiliary_paths = 3;
  bool late_binding = true;
  bool progress_order = true;     // sender queues by chunk progress (false: FIFO)
  double update_s = 5;            // paper Table II (UPDATE_TIME)
  double update_rate = 0.0;       // UPDATE_RATE: fraction of decisions that must change
  double wlbs_theta = 0.05;       // minor adjustment when batch times differ by more (relative)
  double adlb_threshold_s = 1.0;  // Algorithm 1's similarity threshold
};

// Parses and validates a scenario; every error names the key.
absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text);
absl::StatusOr<Scenario> LoadScenario(const std::string& path);

// The policies RunScenario knows, for --help and errors.
std::vector<std::string> KnownPolicies();

struct RoundPoint {
  double start_s = 0;
  double duration_s = 0;
};

struct PolicyResult {
  std::string policy;
  std::vector<RoundPoint> rounds;
  double mean_iteration_s = 0;
  double speedup = 0;             // baseline mean / this mean
  double auxiliary_fraction = 0;  // chunk transfers over auxiliary routes
  double decision_ms_mean = 0;    // wall-clock time of one policy decision
  double decision_ms_max = 0;
  int decisions = 0;
  int versions = 0;  // policy versions issued (UPDATE_RATE holds some back)
};

// progress: called after each policy with a one-line summary (may be null).
absl::StatusOr<std::vector<PolicyResult>> RunScenario(
    const Scenario& s, const std::function<void(const std::string&)>& progress);

// A Markdown table: one row per policy.
std::string FormatTable(const Scenario& s, const std::vector<PolicyResult>& results);
// Iteration time over simulated time, one line per policy.
std::string PlotSvg(const Scenario& s, const std::vector<PolicyResult>& results);

}  // namespace sim
}  // namespace hetps

#endif  // HETPS_LIB_SIM_SCENARIO_H_
