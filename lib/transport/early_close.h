// Early Close (LTP paper, section III-B): when a receiver may close a
// loss-tolerant flow before every packet arrived.
//
// Two thresholds per flow, measured from the flow's first packet at the
// receiver:
//   - before the loss-tolerant (LT) threshold of its link, wait for everything;
//   - between LT and the deadline, close once the delivered fraction reaches
//     min_fraction, every critical packet is in, and the sender's first pass
//     is over (ours: the paper closes even while new packets still flow, so
//     a clean flow a little slower than LT loses up to 1 - min_fraction of
//     its data; here only the tail of retransmissions is ever cut, and a
//     slow first pass is bounded by the deadline);
//   - at the deadline, close with whatever arrived.
// LT is per receiving link. Until the link has a full-delivery sample it is
// the paper's model, lt_rtprop_factor x RTprop + size / BtlBw (the sender's
// estimates travel in every DATA header); after that it is the shortest
// full-delivery time among the link's last `window_flows` flows (the paper
// takes the shortest per training epoch; a sliding window of flows needs no
// notion of epochs and forgets a lucky sample after window_flows flows).
// The deadline is the largest LT among the receiver's links with a flow open
// now, plus slack C (30 ms in a datacenter, 100 ms on a WAN).
//
// Ours, beyond the paper: links share the receiver's own ingress (the psd's
// incast: N workers into one link). Each sender's BtlBw estimate is its own
// view, and a sender that saw the link idle for a moment estimates far more
// than its share; its model LT then cuts its flow long before the shared
// link could have carried it. So LT is never below the shared-link bound
//   lt_rtprop_factor x RTprop + shared bytes / the measured ingress rate,
// where a flow's shared bytes are its own, what the other open loss-tolerant
// flows still missed when it began, and every such flow begun since: the
// time the shared link needs to carry all of it (SharedLtUs, IngressRate).
// The ingress rate is the rate of the link's busy spans
// (IngressRate::link_rate_bps), not a max over bins: packets reach the
// receiver in bunches (a receiver thread that was descheduled reads what
// queued meanwhile at once; a delaying middlebox releases a backlog), and a
// max over short bins reads a bunch as capacity above the link's, which
// puts a shared push's deadline early. Over a busy span the stall and its
// catch-up cancel.
// And the deadline's slack grows with LT (DeadlineUs): a fixed 30 ms is a
// fraction of a percent of a push of many seconds, far below the error of
// any rate estimate.
//
// Pure: times are passed in (microseconds). Not thread-safe.
#ifndef HETPS_LIB_TRANSPORT_EARLY_CLOSE_H_
#define HETPS_LIB_TRANSPORT_EARLY_CLOSE_H_

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/status/status.h"

namespace hetps {
namespace transport {

struct EarlyCloseConfig {
  double lt_rtprop_factor = 1.5;  // model LT = factor x RTprop + size / BtlBw
  uint32_t slack_us = 30'000;     // C: deadline = max(LT) + max(C, slack_fraction x max(LT))
  double slack_fraction = 0.05;   // of a long LT: its rate estimate's error grows with it
  double min_fraction = 0.8;      // delivered fraction that allows a close after LT
  uint32_t window_flows = 32;     // flows whose full-delivery times set LT
  // Non-zero: this LT for every link, whatever was measured (tests; operators
  // who know their links).
  uint32_t lt_fixed_us = 0;
  // LT never below this: a flow that arrived within one receive batch
  // measures a near-zero delivery time.
  uint32_t lt_min_us = 1000;
};

absl::Status ValidateEarlyCloseConfig(const EarlyCloseConfig& c);

enum class EarlyCloseDecision { kWait, kCloseFraction, kCloseDeadline };

// The decision for one open flow, `elapsed_us` after its first packet.
// `received` of `total` packets are in; `critical_in`: every critical one;
// `first_pass_done`: the sender has sent every packet once.
EarlyCloseDecision DecideEarlyClose(uint64_t elapsed_us, uint64_t lt_us, uint64_t deadline_us,
                                    uint32_t received, uint32_t total, bool critical_in,
                                    bool first_pass_done, double min_fraction);

// Packets needed for the fraction rule: ceil(min_fraction x total), at least 1.
uint32_t PacketsForFraction(uint32_t total, double min_fraction);

// The LT threshold of one receiving link.
class LinkThreshold {
 public:
  // LT in microseconds for a flow of `bytes` whose sender reports `rtprop_us`
  // and `btlbw_bps` (0: unknown). With no sample and no estimate: "infinite"
  // (UINT64_MAX): the first flow of a link waits for everything.
  uint64_t LtUs(const EarlyCloseConfig& c, uint64_t bytes, uint32_t rtprop_us,
                uint64_t btlbw_bps) const;
  // A flow of this link closed: `full` when every packet arrived, after
  // `duration_us` from its first to its last packet.
  void OnFlowClosed(const EarlyCloseConfig& c, bool full, uint64_t duration_us);
  // The last LT handed out (0 before any), for metrics.
  uint64_t last_lt_us() const { return last_lt_us_; }
  void set_last_lt_us(uint64_t v) { last_lt_us_ = v; }

 private:
  std::deque<uint64_t> window_;  // per closed flow: duration if full, else UINT64_MAX
  uint64_t last_lt_us_ = 0;
};

// The receiver's ingress rate: the windowed max of the data bytes received
// per bin of bin_us (max over the last `bins` bins: long enough to span the
// idle gaps between training iterations).
class IngressRate {
 public:
  explicit IngressRate(uint32_t bin_us = 500'000, uint32_t bins = 120)
      : bin_us_(bin_us), bins_(bins) {}
  void OnBytes(uint64_t now_us, uint64_t bytes);
  // 0 until a full bin was measured.
  uint64_t rate_bps(uint64_t now_us);
  // The rate the link sustains, for the fair shares and the shared-link
  // LT: the max over the busy spans of the window of their bytes over
  // their time, where a span is 2 to kSpanBins consecutive bins each busy
  // (arrival gaps under kBusyGapUs) at least half the time; 0 when there
  // was none. Training traffic comes in bursts: a 1 MB push over loopback
  // in 2 ms of a 500 ms bin reads as 16 Mbit/s by rate_bps, and a share of
  // that throttled every later push to it; here such bins are not busy.
  // Bunched arrivals raise one bin and lower the one before: a span holds
  // both. Spans end after kSpanBins so that the rate follows the link.
  uint64_t link_rate_bps(uint64_t now_us);
  static constexpr uint32_t kSpanBins = 8;
  static constexpr uint64_t kBusyGapUs = 5'000;

 private:
  struct Bin {
    uint64_t start_us, bytes, busy_us;
  };
  void Roll(uint64_t now_us);
  const uint32_t bin_us_;
  const uint32_t bins_;
  uint64_t bin_start_us_ = 0;
  uint64_t bin_bytes_ = 0;
  uint64_t bin_busy_us_ = 0;
  uint64_t last_us_ = 0;  // last arrival
  std::deque<Bin> done_;
  uint64_t best_bytes_ = 0;  // most bytes of a bin in done_
  uint64_t link_bps_ = 0;    // link_rate_bps over done_
};

// A single peer's recent rate, for the fair share (congestion.h,
// FairShareBps): IngressRate over 50 ms bins, max of the last 4.
constexpr uint32_t kShareBinUs = 50'000;
constexpr uint32_t kShareBins = 4;
constexpr uint64_t kShareWindowUs = uint64_t(kShareBinUs) * kShareBins;
// A peer's first flow after this long without one restarts its congestion
// control from startup (congestion.h, Room): as BtlBw's shortest window.
constexpr uint64_t kIdleRestartUs = 500'000;
// A link (a receiver's ingress, a sender's egress) that two or more flows
// shared this recently gives a flow alone on it the whole link as its
// share (endpoint_ack.cc, IngressShareBps and SetRateCaps): longer than a
// round of a job's pulls, so that the first segment of the next round is
// capped too.
constexpr uint64_t kSharedLinkMemoryUs = 2'000'000;

// The shared deadline for the largest LT among the open flows (above);
// UINT64_MAX stays UINT64_MAX.
uint64_t DeadlineUs(const EarlyCloseConfig& c, uint64_t max_lt_us);

// The shared-link bound on LT (above); 0 when the ingress rate is unknown.
uint64_t SharedLtUs(const EarlyCloseConfig& c, uint32_t rtprop_us, uint64_t shared_bytes,
                    uint64_t ingress_bps);

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_EARLY_CLOSE_H_
