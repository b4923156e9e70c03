// A closed loop for schedd's policy loop: PolicyLoop (the code schedd
// runs) fed by a flow-level network instead of a cluster, in simulated
// time, deterministic. H hosts, each a psd and a worker sharing one
// access link of the given rate each way; rounds of a parameter server
// over lib/sim's max-min fair FlowNetwork: every worker pushes each psd
// its share in 64 KB segments, one after another per pair, and a psd
// sends a segment back to every worker once every worker's copy of it
// arrived, so pushes and pulls overlap as in the cluster. Each finished
// segment is a probe of its link, kept as the nodes' link meter keeps
// them (the largest of the latest 4 within the job's measurement window)
// and reported with its age; what each host's link delivered per 50 ms
// goes in as node traffic. The loop looks every 250 ms; a plan takes
// effect at the next round, and settles when that round ends; the round
// after it is the map's first of its own (PolicyJob::plan_round_ms).
//
// RunPermutation is bench/adaptive.sh --part permute's scenario: every
// period_s the rates move one host along. The readings are ideal (max-min
// shares, no shaper bursts, no rate control; `noise` multiplies each
// probe by a seeded factor in [1-noise, 1+noise]), so a change missed
// here is missed by the decision rule, and one missed only live, by the
// measurements (docs/awareness.md).
#ifndef HETPS_DAEMONS_SCHEDD_CLOSED_LOOP_H_
#define HETPS_DAEMONS_SCHEDD_CLOSED_LOOP_H_

#include <cstdint>
#include <string>
#include <vector>

namespace hetps {

struct PermutationOptions {
  std::vector<double> rates_mbit = {100, 50, 25, 10};  // by host, each way
  double period_s = 60;
  int changes = 4;
  int64_t update_time_s = 5;
  double noise = 0;
  uint32_t seed = 1;
  bool verbose = false;  // print each plan issued (stdout)
};

struct ChangeResult {
  std::vector<double> rates_mbit;  // after the change
  double best_s = 0;               // a round of ADLB's map for the true rates
  double settled_s = 0;            // the median round of the period's second half
  // From the change to the end of the first of 3 rounds in a row within
  // 10% of best_s; -1: never in the period.
  double recovered_s = -1;
  double goal_s = 0;  // 2 update periods + best_s
  bool met = false;
  std::vector<uint64_t> versions;  // plans that took effect in the period
};

// An empty result and a message in *error when the options are out of
// range (2-64 hosts, rates in (0, 1e5] Mbit/s, period_s 10-3600, changes
// 1-100, update_time_s 1-600, noise in [0, 1)).
std::vector<ChangeResult> RunPermutation(const PermutationOptions& o, std::string* error);

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_CLOSED_LOOP_H_
