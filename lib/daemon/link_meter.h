// LinkMeter: how fast each directed link into this node carries training
// traffic (docs/awareness.md). Every flow received is a probe of the link
// from its sender, timed by arrivals as ADLB's forecast message is
// (section 3.2) but without sending one: the bytes of its second half
// over the time from the arrival that made half to the last one give the
// rate (of IP packets: headers count, as a link's shaper counts them).
// The first half is left out because a token-bucket shaper lets its
// burst allowance through at line rate when a flow starts after a pause,
// and a flow that fits in the burst would read far above the link; so
// probe_bytes should be at least twice a path's burst. Without a middle
// arrival (a transport that does not say) the first packet marks the
// start. Both times are on this node's clock, so no clock offset enters.
// Flows below probe_bytes (PROBE_CHUNK_SIZE) are ignored; an estimate is
// the largest of the latest probe_num (PROBE_CHUNK_NUM) samples: a flow's
// packets leave the bottleneck spaced at its rate or wider (sharing it
// with other flows, or sent slower), never closer, so the largest is the
// closest to what the link can carry. A link is reported again once it
// moved by more than report_rate (REPORT_RATE).
// Thread-safe.
#ifndef HETPS_LIB_DAEMON_LINK_METER_H_
#define HETPS_LIB_DAEMON_LINK_METER_H_

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/receiver_mux.h"

namespace hetps {

// Per datagram on the wire besides its payload: our header, IPv4 and UDP.
constexpr uint64_t kPacketOverheadBytes = transport::kHeaderBytes + 28;

struct LinkMeterConfig {
  uint64_t probe_bytes = 64 << 10;
  uint32_t probe_num = 4;
  double report_rate = 0.1;
};
absl::Status ValidateLinkMeterConfig(const LinkMeterConfig& c);

struct LinkSample {
  transport::Peer from;
  double bytes_per_s = 0;   // the estimate: the largest of the latest samples
  uint64_t flow_bytes = 0;  // the bytes of the flow that gave it
  uint64_t samples = 0;     // probes taken in all
  uint64_t bytes = 0;       // their bytes
  uint64_t updated_us = 0;  // the endpoint's clock at the latest probe
};

class LinkMeter final : public transport::FlowObserver {
 public:
  explicit LinkMeter(const LinkMeterConfig& config = {}) : config_(config) {}
  void SetConfig(const LinkMeterConfig& config);

  // A flow received from `from` ended (endpoint thread).
  void OnFlow(const transport::Peer& from, const transport::FlowResult& r) override;
  // Links with an estimate never reported or moved by more than
  // report_rate since it was; each is marked reported.
  std::vector<LinkSample> TakeChanged();
  std::vector<LinkSample> All() const;
  // Forgets everything (a new job: other peers, other paths).
  void Reset();

 private:
  struct Link {
    LinkSample now;
    std::deque<std::pair<double, uint64_t>> recent;  // rate, flow bytes
    double reported = 0;                             // 0: never
  };
  mutable absl::Mutex mu_;
  LinkMeterConfig config_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<transport::Peer, Link> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_LINK_METER_H_
