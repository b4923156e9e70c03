// One round of the sharded parameter server (every worker pushes every psd
// the chunks it holds; every psd sends their sum back to every worker) at
// segment level over hosts' access links, on a FlowNetwork whose link 2h
// is host h's uplink and 2h + 1 its downlink. A worker sends a psd its
// segments one after another; a psd sends a segment back to every worker
// once every worker's copy of it arrived (the live psd closes segments as
// they complete), so pushes and pulls overlap as in the cluster. A worker
// and a psd on one host exchange their copies without a flow. Compute is
// not part of it. Deterministic. Not thread-safe; the network and the
// round belong to one caller.
//
// What it sees that ADLB's Eq. 9 does not (docs/policy.md, "Round
// model"): a psd can send its last segment back only once the slowest
// worker pushed it, so every psd holding chunks adds its last segment to
// the tail every worker's downlink carries after the slowest push.
#ifndef HETPS_LIB_SIM_SHARDED_ROUND_H_
#define HETPS_LIB_SIM_SHARDED_ROUND_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "lib/sim/flow_network.h"

namespace hetps {
namespace sim {

// Where the nodes are: each server's and each worker's host, 0 to hosts-1.
struct ShardedLayout {
  int hosts = 0;
  std::vector<int> server_host;
  std::vector<int> worker_host;
};

class ShardedRound {
 public:
  struct Flow {
    bool push = true;  // worker -> psd; false: psd -> worker
    int worker = 0;
    int server = 0;
    double bytes = 0;
    double start_s = 0;
    int segment = 0;
  };

  // `share_bytes`: what each server holds; `segment_bytes` (> 0): the most
  // one segment carries. The layout's hosts must be `net`'s links / 2;
  // `net` outlives the round and runs no other flows while it does.
  ShardedRound(FlowNetwork* net, const ShardedLayout& layout,
               const std::vector<double>& share_bytes, double segment_bytes);

  // Starts the first segments.
  void Start();
  // The flow `tag` (as FlowNetwork returned it) finished now: starts what
  // it unblocks. Returns the flow.
  Flow Finish(int64_t tag);
  bool done() const { return pulls_left_ == 0; }
  // A flow started by this round, by its tag.
  const Flow& flow(int64_t tag) const { return flows_[size_t(tag)]; }

 private:
  void Next(bool push, int worker, int server);

  FlowNetwork* net_;
  ShardedLayout layout_;
  std::vector<Flow> flows_;  // by tag
  // By worker * servers + server: segments still to send, and whether one
  // is on the way.
  std::vector<std::deque<int>> push_q_, pull_q_;
  std::vector<bool> push_busy_, pull_busy_;
  std::vector<std::vector<int>> arrived_;       // by server, segment: copies in
  std::vector<std::vector<double>> seg_bytes_;  // by server
  int64_t pulls_left_ = 0;
};

// The duration of one such round on a network of its own, hosts' links
// at `host_Bps` (> 0) each way; 0 when the sizes disagree with the layout.
// O(flows x links) per flow's end.
double ShardedRoundTime(const ShardedLayout& layout, const std::vector<double>& host_Bps,
                        const std::vector<double>& share_bytes, double segment_bytes);

}  // namespace sim
}  // namespace hetps

#endif  // HETPS_LIB_SIM_SHARDED_ROUND_H_
