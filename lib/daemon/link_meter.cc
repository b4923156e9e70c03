#include "lib/daemon/link_meter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace hetps {

absl::Status ValidateLinkMeterConfig(const LinkMeterConfig& c) {
  if (c.probe_bytes < 1024 || c.probe_bytes > (uint64_t(1) << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_chunk_bytes: ", c.probe_bytes, " is outside [1024, 4294967296]"));
  }
  if (c.probe_num < 1 || c.probe_num > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_chunk_num: ", c.probe_num, " is outside [1, 64]"));
  }
  if (!(c.report_rate >= 0 && c.report_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("report_rate: ", c.report_rate, " is outside [0, 1]"));
  }
  return absl::OkStatus();
}

void LinkMeter::SetConfig(const LinkMeterConfig& config) {
  absl::MutexLock lock(&mu_);
  config_ = config;
}

void LinkMeter::OnFlow(const transport::Peer& from, const transport::FlowResult& r) {
  if (r.received < 2 || r.last_us <= r.first_us) return;
  absl::MutexLock lock(&mu_);
  if (r.bytes < config_.probe_bytes) return;
  // Bytes as the link carries them: each datagram's header and its IPv4
  // and UDP headers count, as a shaper counts them.
  const double wire = double(r.bytes) + double(r.received) * kPacketOverheadBytes;
  const double per_packet = wire / r.received;
  const uint32_t half = (r.total_packets + 1) / 2;
  double rate;
  if (r.mid_us > r.first_us && r.last_us > r.mid_us && r.received > half) {
    // The second half: the packets after the one that made half, over
    // the time from it to the last. A token-bucket shaper passes its
    // burst allowance at line rate when a flow starts after a pause, and
    // the flow's first bytes then read far above the link's rate.
    rate = per_packet * double(r.received - half) * 1e6 / double(r.last_us - r.mid_us);
  } else {
    // The first packet marks the start: the bytes after it, over the
    // time to the last one.
    rate = (wire - per_packet) * 1e6 / double(r.last_us - r.first_us);
  }
  Link& l = links_[from];
  l.recent.push_back({rate, r.bytes});
  while (l.recent.size() > config_.probe_num) l.recent.pop_front();
  l.now.from = from;
  const auto best = std::max_element(l.recent.begin(), l.recent.end());
  l.now.bytes_per_s = best->first;
  l.now.flow_bytes = best->second;
  ++l.now.samples;
  l.now.bytes += r.bytes;
  l.now.updated_us = r.last_us;
}

std::vector<LinkSample> LinkMeter::TakeChanged() {
  absl::MutexLock lock(&mu_);
  std::vector<LinkSample> out;
  for (auto& [peer, l] : links_) {
    // Only a full window of samples is an estimate.
    if (l.recent.size() < config_.probe_num) continue;
    const double moved =
        l.reported > 0 ? std::abs(l.now.bytes_per_s - l.reported) / l.reported : 1.0;
    if (l.reported > 0 && moved <= config_.report_rate) continue;
    l.reported = l.now.bytes_per_s;
    out.push_back(l.now);
  }
  return out;
}

std::vector<LinkSample> LinkMeter::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<LinkSample> out;
  for (const auto& [peer, l] : links_) out.push_back(l.now);
  return out;
}

void LinkMeter::Reset() {
  absl::MutexLock lock(&mu_);
  links_.clear();
}

}  // namespace hetps
