#include "lib/transport/congestion.h"

#include <algorithm>

namespace hetps {
namespace transport {
namespace {

constexpr double kStartupGain = 2.885;  // 2/ln 2: doubles the rate every round
constexpr double kCwndGain = 2.0;
constexpr double kCycleGains[] = {1.25, 0.75, 1, 1, 1, 1, 1, 1};
constexpr int kCycleLength = sizeof(kCycleGains) / sizeof(kCycleGains[0]);

}  // namespace

CongestionControl::CongestionControl(const CongestionConfig& config) : config_(config) {}

SendSample CongestionControl::OnSend(uint64_t now_us, bool retransmission) const {
  SendSample s;
  s.sent_us = now_us;
  s.delivered_bytes = delivered_;
  // Before anything was delivered, measure from the first send.
  s.delivered_us = delivered_us_ == 0 ? now_us : delivered_us_;
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
    if (rtprop_us_ == 0 || rtt_sample <= rtprop_us_ ||
        now_us - rtprop_stamp_us_ > config_.rtprop_window_us) {
      rtprop_us_ = rtt_sample;
      rtprop_stamp_us_ = now_us;
    }
  }

  // Delivery rate over the interval this packet was in flight.
  const uint64_t interval_us = now_us > sample.delivered_us ? now_us - sample.delivered_us : 0;
  if (interval_us > 0) {
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
      startup_ = false;
      cycle_start_us_ = now_us;
    }
  }
  if (!startup_ && now_us - cycle_start_us_ >= rtt) {
    cycle_index_ = (cycle_index_ + 1) % kCycleLength;
    cycle_start_us_ = now_us;
  }
}

uint64_t CongestionControl::pacing_rate_bps() const {
  if (btlbw_bps_ == 0) return config_.initial_rate_bps;
  const double gain = startup_ ? kStartupGain : kCycleGains[cycle_index_];
  const uint64_t rate = static_cast<uint64_t>(gain * static_cast<double>(btlbw_bps_));
  return std::clamp<uint64_t>(rate, 1'000'000, config_.rate_bps_max);
}

uint64_t CongestionControl::cwnd_bytes() const {
  const uint64_t floor = uint64_t(config_.cwnd_packets_min) * config_.packet_bytes;
  const uint64_t ceil = uint64_t(config_.cwnd_packets_max) * config_.packet_bytes;
  const uint64_t rtt = rtprop_us_ > 0 ? rtprop_us_ : config_.initial_rtt_us;
  const uint64_t bw = btlbw_bps_ > 0 ? btlbw_bps_ : config_.initial_rate_bps;
  const double gain = startup_ ? kStartupGain : kCwndGain;
  const uint64_t bdp = static_cast<uint64_t>(gain * double(bw) / 8.0 * double(rtt) / 1e6);
  return std::clamp(bdp, floor, ceil);
}

}  // namespace transport
}  // namespace hetps
