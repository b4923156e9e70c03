#include "lib/transport/congestion.h"

#include <algorithm>
#include <numeric>

namespace hetps {
namespace transport {
namespace {

constexpr double kStartupGain = 2.885;  // 2/ln 2: doubles the rate every round
constexpr double kCwndGain = 2.0;
constexpr uint32_t kStandingRttMax = 3;  // the window's round trip: at most this x RTprop
constexpr double kCycleGains[] = {1.25, 0.75, 1, 1, 1, 1, 1, 1};
constexpr double kCapStartupGain = 1.25;  // startup under a fair-share cap: probe, do not flood
constexpr double kCapHeadroom = 1.25;     // after startup: the cap's ceiling over the share
constexpr double kCapFloorRatio = 1.25;   // a share this far over BtlBw is paced at (room)
// After startup the standing-queue response waits until a round sees
// RTprop again (startup's own queue has drained), or this many rounds.
constexpr uint32_t kArmRounds = 16;
constexpr int kCycleLength = sizeof(kCycleGains) / sizeof(kCycleGains[0]);
// Room: a cap this far above BtlBw sends the flow back to startup, at most
// once per kRestartRounds rounds.
constexpr double kRoomRatio = 1.5;
constexpr uint64_t kRestartRounds = 3 * kCycleLength;
constexpr uint64_t kRestartRoundsMax = 64 * kRestartRounds;
// Rounds in a row the cap must leave room before a restart: a cap that
// jumps for a moment (the shares are measured over 50 ms bins) is no room.
constexpr uint32_t kRoomRounds = 2;
// Cap lift: the ceiling's step per round, and its most over the share.
constexpr double kCapLiftStep = 1.25;
constexpr double kCapLiftMax = 32;
// Share lift: the step, its most, the steps without one after a lift met
// a queue (doubling, to the most, after one that met it within
// kShareLiftFruitless steps).
constexpr double kShareLiftStep = 1.25;
constexpr double kShareLiftMax = 8;
constexpr uint32_t kShareLiftHoldSteps = 8;
constexpr uint32_t kShareLiftHoldStepsMax = 64;
constexpr uint32_t kShareLiftFruitless = 2;

}  // namespace

CongestionControl::CongestionControl(const CongestionConfig& config)
    : config_(config), restart_wait_rounds_(kRestartRounds) {}

SendSample CongestionControl::OnSend(uint64_t now_us, bool retransmission) const {
  SendSample s;
  s.sent_us = now_us;
  s.delivered_bytes = delivered_;
  // Before anything was delivered, measure from the first send.
  s.delivered_us = delivered_us_ == 0 ? now_us : delivered_us_;
  s.first_sent_us = first_sent_us_ == 0 ? now_us : first_sent_us_;
  s.retransmitted = retransmission;
  return s;
}

void CongestionControl::OnAck(uint64_t now_us, uint32_t bytes, const SendSample& sample) {
  delivered_ += bytes;
  delivered_us_ = now_us;

  if (!sample.retransmitted && now_us >= sample.sent_us) {
    const uint32_t rtt =
        static_cast<uint32_t>(std::min<uint64_t>(now_us - sample.sent_us, UINT32_MAX));
    const uint32_t rtt_sample = std::max<uint32_t>(rtt, 1);
    round_min_rtt_us_ = std::min(round_min_rtt_us_, rtt_sample);
    if (rtprop_us_ == 0 || rtt_sample <= rtprop_us_ ||
        now_us - rtprop_stamp_us_ > config_.rtprop_window_us) {
      rtprop_us_ = rtt_sample;
      rtprop_stamp_us_ = now_us;
    }
  }

  // Delivery rate over the interval this packet was in flight: the longer of
  // the ACK interval and the send interval (as BBR): ACKs that come back
  // bunched (a receiver or a delay element that releases in batches, a
  // stalled thread) shorten the ACK interval, but the data was sent, and
  // so can only have crossed the bottleneck, no faster than it was sent.
  const uint64_t ack_elapsed = now_us > sample.delivered_us ? now_us - sample.delivered_us : 0;
  const uint64_t send_elapsed =
      sample.sent_us > sample.first_sent_us ? sample.sent_us - sample.first_sent_us : 0;
  const uint64_t interval_us = std::max(ack_elapsed, send_elapsed);
  first_sent_us_ = std::max(first_sent_us_, sample.sent_us);
  // No packet is delivered faster than one RTprop after it was sent: a
  // shorter interval means the ACK was for an earlier transmission of a
  // packet resent too soon (as Linux tcp_rate_gen), and its rate is bogus.
  const bool unknown_resend = sample.retransmitted && rtprop_us_ == 0;
  if (interval_us > 0 && interval_us >= rtprop_us_ && !unknown_resend) {
    const uint64_t rate = (delivered_ - sample.delivered_bytes) * 8 * 1'000'000 / interval_us;
    const uint64_t rtt = rtprop_us_ > 0 ? rtprop_us_ : config_.initial_rtt_us;
    const uint64_t window_us =
        std::max<uint64_t>(rtt * config_.btlbw_window_rounds, config_.btlbw_window_min_us);
    if (now_us - bw_window_start_us_ > window_us) {
      bw_previous_max_ = bw_current_max_;
      bw_current_max_ = 0;
      bw_window_start_us_ = now_us;
    }
    bw_current_max_ = std::max(bw_current_max_, std::min(rate, config_.rate_bps_max));
    btlbw_bps_ = std::max(bw_current_max_, bw_previous_max_);
  }

  const uint64_t rtt = rtprop_us_ > 0 ? rtprop_us_ : config_.initial_rtt_us;
  if (startup_ && now_us - round_start_us_ >= rtt) {
    round_start_us_ = now_us;
    if (btlbw_bps_ >= full_bw_ + full_bw_ / 4) {
      full_bw_ = btlbw_bps_;
      full_bw_rounds_ = 0;
    } else if (++full_bw_rounds_ >= 3) {
      ExitStartup(now_us);
    }
  }
  if (!startup_ && now_us - cycle_start_us_ >= rtt) {
    cycle_index_ = (cycle_index_ + 1) % kCycleLength;
    cycle_start_us_ = now_us;
  }

  // Once a round is enough (Cap lift): no rate arithmetic on later ACKs.
  if (!round_cap_bound_ && rate_cap_bps_ > 0 && ModelRate() > CapCeiling()) {
    round_cap_bound_ = true;
  }
  round_delivered_bytes_ += bytes;
  if (sample.delivered_bytes >= next_round_delivered_) {
    next_round_delivered_ = delivered_;
    EndRound(now_us);
  }
}

void CongestionControl::ExitStartup(uint64_t now_us) {
  if (restart_from_bps_ > 0) {
    // A restart that found no room (the flow's own path is the limit)
    // waits twice as long before the next one.
    const bool found = double(btlbw_bps_) >= 1.25 * double(restart_from_bps_);
    restart_wait_rounds_ =
        found ? kRestartRounds : std::min(2 * restart_wait_rounds_, kRestartRoundsMax);
    restart_from_bps_ = 0;
  }
  startup_ = false;
  unarmed_rounds_ = kArmRounds;
  cycle_start_us_ = now_us;
  startup_exit_round_ = rounds_;
}

void CongestionControl::SetRateCap(uint64_t bps) {
  if (unpaced()) {
    rate_cap_bps_ = 0;  // not a lifted cap: no restart
    round_cap_min_ = UINT64_MAX;
    return;
  }
  // Lifted: this flow is now alone at the receiver and at the sender.
  const bool lifted = bps == 0 && rate_cap_bps_ > 0;
  if (bps == 0) cap_lift_ = 1;
  rate_cap_bps_ = bps;
  round_cap_min_ = std::min(round_cap_min_, bps == 0 ? UINT64_MAX : bps);
  if (bps > 0) lift_pending_ = false;
  if (lifted) {
    // Too soon after the last startup: the lift is kept for the round
    // that ends the wait (EndRound), unless a cap comes back first. In
    // startup the flow is already probing for the room.
    lift_pending_ = !startup_;
    MaybeRestart(RestartCause::kLifted);
  }
}

void CongestionControl::OnIdleRestart() {
  path_clean_ = false;  // measured before the gap
  // Delivery rates from here on are measured from the first send after
  // the gap, not across it (as Linux's tcp_rate with nothing in flight).
  delivered_us_ = 0;
  first_sent_us_ = 0;
  if (startup_) {
    // Still in the startup of an earlier flow after a gap (a probe-sized
    // one never fills the pipe nor leaves it): its rounds without growth
    // were that flow running out, and they must not end this one's.
    full_bw_ = btlbw_bps_;
    full_bw_rounds_ = 0;
  }
  MaybeRestart(RestartCause::kIdle);
}

// Room (congestion.h): back to startup, from the current BtlBw.
void CongestionControl::MaybeRestart(RestartCause cause) {
  if (!config_.room_restart || startup_ || btlbw_bps_ == 0) return;
  // A lifted cap comes once per transfer (the flow outlived the others):
  // it waits one gain cycle, not the backoff of fruitless room restarts
  // (shares that wobble mid-transfer doubled it to seconds, and the last
  // flow of a push then crawled at its old share on an idle link).
  const uint64_t wait = cause == RestartCause::kLifted ? kCycleLength : restart_wait_rounds_;
  if (cause != RestartCause::kIdle && rounds_ < startup_exit_round_ + wait) return;
  if (cause == RestartCause::kIdle) restart_wait_rounds_ = kRestartRounds;
  lift_pending_ = false;
  startup_ = true;
  restart_from_bps_ = btlbw_bps_;
  full_bw_ = btlbw_bps_;
  full_bw_rounds_ = 0;
  inflight_hi_ = UINT64_MAX;
  growth_packets_ = 1;
  rounds_since_congestion_ = 0;
  room_rounds_ = 0;
  ++startup_restarts_;
}

void CongestionControl::OnLoss(uint32_t bytes, uint64_t inflight_bytes) {
  round_lost_bytes_ += bytes;
  ++round_lost_packets_;
  round_loss_inflight_ = std::max(round_loss_inflight_, inflight_bytes);
}

void CongestionControl::OnSpuriousLoss(uint32_t bytes) {
  if (round_lost_packets_ > 0 && round_lost_bytes_ >= bytes) {
    // Counted in this round: as if it had never been.
    round_lost_bytes_ -= bytes;
    --round_lost_packets_;
    return;
  }
  if (undo_rounds_left_ == 0) return;
  undo_spurious_bytes_ += bytes;
  if (2 * undo_spurious_bytes_ >= undo_lost_bytes_) {
    inflight_hi_ = undo_inflight_hi_;
    undo_rounds_left_ = 0;
    ++undone_rounds_;
  }
}

void CongestionControl::EndRound(uint64_t now_us) {
  ++rounds_;
  const uint64_t total = round_delivered_bytes_ + round_lost_bytes_;
  const bool over_threshold = config_.loss_threshold > 0 &&
                              round_lost_packets_ >= config_.loss_packets_min &&
                              double(round_lost_bytes_) > config_.loss_threshold * double(total);
  // A queue stood all round: even its smallest RTT is well above RTprop.
  // Not in startup: its own gain of 2.9 builds a queue there.
  const uint64_t queue_us =
      std::max<uint64_t>(config_.queue_delay_min_us,
                         static_cast<uint64_t>(config_.queue_delay_fraction * double(rtprop_us_)));
  const bool queue = !startup_ && config_.standing_queue_response && rtprop_us_ > 0 &&
                     round_min_rtt_us_ != UINT32_MAX && round_min_rtt_us_ > rtprop_us_ + queue_us;
  const bool congested =
      over_threshold || (queue && unarmed_rounds_ == 0 && round_lost_packets_ > 0);
  if (unarmed_rounds_ > 0) {
    const bool drained = rtprop_us_ > 0 && round_min_rtt_us_ <= rtprop_us_ + queue_us;
    unarmed_rounds_ = drained ? 0 : unarmed_rounds_ - 1;
  }
  if (congested && !over_threshold) ++standing_queue_rounds_;
  path_clean_ =
      rtprop_us_ > 0 && round_min_rtt_us_ <= rtprop_us_ + queue_us && round_lost_packets_ == 0;
  // Cap lift: held by the cap on a path with room, or not.
  if (config_.cap_lift && rate_cap_bps_ > 0 && rtprop_us_ > 0 && round_min_rtt_us_ != UINT32_MAX) {
    const bool queued = round_min_rtt_us_ > rtprop_us_ + queue_us;
    if (queued || round_lost_packets_ > 0) {
      cap_lift_ = std::max(1.0, cap_lift_ / kCapLiftStep);
    } else if (round_cap_bound_ && !startup_) {
      cap_lift_ = std::min(kCapLiftMax, cap_lift_ * kCapLiftStep);
      ++cap_lift_rounds_;
    }
  }
  round_cap_bound_ = false;
  // Room: the cap stayed well above BtlBw all round.
  const bool room =
      rate_cap_bps_ > 0 && !congested && double(round_cap_min_) >= kRoomRatio * double(btlbw_bps_);
  room_rounds_ = room ? room_rounds_ + 1 : 0;
  round_cap_min_ = rate_cap_bps_ == 0 ? UINT64_MAX : rate_cap_bps_;
  const uint64_t model = ModelCwnd();
  if (undo_rounds_left_ > 0) --undo_rounds_left_;
  if (congested) {
    undo_rounds_left_ = 2;
    undo_inflight_hi_ = inflight_hi_;
    undo_lost_bytes_ = round_lost_bytes_;
    undo_spurious_bytes_ = 0;
    ++congestion_rounds_;
    growth_packets_ = 1;
    rounds_since_congestion_ = 0;
    const uint64_t base = std::min({round_loss_inflight_, model, inflight_hi_});
    inflight_hi_ = std::max<uint64_t>(static_cast<uint64_t>(config_.loss_beta * double(base)),
                                      uint64_t(config_.cwnd_packets_min) * config_.packet_bytes);
    if (startup_) ExitStartup(now_us);  // the pipe is full: stop doubling
  } else if (inflight_hi_ != UINT64_MAX) {
    // Additive (one packet a round, as TCP Reno) while congestion is recent;
    // after additive_rounds without it, doubling: a false alarm on a long fat
    // link must not cost thousands of rounds.
    // While a queue stands the alarm was no false one: stay additive, as
    // the loss-based flows that keep the queue do.
    inflight_hi_ += uint64_t(growth_packets_) * config_.packet_bytes;
    if (queue) {
      growth_packets_ = 1;
      rounds_since_congestion_ = 0;
    } else if (++rounds_since_congestion_ > config_.additive_rounds) {
      growth_packets_ = std::min<uint32_t>(growth_packets_ * 2, 1u << 20);
    }
    if (inflight_hi_ >= model) inflight_hi_ = UINT64_MAX;
  }
  round_delivered_bytes_ = 0;
  round_lost_bytes_ = 0;
  round_lost_packets_ = 0;
  round_loss_inflight_ = 0;
  standing_rtt_us_ = round_min_rtt_us_ == UINT32_MAX ? 0 : round_min_rtt_us_;
  round_min_rtt_us_ = UINT32_MAX;
  if (room_rounds_ >= kRoomRounds) MaybeRestart(RestartCause::kRoom);
  if (lift_pending_) MaybeRestart(RestartCause::kLifted);
}

uint64_t CongestionControl::ModelRate() const {
  if (btlbw_bps_ == 0) return config_.initial_rate_bps;
  const double gain = startup_ ? kStartupGain : kCycleGains[cycle_index_];
  return static_cast<uint64_t>(gain * static_cast<double>(btlbw_bps_));
}

uint64_t CongestionControl::CapCeiling() const {
  const double cap_gain = startup_ ? (restart_from_bps_ > 0 ? 1.0 : kCapStartupGain) : kCapHeadroom;
  return static_cast<uint64_t>(cap_gain * cap_lift_ * static_cast<double>(rate_cap_bps_));
}

uint64_t CongestionControl::pacing_rate_bps() const {
  if (unpaced()) return config_.rate_bps_max;
  uint64_t rate = ModelRate();
  if (rate_cap_bps_ > 0) {
    // A restart under a cap climbs to the share, not past it: the others
    // are at theirs (a first startup probes at 1.25). After startup the
    // cap is a ceiling 25% above the share and the flow's own gain cycle
    // paces it: with the cap times the cycle's gain, the flows sat at a
    // share of what they had achieved (C is measured, not known), and
    // one flow probing at a time could not lift C (psd's pull held at
    // 68 Mbit/s on a 100 Mbit/s link). The ceiling also carries the
    // cap lift (congestion.h).
    rate = std::min(rate, CapCeiling());
    // The share as a floor: the receiver's word that there is room. When
    // the others finish, the gain cycle's one 1.25 probe per 8 rounds took
    // the last flows of a push from a 1/8 share to the link in ~1 s while
    // the link idled. Not after congestion (inflight_hi set): a flow whose
    // own path is slower than its share finds it by loss and stays under
    // it until inflight_hi grows back. Several flows lifted at once
    // overshoot by at most their cwnd (2 x BDP at the old BtlBw), and the
    // shares, measured from their new rates, come back to an even split.
    if (!startup_ && inflight_hi_ == UINT64_MAX &&
        double(rate_cap_bps_) >= kCapFloorRatio * double(btlbw_bps_)) {
      rate = std::max(rate, rate_cap_bps_);
    }
  }
  return std::clamp<uint64_t>(rate, 1'000'000, config_.rate_bps_max);
}

// The window the path model asks for: gain x BDP, within the floors.
uint64_t CongestionControl::ModelCwnd() const {
  uint64_t rtt = rtprop_us_ > 0 ? rtprop_us_ : config_.initial_rtt_us;
  if (ack_path_loaded_ && rtprop_us_ > 0 && !unpaced()) {
    rtt = std::max<uint64_t>(
        rtt, std::min<uint64_t>(standing_rtt_us_, uint64_t(kStandingRttMax) * rtprop_us_));
  }
  const uint64_t bw = btlbw_bps_ > 0 ? btlbw_bps_ : config_.initial_rate_bps;
  const double gain = startup_ ? kStartupGain : kCwndGain;
  const double bytes_per_us = double(bw) / 8e6;
  const uint64_t bdp = static_cast<uint64_t>(gain * bytes_per_us * double(rtt));
  const uint64_t time_floor = static_cast<uint64_t>(bytes_per_us * config_.cwnd_min_us);
  const uint64_t floor = uint64_t(config_.cwnd_packets_min) * config_.packet_bytes;
  const uint64_t ceil = uint64_t(config_.cwnd_packets_max) * config_.packet_bytes;
  return std::clamp(std::max(bdp, time_floor), floor, ceil);
}

uint64_t CongestionControl::cwnd_bytes() const { return std::min(ModelCwnd(), inflight_hi_); }

uint64_t FairShareBps(uint64_t capacity_bps, std::vector<uint64_t>& rates_bps) {
  if (rates_bps.size() < 2 || capacity_bps == 0) return 0;
  std::sort(rates_bps.begin(), rates_bps.end());
  uint64_t left = capacity_bps;
  const size_t n = rates_bps.size();
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint64_t level = left / (n - i);
    if (rates_bps[i] >= level) return level;
    left -= rates_bps[i];
  }
  return left;
}

double WeightedShareLevel(uint64_t capacity_bps, const std::vector<uint64_t>& rates_bps,
                          const std::vector<double>& weights, std::vector<size_t>& order) {
  const size_t n = rates_bps.size();
  if (n < 2 || capacity_bps == 0 || weights.size() != n) return 0;
  order.resize(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // By the level at which each flow stops taking more: r_i / w_i.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return double(rates_bps[a]) * weights[b] < double(rates_bps[b]) * weights[a];
  });
  double left = double(capacity_bps);
  double weight = 0;
  for (double w : weights) weight += w;
  for (size_t k = 0; k + 1 < n; ++k) {
    const size_t i = order[k];
    const double level = left / weight;
    if (double(rates_bps[i]) >= kHeldShare * level * weights[i]) return level;
    left -= double(rates_bps[i]);
    weight -= weights[i];
  }
  // The last flow takes what the others leave.
  return std::max(left, 0.0) / weights[order[n - 1]];
}

double ShareLift::Update(uint64_t now_us, bool room, uint32_t rtprop_us) {
  if (now_us < next_us_) return lift_;
  const uint64_t step_us = uint64_t(step_rtprops_) * std::max<uint32_t>(rtprop_us, 1000);
  next_us_ = now_us + step_us;
  if (!room) {
    // A lift that met a queue: the spans measured the link meanwhile. One
    // that met it at once found a full link: probe it less often.
    if (lift_ > 1) {
      hold_steps_ = probe_steps_ <= kShareLiftFruitless
                        ? std::min(2 * hold_steps_, kShareLiftHoldStepsMax)
                        : kShareLiftHoldSteps;
      hold_until_us_ = now_us + hold_steps_ * step_us;
    }
    lift_ = 1;
    probe_steps_ = 0;
  } else if (now_us >= hold_until_us_ && lift_ < kShareLiftMax) {
    lift_ = std::min(kShareLiftMax, lift_ * kShareLiftStep);
    ++steps_;
    ++probe_steps_;
  }
  return lift_;
}

uint64_t ShareCapacityBps(uint64_t span_bps, uint64_t peer_btlbw_max_bps) {
  return span_bps == 0 ? 0 : std::max(span_bps, peer_btlbw_max_bps);
}

}  // namespace transport
}  // namespace hetps
