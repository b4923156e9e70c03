// LinkMeter: how fast each directed link into this node carries training
// traffic (docs/awareness.md). Every flow received is a probe of the link
// from its sender, timed by arrivals as ADLB's forecast message is
// (section 3.2) but without sending one: the bytes of its second half
// over the time from the arrival that made half to the last one give the
// rate (of IP packets: headers count, as a link's shaper counts them).
// The first half is left out because a token-bucket shaper lets its
// burst allowance through at line rate when a flow starts after a pause,
// and a flow that fits in the burst would read far above the link. A
// sender pacing above the link still gets up to a bucket x pace / (pace
// - link) bytes through at its pace, so flows that follow one another
// (the segments of one broadcast, interleaved or in turn; details at
// kSpanGapPackets) are timed as one span, from the first one's middle
// arrival to the last arrival, counted once the span is over: a bucket
// passes at most what it held at the start plus its rate times the time,
// so the longer the span the less its start counts. Without a
// middle arrival (a transport that does not say) the first packet marks
// the start. Both times are on this node's clock, so no clock offset
// enters. Spans below probe_bytes (PROBE_CHUNK_SIZE) are ignored; an
// estimate is the largest of the latest probe_num (PROBE_CHUNK_NUM) span
// samples that ended within window_us of the newest: a flow's packets
// leave the bottleneck spaced at its rate or wider (sharing it with other
// flows, or sent slower), never closer, so the largest is the closest to
// what the link can carry; and a sample older than the window (the job's
// MeasureWindowMs, as far back as schedd reads) describes a network that
// may be gone, so a link that sees one flow a round shows a drop within
// a window, not after probe_num rounds. A link is first reported after
// probe_num probes in all, and again once it moved by more than
// report_rate (REPORT_RATE), and at least every kRefreshUs while its
// samples grow, each report with its estimate's age: schedd reads links
// by when they were probed, and a link that still carries flows at the
// same rate is as much news as one that moved.
//
// It also keeps what the node received per kTrafficBinUs, all senders
// together (Traffic): a host's access link is shared by its nodes' flows,
// and no single link's rate says what the host carried at once; schedd
// adds the nodes of a host up bin by bin (docs/awareness.md, "Host
// throughput").
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
#include "lib/base/clock.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/receiver_mux.h"

namespace hetps {

// Per datagram on the wire besides its payload: our header, IPv4 and UDP.
constexpr uint64_t kPacketOverheadBytes = transport::kHeaderBytes + 28;

struct LinkMeterConfig {
  uint64_t probe_bytes = 64 << 10;
  uint32_t probe_num = 4;
  double report_rate = 0.1;
  uint64_t window_us = 10'000'000;
};
absl::Status ValidateLinkMeterConfig(const LinkMeterConfig& c);

struct LinkSample {
  transport::Peer from;
  double bytes_per_s = 0;   // the estimate: the largest of the latest samples
  uint64_t flow_bytes = 0;  // the bytes of the flow that gave it
  uint64_t samples = 0;     // probes (spans) taken in all
  uint64_t bytes = 0;       // their bytes
  uint64_t updated_us = 0;  // the endpoint's clock at the latest probe
  // The end of the probe that gave bytes_per_s (the endpoint's clock),
  // and how long before TakeChanged or All returned it that was.
  uint64_t sampled_us = 0;
  uint64_t age_us = 0;
  // The samples the estimate is the largest of, oldest first (the newest
  // LinkMeter::kProbesReported): each one's rate and how long before
  // TakeChanged or All returned it it ended. schedd reads a link at its
  // fastest probe since the moment it reads from: the largest may be
  // older than that while newer ones are not.
  struct Probe {
    double bytes_per_s = 0;
    uint64_t age_us = 0;
  };
  std::vector<Probe> probes;
};

// Bytes received per bin, on calendar time.
struct NodeTraffic {
  int64_t first_bin_unix_ms = 0;
  uint32_t bin_ms = 0;
  std::vector<uint64_t> in_bytes;
};

class LinkMeter final : public transport::FlowObserver {
 public:
  // A flow's arrival profile (transport::ArrivalProfile) lands bin for bin.
  static constexpr uint64_t kTrafficBinUs = transport::ArrivalProfile::kBinUs;
  // Bins kept: a flow is counted when it ends, into the bins it spanned,
  // so reports repeat the recent past (Traffic) and flows up to this long
  // are whole in some report.
  static constexpr uint64_t kTrafficBins = 200;
  static constexpr uint64_t kRefreshUs = 1'000'000;
  // A report carries at most this many of a link's samples (the newest).
  static constexpr size_t kProbesReported = 8;
  // A flow continues its link's span when it began before the span's last
  // arrival, or, in the same round as the span's first flow, within a gap
  // of it: up to the span's longest flow (its first to last arrival) or
  // kSpanGapPackets packet times at the span's rate, at least
  // kSpanGapMinUs (receive-time jitter). The gap counts in the span's
  // time. A token bucket lets through at most what it held at the span's
  // start plus its rate times the span's time, however the bytes came, so
  // a gap's refill cannot lift the reading above that (timed alone, a
  // flow after a gap rides the refill: its sender's pace shows); a gap
  // only lowers it, by its share of the time, and the estimate takes the
  // largest span. Flows of the next round come after the rest of a round
  // (pulls, compute), a gap that would stand for most of the time. A span
  // stops taking flows at kSpanProbes x probe_bytes, so that a link busy
  // for long is still timed in parts and a change within it shows.
  static constexpr double kSpanGapPackets = 4;
  static constexpr uint64_t kSpanGapMinUs = 200;
  static constexpr uint64_t kSpanProbes = 8;

  // `clock`: the endpoint's, whose MonotonicMicros times the flows.
  explicit LinkMeter(const LinkMeterConfig& config = {}, const Clock* clock = RealClock::Get())
      : config_(config), clock_(clock) {}
  void SetConfig(const LinkMeterConfig& config);

  // A flow received from `from` ended (endpoint thread).
  void OnFlow(const transport::Peer& from, const transport::FlowResult& r) override;
  // Links with an estimate never reported, moved by more than
  // report_rate since it was, or probed since and reported kRefreshUs
  // ago or longer; each is marked reported. Spans are over (and count)
  // once no flow can continue them: past the gap and twice their longest
  // flow after their last arrival.
  std::vector<LinkSample> TakeChanged();
  // Every link with an estimate (spans that are over count).
  std::vector<LinkSample> All();
  // The last `bins` (at most kTrafficBins) bins up to now: each flow's
  // wire bytes where its arrival profile says they came, or, without one,
  // spread over its first to last arrival (each half over its own time
  // where the middle arrival is known). False when no flow ended since the
  // previous call.
  bool TakeTraffic(uint64_t bins, NodeTraffic* out);
  // Forgets everything (a new job: other peers, other paths).
  void Reset();
  // This node's data-plane IP (network byte order; 0: unknown): flows
  // from it come from a node of the same host and never crossed the
  // host's access link, so Traffic leaves them out.
  void SetLocalIp(uint32_t ip);

 private:
  struct Link {
    LinkSample now;
    struct Sample {
      double rate = 0;
      uint64_t flow_bytes = 0, last_us = 0;
    };
    std::deque<Sample> recent;  // oldest first
    // Back-to-back flows timed as one probe (OnFlow), a sample once over.
    struct Span {
      bool open = false;
      uint64_t start_us = 0, last_us = 0;
      double bytes_after = 0;  // wire bytes that arrived after start_us
      uint64_t payload = 0;
      uint32_t iteration = 0;   // its first flow's round
      uint64_t longest_us = 0;  // its longest flow, first to last arrival
      double per_packet = 0;    // wire bytes per packet, its latest flow
    };
    Span span;
    double reported = 0;                             // 0: never
    uint64_t reported_samples = 0, reported_us = 0;  // when it was
  };
  static uint64_t SpanGapUs(const Link::Span& sp, double per_packet);
  // l.now with its age and probes as of now_us.
  static LinkSample Reported(const Link& l, uint64_t now_us);
  // The span over: its sample (if of probe_bytes) joins the estimate.
  void CloseSpan(Link* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the spans no flow can continue any more at now_us.
  void CloseQuietSpans(uint64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddTraffic(const transport::FlowResult& r, double wire) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Spread(uint64_t from_us, uint64_t to_us, double bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable absl::Mutex mu_;
  LinkMeterConfig config_ ABSL_GUARDED_BY(mu_);
  const Clock* const clock_;
  absl::flat_hash_map<transport::Peer, Link> links_ ABSL_GUARDED_BY(mu_);
  // Wire bytes by bin (MonotonicMicros / kTrafficBinUs), the newest
  // kTrafficBins.
  std::deque<double> traffic_ ABSL_GUARDED_BY(mu_);
  uint64_t traffic_end_ ABSL_GUARDED_BY(mu_) = 0;  // bin after traffic_.back()
  bool traffic_new_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t local_ip_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_LINK_METER_H_
