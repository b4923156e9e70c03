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

void LinkThreshold::OnFlowClosed(const EarlyCloseConfig& c, bool full, uint64_t duration_us) {
  window_.push_back(full ? duration_us : UINT64_MAX);
  while (window_.size() > c.window_flows) window_.pop_front();
}

}  // namespace transport
}  // namespace hetps
