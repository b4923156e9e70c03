// BBR-style congestion control for one peer: estimates the bottleneck
// bandwidth (BtlBw, windowed max of delivery-rate samples) and the round-trip
// propagation time (RTprop, windowed min of RTT samples), and derives a
// pacing rate and a congestion window of cwnd_gain x BDP. Random packet loss
// is NOT a congestion signal here: non-congestion loss on WAN links must not
// collapse the rate, which is what makes loss-tolerant transfer pay off.
// docs/congestion.md states each rule; the measurements that shaped them are in
// docs/results/2026-11-23-ltp-incast.md.
//
// Congestion loss. When several senders share one bottleneck (an incast
// into a psd, or a psd's egress to many workers) each one's window of
// 2 x its BDP still overruns the queue. As BBR v2's inflight_hi: a round
// (one packet-timed round trip) that loses more than loss_threshold of its
// packets, and at least loss_packets_min, caps data in flight at loss_beta
// x what was in flight; clean rounds raise the cap by one packet for
// additive_rounds, then by 1, 2, 4... packets until the model's window
// rules again: under persistent overflow the sender is an AIMD flow like
// the TCPs it shares the queue with. The threshold sits well above random
// loss rates (5%, not BBR v2's 2%): a lower one fires on chance alone at
// 1% random loss and costs a lone sender much of its rate.
//
// Loss with a standing queue (ours). A round whose smallest RTT sample is
// above RTprop by queue_delay_fraction (and queue_delay_min_us) had a queue
// all through: the bottleneck is oversubscribed, so backing off costs no
// utilization, only share, and any loss in it counts as congestion (the
// window then grows only additively). Random loss builds no queue, and a
// lone flow of this controller drains its own every gain cycle. Without
// this a loss-based TCP, which keeps the queue full and loses about 1% per
// round, never makes LTP yield. Armed once a round after startup has seen
// RTprop again, or after 16 rounds.
//
// Fair share (ours; SetRateCap). Flows sharing a bottleneck each read the
// moments the others backed off into their max-filtered BtlBw, and their
// pacing rates add up to several times the link. The endpoint measures
// the shared link's capacity C (IngressRate::link_rate_bps, raised to one
// peer's BtlBw: ShareCapacityBps) and each flow's recent rate, and sets
// the cap to the max-min fair level R (FairShareBps); a flow left alone
// at a receiver others shared lately gets C itself (IngressShareBps),
// not a lifted cap (Room, below). After startup a flow paces at its own
// gain cycle but never above 1.25 x R: C is
// measured from what the flows achieve, so a cap at R itself would hold
// them at a share of an underestimate; the headroom lets probes lift C.
// R is also a floor: after startup, with no congestion cut in force, a
// flow whose R is 1.25 x its BtlBw or more paces at R (the bottleneck
// owner's word that there is room).
//
// Cap lift (ours). The share's C is measured from what the flows
// achieved, over busy spans: a receiver whose flows were slow for another
// reason (a slow sender, a plan switch) reads a low C, its shares hold the
// flows at it, and they keep its bins busy at that rate, while a fast
// link's short bursts leave none busy to correct it; the 1.25 headroom
// lifts C by a quarter per measured span, about a second each. The
// sender sees what the receiver cannot: a round in which the cap held
// the flow below its model's rate, with no loss and no queue on the path
// (its smallest RTT within the standing-queue margin of RTprop), had
// room the share did not give. Each such round raises the ceiling by
// 1.25 (up to kCapLiftMax); a round with a queue or a loss lowers it by
// the same step, and a lifted or new flow's cap starts at 1. Where the
// share is right the shared link is full and a queue stands, so the
// ceiling stays at the share.
//
// Share lift (ours; ShareLift). The cap lift above lifts one flow whose
// own cap holds it; it needs the flow's model to reach the ceiling, and a
// flow that starts each round under its share (an idle restart climbs to
// the share, no further) has a BtlBw at the share, so it probes up by
// 1.25 once per gain cycle, and C, measured from what such flows deliver,
// follows as slowly: a sender whose link got faster while it shared the
// receiver with others kept its old share for several transfers (the
// shares' fixed point). A shared link with a standing queue delays every
// flow that crosses it, so one flow through it whose round saw no queue
// and no loss (path_clean; data packets say so in kFlagPathClean) shows
// the link has room. While some counted flow is clean, the endpoint raises
// the share's C by 1.25 every share_lift_step_rtprops RTprops (up to 8x);
// once none is, back to the measured C, and no lift for eight steps (a
// link at its capacity drains between BBR's probes and reads clean: the
// lift is its probe, as the gain cycle's 1.25 is a flow's). A lift that
// met a queue within two steps found the link full: the wait doubles, to
// 64 steps, until one runs longer. The lifted shares let the flows
// deliver more, the busy spans measure it, and C follows the link.
// A step is four RTprops, not two: a step's 25% over a full link builds
// the queue that marks a path (half an RTprop) in two RTprops, and a
// round that saw it reports a round trip later. Steps of two raised C
// twice more before the first one's queue was known: at every transfer's
// start (queues drained, paths clean) the shares reached 1.95x a full
// link, and the drops and resends spread a worker's rounds (endpoint_test,
// "a worker's rounds on a slow link").
//
// Room (ours). The max-filtered BtlBw only grows by the 1.25 probe once
// per 8-round cycle: a flow that ran at a small share and is now alone
// would take many cycles to fill the link. So when the cap stays at 1.5 x
// BtlBw or more for two rounds, or is lifted (the flow is alone), and when
// a flow starts after an idle gap (BtlBw is old), the flow goes back to
// startup (paced under the cap: the others are at theirs) and drops its
// congestion cap. Cap-driven restarts come at most once per 24 rounds,
// doubling (up to 1536) after one that found no room (BtlBw grew < 25%),
// so a flow held by its own access link does not keep overshooting it; a
// lifted cap waits one gain cycle only, as it comes once per transfer,
// and a lift within that cycle restarts the flow when the cycle ends
// (unless a cap came back): the last flow of a push, lifted a few rounds
// after its idle restart, otherwise ran out the push at its old share.
// After an idle gap delivery rates are measured from the first send, not
// across the gap, and a startup still running from an earlier flow counts
// its rounds afresh: probe-sized flows neither fill the pipe nor measure
// it, and they left the next full transfer at their rate.
//
// Spurious losses (ours, as TCP's Eifel/F-RTO undo). A packet declared
// lost whose ACK arrives before it was resent, or sooner than half an
// RTprop after the resend, was never lost: its ACK was late or lost. Such
// a loss found in the round that counted it is taken out of the round;
// once half the bytes that made a round congested prove spurious (within
// the two rounds after it), the cut is undone.
//
// Unpaced paths (ours). Where RTprop is below unpaced_rtprop_us (loopback,
// one LAN or site) the window alone clocks the flow, as a kernel TCP does:
// no pacing and no fair-share cap. Pacing spreads a window over an RTT so
// that a deep, slow bottleneck queue is not hit by bursts; at tens of
// microseconds a window goes out in about one RTT anyway, and the pacing
// slots and wake-ups cost more than the bursts. The cap is worse there:
// C, measured from what the flows achieved, held them where they had been.
// Congestion loss (inflight_hi) and the window floors stay in force.
//
// Standing round trip (ours). While the endpoint's own downlink is
// loaded (SetAckPathLoaded: data came in over the last share window at
// half the most it took in any 500 ms bin, or more), the window is
// cwnd_gain x BtlBw over the last round's smallest RTT where that is
// above RTprop (up to kStandingRttMax x RTprop): every packet of that
// round waited that long, and the ACKs cross that downlink. A worker's
// push ACKs come back through the downlink its pull fills at the same
// time; a window of 2 x BDP over RTprop then holds the push at about half
// its uplink. Pacing still sets the rate. Not otherwise: a queue on the
// data's own path, its own one included, would hold the window open for
// itself.
//
// Pure state machine: the caller passes times (microseconds, any epoch) and
// byte counts. Not thread-safe; owned by the endpoint thread.
#ifndef HETPS_LIB_TRANSPORT_CONGESTION_H_
#define HETPS_LIB_TRANSPORT_CONGESTION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hetps {
namespace transport {

struct CongestionConfig {
  uint32_t packet_bytes = 1400;             // datagram size used for window floors
  uint64_t initial_rate_bps = 100'000'000;  // before the first bandwidth sample
  uint32_t initial_rtt_us = 1000;           // before the first RTT sample
  // Floors of the window: at least this many packets, and at least BtlBw x
  // cwnd_min_us of data. ACKs come back in batches and a busy host may not
  // run the endpoint thread for a while, so on a fast link (loopback: tens
  // of us of RTprop) a window of 2 x BDP stalls the flow on every batch;
  // on a WAN link the time floor is far below the BDP and does not matter.
  uint32_t cwnd_packets_min = 16;
  uint32_t cwnd_min_us = 2000;
  uint32_t cwnd_packets_max = 65536;
  uint64_t rate_bps_max = 100'000'000'000ull;
  uint32_t rtprop_window_us = 10'000'000;  // min-filter window for RTprop
  uint32_t btlbw_window_rounds = 10;       // max-filter window, in RTprops...
  // ...but at least this long: training traffic comes in bursts (one flow
  // per iteration) with idle gaps whose low, app-limited samples must not
  // erase the estimate between iterations.
  uint32_t btlbw_window_min_us = 500'000;
  // Congestion loss (see above). loss_threshold 0 turns the response off.
  double loss_threshold = 0.05;
  uint32_t loss_packets_min = 4;
  double loss_beta = 0.7;
  uint32_t additive_rounds = 16;
  // Loss with a standing queue (see above); false turns it off.
  bool standing_queue_response = true;
  double queue_delay_fraction = 0.5;
  uint32_t queue_delay_min_us = 2000;
  // Room (see above): back to startup when the fair-share cap leaves room
  // or after an idle gap; false turns it off.
  bool room_restart = true;
  // Cap lift (see above); false: the cap's ceiling stays 1.25 x the share.
  bool cap_lift = true;
  // Share lift (see above); false: shares divide the measured C.
  bool share_lift = true;
  // Its step, in RTprops of the flows across the link (1 to 64).
  uint32_t share_lift_step_rtprops = 4;
  // Unpaced paths (see above); 0: every path is paced.
  uint32_t unpaced_rtprop_us = 500;
  // Fair share over the sender's own egress (the endpoint's SetRateCaps):
  // each peer's flows capped at the max-min share of the egress rate the
  // endpoint measured; false: only the receivers' advertised shares.
  // Without it a psd's broadcast flows to many workers overrun its own
  // uplink and end unevenly (the last pull of an incast round trails by
  // seconds). A host whose link carries pushes out and pulls in at once
  // delivers less than the link and measures its egress from that; the
  // cap lift (above) raises a share that holds a flow below a path with
  // room (docs/congestion.md, "Fair shares").
  bool egress_share = true;
  // The egress share weighted by the bytes each peer has left to take, or
  // took in the last share window if more (WeightedShareLevel); false: an
  // even max-min split. A worker's push under an uneven chunk map sends
  // each psd a different amount; even shares end the small ones first and
  // leave the largest below the link.
  bool weighted_share = true;
};

// Per-packet bookkeeping the controller needs back on ACK.
struct SendSample {
  uint64_t sent_us = 0;
  uint64_t delivered_bytes = 0;  // delivered() when the packet was sent
  uint64_t delivered_us = 0;     // time of that delivery count
  uint64_t first_sent_us = 0;    // send time of the packet acknowledged last, then
  bool retransmitted = false;    // Karn: no RTT sample from a resend its ACK does not name
};

class CongestionControl {
 public:
  explicit CongestionControl(const CongestionConfig& config);

  // Record what SendSample needs when a packet leaves.
  SendSample OnSend(uint64_t now_us, bool retransmission) const;
  // An ACK for a packet of `bytes` sent with `sample`.
  void OnAck(uint64_t now_us, uint32_t bytes, const SendSample& sample);
  // A packet of `bytes` was declared lost; `inflight_bytes` were in flight
  // before it was taken out.
  void OnLoss(uint32_t bytes, uint64_t inflight_bytes);
  // A packet of `bytes` declared lost was delivered after all (above).
  void OnSpuriousLoss(uint32_t bytes);

  // Fair-share rate cap (see above); 0 removes it. A cap that stays well
  // above the flow's BtlBw, or is lifted, sends it back to startup: see
  // "Room" above.
  void SetRateCap(uint64_t bps);
  // The first flow to this peer after an idle gap: BtlBw was measured
  // under other conditions; back to startup from it (Room, above).
  void OnIdleRestart();
  // Whether this endpoint's own downlink is loaded now (the ACKs of this
  // peer's flows cross it): the window then covers the standing round
  // trip (above).
  void SetAckPathLoaded(bool loaded) { ack_path_loaded_ = loaded; }
  uint64_t rate_cap_bps() const { return rate_cap_bps_; }
  // The last packet-timed round saw no queue (its smallest RTT within the
  // standing-queue margin of RTprop) and no loss: the path had room then
  // (Share lift, above). False until such a round, and after an idle gap.
  bool path_clean() const { return path_clean_; }
  // The path is unpaced and uncapped (see above).
  bool unpaced() const { return rtprop_us_ > 0 && rtprop_us_ < config_.unpaced_rtprop_us; }

  uint64_t pacing_rate_bps() const;
  uint64_t cwnd_bytes() const;
  uint64_t btlbw_bps() const { return btlbw_bps_; }  // 0 until a sample
  uint32_t rtprop_us() const { return rtprop_us_; }  // 0 until a sample
  uint64_t delivered() const { return delivered_; }
  bool in_startup() const { return startup_; }
  // The cap on data in flight from congestion loss; UINT64_MAX: none.
  uint64_t inflight_hi() const { return inflight_hi_; }
  uint64_t rounds() const { return rounds_; }
  // Returns to startup: the fair-share cap left room, or an idle restart.
  uint64_t startup_restarts() const { return startup_restarts_; }
  // Rounds that raised the cap's ceiling (Cap lift, above), and the
  // ceiling's factor now.
  uint64_t cap_lift_rounds() const { return cap_lift_rounds_; }
  double cap_lift() const { return cap_lift_; }
  uint64_t congestion_rounds() const { return congestion_rounds_; }
  // Of those, the rounds that counted only because a queue stood.
  uint64_t standing_queue_rounds() const { return standing_queue_rounds_; }
  // Congestion rounds undone: their losses proved spurious.
  uint64_t undone_rounds() const { return undone_rounds_; }

 private:
  CongestionConfig config_;
  uint64_t rate_cap_bps_ = 0;
  double cap_lift_ = 1;           // Cap lift (above)
  bool round_cap_bound_ = false;  // the cap held the pacing rate this round
  bool path_clean_ = false;       // path_clean()
  uint64_t cap_lift_rounds_ = 0;
  uint64_t delivered_ = 0;
  uint64_t delivered_us_ = 0;
  uint64_t first_sent_us_ = 0;  // send time of the packet acknowledged last
  // RTprop: windowed min.
  uint32_t rtprop_us_ = 0;
  uint64_t rtprop_stamp_us_ = 0;
  // BtlBw: windowed max, kept as the best of the current and previous window.
  uint64_t btlbw_bps_ = 0;
  uint64_t bw_window_start_us_ = 0;
  uint64_t bw_current_max_ = 0;
  uint64_t bw_previous_max_ = 0;
  // Startup ends when BtlBw stops growing by 25% over 3 rounds.
  bool startup_ = true;
  uint64_t full_bw_ = 0;
  int full_bw_rounds_ = 0;
  uint64_t round_start_us_ = 0;
  uint32_t unarmed_rounds_ = 0;  // > 0: standing-queue response not armed yet
  // Room (above).
  uint64_t startup_exit_round_ = 0;
  uint64_t startup_restarts_ = 0;
  uint64_t restart_wait_rounds_;   // doubles on a fruitless restart
  uint64_t restart_from_bps_ = 0;  // BtlBw when the current restart began; 0: none
  uint64_t round_cap_min_ = UINT64_MAX;
  uint32_t room_rounds_ = 0;
  bool lift_pending_ = false;  // lifted within a gain cycle of startup: restart after it
  // ProbeBW gain cycle position.
  int cycle_index_ = 0;
  uint64_t cycle_start_us_ = 0;
  // Packet-timed rounds: a round ends when a packet sent after it began is
  // acknowledged (its delivered_bytes reached next_round_delivered_).
  uint64_t next_round_delivered_ = 0;
  uint64_t rounds_ = 0;
  uint64_t round_delivered_bytes_ = 0;
  uint64_t round_lost_bytes_ = 0;
  uint32_t round_lost_packets_ = 0;
  uint64_t round_loss_inflight_ = 0;        // most in flight when a loss was seen
  uint32_t round_min_rtt_us_ = UINT32_MAX;  // smallest RTT sample of the round
  uint32_t standing_rtt_us_ = 0;            // the last round's smallest (0: none)
  bool ack_path_loaded_ = false;
  uint64_t inflight_hi_ = UINT64_MAX;
  uint64_t congestion_rounds_ = 0;
  uint64_t standing_queue_rounds_ = 0;
  uint32_t growth_packets_ = 1;  // raise of inflight_hi_ next round
  // Undo of the last congestion round (spurious losses, above).
  uint32_t undo_rounds_left_ = 0;  // > 0: an undo may still come
  uint64_t undo_inflight_hi_ = UINT64_MAX;
  uint64_t undo_lost_bytes_ = 0;      // the round's lost bytes
  uint64_t undo_spurious_bytes_ = 0;  // of those, proved spurious since
  uint64_t undone_rounds_ = 0;
  uint32_t rounds_since_congestion_ = 0;

  uint64_t ModelCwnd() const;
  uint64_t ModelRate() const;   // gain x BtlBw (before any sample: the initial rate)
  uint64_t CapCeiling() const;  // the most the cap lets it pace at
  void ExitStartup(uint64_t now_us);
  enum class RestartCause { kIdle, kLifted, kRoom };
  void MaybeRestart(RestartCause cause);
  void EndRound(uint64_t now_us);
};

// Share lift (above): the factor on a shared link's measured capacity.
// Not thread-safe; owned by the endpoint thread.
class ShareLift {
 public:
  explicit ShareLift(uint32_t step_rtprops = 4) : step_rtprops_(step_rtprops) {}
  // Called whenever a share is computed: `room` says whether some flow
  // across the link saw a clean path; `rtprop_us` the flows' largest
  // RTprop (a step is step_rtprops of them, at least 1 ms each). Returns
  // the factor, >= 1.
  double Update(uint64_t now_us, bool room, uint32_t rtprop_us);
  // No shared traffic: the next share starts from the measured capacity.
  void Reset() {
    lift_ = 1;
    probe_steps_ = 0;
  }
  double lift() const { return lift_; }
  uint64_t steps() const { return steps_; }  // raises so far

 private:
  uint32_t step_rtprops_;
  double lift_ = 1;
  uint64_t next_us_ = 0;
  uint64_t hold_until_us_ = 0;
  uint32_t hold_steps_ = 8;   // after the next lift that meets a queue
  uint32_t probe_steps_ = 0;  // raises since the lift left 1
  uint64_t steps_ = 0;
};

// The max-min fair level of `capacity_bps` among flows whose recent rates
// are `rates_bps` (water-filling): the R with sum of min(r_i, R) equal to
// the capacity, or capacity - (sum of all but the largest) when the flows
// together take less. 0 when there are fewer than two flows or no capacity
// measured. Sorts `rates_bps`.
uint64_t FairShareBps(uint64_t capacity_bps, std::vector<uint64_t>& rates_bps);

// The same water-filling with a weight per flow (each > 0): the level L
// with sum of min(r_i, L w_i) equal to the capacity, where a flow counts
// as held elsewhere (taking r_i) only under kHeldShare of L w_i; flow i's
// share is L w_i. A flow paced at its share reads a little under it; held
// to r_i, it would hand the rest to the others and its cap, L times a
// large weight, would let it overrun them. A sender weights its
// peers by the bytes each has left (congestion.weighted_share): flows
// that all cross its uplink then end together, where equal shares end
// the small ones first and leave the largest to climb from its old share
// to the whole link while the link idles. 0 as FairShareBps. `order` is
// scratch. O(n log n).
constexpr double kHeldShare = 0.75;
double WeightedShareLevel(uint64_t capacity_bps, const std::vector<uint64_t>& rates_bps,
                          const std::vector<double>& weights, std::vector<size_t>& order);

// The capacity a fair share divides (the endpoint's IngressShareBps and
// SetRateCaps): the link's busy-span rate, raised to the largest BtlBw of
// one peer's flows through it (that flow alone delivered so much). Busy
// spans lag a link that got faster: its transfers end within a bin, no
// new span comes, and the slow link's spans rule the window. 0 while no
// busy span was measured: the link was never seen full, so nothing says
// the flows share a bottleneck there.
uint64_t ShareCapacityBps(uint64_t span_bps, uint64_t peer_btlbw_max_bps);

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_CONGESTION_H_
