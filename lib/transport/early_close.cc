#include "lib/transport/early_close.h"

#include <algorithm>
#include <cmath>

namespace hetps {
namespace transport {

absl::Status ValidateEarlyCloseConfig(const EarlyCloseConfig& c) {
  if (!(c.lt_rtprop_factor >= 0 && c.lt_rtprop_factor <= 100)) {
    return absl::InvalidArgumentError("early close: lt_rtprop_factor outside [0, 100]");
  }
  if (!(c.min_fraction > 0 && c.min_fraction <= 1)) {
    return absl::InvalidArgumentError("early close: min_fraction outside (0, 1]");
  }
  if (c.window_flows == 0 || c.window_flows > 100000) {
    return absl::InvalidArgumentError("early close: window_flows outside [1, 100000]");
  }
  if (c.lt_min_us > 600'000'000) {
    return absl::InvalidArgumentError("early close: lt_min over 600 s");
  }
  if (c.slack_us > 600'000'000) {
    return absl::InvalidArgumentError("early close: slack over 600 s");
  }
  if (!(c.slack_fraction >= 0 && c.slack_fraction <= 1)) {
    return absl::InvalidArgumentError("early close: slack_fraction outside [0, 1]");
  }
  return absl::OkStatus();
}

uint32_t PacketsForFraction(uint32_t total, double min_fraction) {
  const double need = std::ceil(min_fraction * double(total) - 1e-9);
  return static_cast<uint32_t>(std::clamp(need, 1.0, double(total)));
}

EarlyCloseDecision DecideEarlyClose(uint64_t elapsed_us, uint64_t lt_us, uint64_t deadline_us,
                                    uint32_t received, uint32_t total, bool critical_in,
                                    bool first_pass_done, double min_fraction) {
  if (elapsed_us >= deadline_us) return EarlyCloseDecision::kCloseDeadline;
  if (elapsed_us < lt_us) return EarlyCloseDecision::kWait;
  if (critical_in && first_pass_done && received >= PacketsForFraction(total, min_fraction)) {
    return EarlyCloseDecision::kCloseFraction;
  }
  return EarlyCloseDecision::kWait;
}

uint64_t LinkThreshold::LtUs(const EarlyCloseConfig& c, uint64_t bytes, uint32_t rtprop_us,
                             uint64_t btlbw_bps) const {
  if (c.lt_fixed_us > 0) return c.lt_fixed_us;
  const uint64_t best =
      window_.empty() ? UINT64_MAX : *std::min_element(window_.begin(), window_.end());
  if (best != UINT64_MAX) return std::max<uint64_t>(best, c.lt_min_us);
  if (btlbw_bps == 0) return UINT64_MAX;
  const double model = c.lt_rtprop_factor * rtprop_us + double(bytes) * 8e6 / double(btlbw_bps);
  return std::max<uint64_t>(static_cast<uint64_t>(std::min(model, 1e15)), c.lt_min_us);
}

void IngressRate::Roll(uint64_t now_us) {
  if (bin_start_us_ == 0) bin_start_us_ = now_us;
  if (now_us - bin_start_us_ < bin_us_) return;
  if (bin_bytes_ > 0) done_.push_back({bin_start_us_, bin_bytes_, bin_busy_us_});
  // The next bin starts on the grid; empty bins in between count as idle.
  bin_start_us_ += (now_us - bin_start_us_) / bin_us_ * bin_us_;
  bin_bytes_ = 0;
  bin_busy_us_ = 0;
  const uint64_t horizon = uint64_t(bin_us_) * bins_;
  while (!done_.empty() && done_.front().start_us + horizon < now_us) done_.pop_front();
  // The maxima change only here (once per bin): the rates are read on
  // every send and ACK batch.
  best_bytes_ = 0;
  link_bps_ = 0;
  uint64_t span_bytes = 0, span_bins = 0, span_end_us = 0;
  auto end_span = [&] {
    if (span_bins >= 2) {
      link_bps_ = std::max(link_bps_, span_bytes * 8 * 1'000'000 / (span_bins * bin_us_));
    }
    span_bytes = span_bins = 0;
  };
  for (const Bin& b : done_) {
    best_bytes_ = std::max(best_bytes_, b.bytes);
    if (span_bins > 0 && b.start_us != span_end_us) end_span();  // idle bins between
    if (2 * b.busy_us < bin_us_) {
      end_span();
      continue;
    }
    span_bytes += b.bytes;
    span_end_us = b.start_us + bin_us_;
    if (++span_bins == kSpanBins) end_span();
  }
  end_span();
}

void IngressRate::OnBytes(uint64_t now_us, uint64_t bytes) {
  Roll(now_us);
  bin_bytes_ += bytes;
  if (last_us_ != 0 && now_us > last_us_ && now_us - last_us_ < kBusyGapUs) {
    bin_busy_us_ += now_us - last_us_;
  }
  last_us_ = now_us;
}

uint64_t IngressRate::rate_bps(uint64_t now_us) {
  Roll(now_us);
  return best_bytes_ * 8 * 1'000'000 / bin_us_;
}

uint64_t IngressRate::link_rate_bps(uint64_t now_us) {
  Roll(now_us);
  return link_bps_;
}

uint64_t DeadlineUs(const EarlyCloseConfig& c, uint64_t max_lt_us) {
  const double proportional = c.slack_fraction * static_cast<double>(max_lt_us);
  const uint64_t slack =
      std::max<uint64_t>(c.slack_us, static_cast<uint64_t>(std::min(proportional, 1e15)));
  return max_lt_us > UINT64_MAX - slack ? UINT64_MAX : max_lt_us + slack;
}

uint64_t SharedLtUs(const EarlyCloseConfig& c, uint32_t rtprop_us, uint64_t shared_bytes,
                    uint64_t ingress_bps) {
  if (ingress_bps == 0 || c.lt_fixed_us > 0) return 0;
  const double lt =
      c.lt_rtprop_factor * rtprop_us + double(shared_bytes) * 8e6 / double(ingress_bps);
  return static_cast<uint64_t>(std::min(lt, 1e15));
}

void LinkThreshold::OnFlowClosed(const EarlyCloseConfig& c, bool full, uint64_t duration_us) {
  window_.push_back(full ? duration_us : UINT64_MAX);
  while (window_.size() > c.window_flows) window_.pop_front();
}

}  // namespace transport
}  // namespace hetps
