// Flow-level network model for the policy simulator: directed links with a
// capacity (bytes/s) that may change at any time, and flows, each with a
// fixed path of directed links and a byte count. Active flows share links
// max-min fairly (progressive filling), recomputed whenever the set of
// flows or a capacity changes. Deterministic. Not thread-safe.
#ifndef HETPS_LIB_SIM_FLOW_NETWORK_H_
#define HETPS_LIB_SIM_FLOW_NETWORK_H_

#include <cstdint>
#include <vector>

namespace hetps {
namespace sim {

class FlowNetwork {
 public:
  explicit FlowNetwork(std::vector<double> capacity_Bps);

  double now() const { return now_; }
  int links() const { return static_cast<int>(capacity_.size()); }
  double capacity(int link) const { return capacity_[link]; }
  void SetCapacity(int link, double Bps);

  // Starts a flow of `bytes` (> 0) over `path` (directed link ids; empty: an
  // infinitely fast local transfer) now; `tag` comes back on completion.
  void Start(const std::vector<int>& path, double bytes, int64_t tag);

  // Absolute time the first active flow drains at current rates (+inf when
  // none). Recomputes rates if needed.
  double NextCompletion();

  // Moves time forward to t (>= now, <= NextCompletion()), draining flows;
  // appends the tags of flows that finished (at t) to *done.
  void AdvanceTo(double t, std::vector<int64_t>* done);

  int active() const { return static_cast<int>(active_.size()); }
  // Bytes carried per link since construction (for utilisation reports).
  const std::vector<double>& carried_bytes() const { return carried_; }

 private:
  struct Flow {
    std::vector<int> path;
    double remaining = 0;
    double rate = 0;
    int64_t tag = 0;
  };
  void Recompute();

  std::vector<double> capacity_;
  std::vector<double> carried_;
  std::vector<Flow> flows_;  // slots; active_ lists the live ones
  std::vector<int> active_;
  std::vector<int> free_;
  double now_ = 0;
  bool dirty_ = false;
  // Scratch for Recompute.
  std::vector<double> cap_left_;
  std::vector<int> unfrozen_;
  std::vector<double> key_;
  std::vector<std::vector<int>> on_link_;
  std::vector<int> touched_;
};

}  // namespace sim
}  // namespace hetps

#endif  // HETPS_LIB_SIM_FLOW_NETWORK_H_
