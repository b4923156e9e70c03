// Flow-level discrete-event simulation of synchronous training rounds over a
// physical network (the policy simulator's engine). Each round: every worker
// computes, then every aggregation tree gathers its chunks towards its root
// and sends the aggregate back down the same tree. A tree node forwards a
// chunk only after that chunk arrived from all its children and its own
// gradient is ready (aggregate-forward); chunks are independent, so they
// pipeline. Each sender keeps one queue per route (by chunk progress, or
// FIFO) and transmits its head chunk as a flow; flows share links max-min fairly (FlowNetwork).
// With multipath on, each new chunk picks its route with
// policy::ChooseSendPath (PRIMARY_BUSY_BOUND, AUXILIARY_QUEUE_LENGTH).
// Link capacities change at period boundaries through a caller-supplied
// function of the period. Deterministic. Not thread-safe.
//
// Simplifications (docs/simulator.md): relays forward cut-through (a flow
// spans its whole route); a transfer arrives one route latency after it
// drained; aggregation costs no time (the paper overlaps it with transfer).
#ifndef HETPS_LIB_SIM_ROUND_SIM_H_
#define HETPS_LIB_SIM_ROUND_SIM_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/policy/netstorm.h"
#include "lib/sim/flow_network.h"

namespace hetps {
namespace sim {

struct PhysicalLink {
  int a = 0;
  int b = 0;
  double latency_s = 0;
};

struct TreePlan {
  policy::AggregationTree tree;
  std::vector<std::vector<policy::Route>> auxiliary;  // per child; may be empty
  std::vector<double> chunk_bytes;                    // the chunks this tree aggregates
};

struct RoundPlan {
  std::vector<double> compute_s;  // per node; < 0: not a worker
  std::vector<TreePlan> trees;
  bool multipath = false;
  int primary_busy_bound = 2;
  int auxiliary_queue_length = 1;
  // Paper (false): a chunk picks its route when it becomes ready, and goes
  // to the primary when every route is full, so a burst of ready chunks
  // piles onto the primary. Late binding (true): such a chunk waits at the
  // sender and takes the first route that falls below its bound. Same
  // rules, work-conserving; docs/simulator.md compares the two.
  bool late_binding = true;
  // Order of the chunks waiting at a sender. Progress (true): by the
  // chunk's position in its tree's round, (index + 1/2) / the tree's chunk
  // count, so every link serves the trees' chunks in one consistent order
  // and no tree's late chunks block another's early ones. FIFO (false):
  // in the order they became ready. docs/simulator.md compares the two.
  bool progress_order = true;
};

struct RoundStats {
  double start_s = 0;
  double duration_s = 0;
  double compute_s = 0;        // the slowest worker's compute time
  int64_t chunks_sent = 0;     // hop-level transfers
  int64_t auxiliary_sent = 0;  // of those, over an auxiliary route
};

class RoundSimulator {
 public:
  // Capacities (bytes/s, both directions) of every link in period k =
  // floor(t / period_s); period_s <= 0: period 0 forever.
  using RatesFn = std::function<std::vector<double>(int64_t period)>;
  static absl::StatusOr<RoundSimulator> Create(int nodes, std::vector<PhysicalLink> links,
                                               double period_s, RatesFn rates);

  double now() const { return net_.now(); }
  // The capacities in force now (what ideal network awareness measures).
  const std::vector<double>& current_rates() const { return rates_; }
  int nodes() const { return nodes_; }
  const std::vector<PhysicalLink>& links() const { return links_; }

  // Runs one round from now() to its end. FailedPrecondition if traffic
  // stalls (a link of capacity 0 on a needed route); InvalidArgument if a
  // route uses a pair of nodes with no link.
  absl::StatusOr<RoundStats> RunRound(const RoundPlan& plan);

 private:
  RoundSimulator(int nodes, std::vector<PhysicalLink> links, double period_s, RatesFn rates);
  void ApplyPeriod(int64_t period);
  absl::StatusOr<std::vector<int>> DirectedPath(const policy::Route& r) const;

  int nodes_;
  std::vector<PhysicalLink> links_;
  double period_s_;
  RatesFn rates_fn_;
  int64_t period_ = 0;
  std::vector<double> rates_;
  absl::flat_hash_map<int64_t, int> link_of_;  // (a * nodes + b) -> directed link id
  FlowNetwork net_;
};

}  // namespace sim
}  // namespace hetps

#endif  // HETPS_LIB_SIM_ROUND_SIM_H_
