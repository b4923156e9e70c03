#include "lib/daemon/link_meter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

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
  if (c.window_us < 100'000 || c.window_us > 3'600'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("link window: ", c.window_us, " us is outside [0.1 s, 1 h]"));
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

namespace {

// A flow's wire bytes as arrived: where it says when half of it was in,
// each half evenly over its own time (a flow slowed by others for a while
// is not spread into the moments they left it the link); otherwise evenly
// from its first to its last arrival.
struct Piece {
  uint64_t from_us = 0, to_us = 0;
  double bytes = 0;
};
struct Arrivals {
  Piece piece[2];
  int pieces = 1;
};
Arrivals ArrivalsOf(const transport::FlowResult& r, double wire) {
  Arrivals a;
  const uint32_t half = (r.total_packets + 1) / 2;
  if (r.mid_us > r.first_us && r.mid_us < r.last_us && r.received > half) {
    const double head = wire * half / r.received;
    a.piece[0] = {r.first_us, r.mid_us, head};
    a.piece[1] = {r.mid_us, r.last_us, wire - head};
    a.pieces = 2;
  } else {
    a.piece[0] = {r.first_us, r.last_us, wire};
  }
  return a;
}

// The bytes that arrived at or after `from_us`.
double BytesSince(const Arrivals& a, uint64_t from_us) {
  double bytes = 0;
  for (int i = 0; i < a.pieces; ++i) {
    const Piece& p = a.piece[i];
    if (p.from_us >= from_us) {
      bytes += p.bytes;
    } else if (p.to_us > from_us) {
      bytes += p.bytes * double(p.to_us - from_us) / double(p.to_us - p.from_us);
    }
  }
  return bytes;
}

}  // namespace

// Evenly over [from_us, to_us], within the bins kept.
void LinkMeter::Spread(uint64_t from_us, uint64_t to_us, double bytes) {
  const uint64_t begin = traffic_end_ - kTrafficBins;  // the oldest bin kept
  const double span = double(to_us - from_us);
  for (uint64_t b = std::max(from_us / kTrafficBinUs, begin); b <= to_us / kTrafficBinUs; ++b) {
    double part = 1.0;
    if (span > 0) {
      const double lo = std::max<double>(from_us, b * kTrafficBinUs);
      const double hi = std::min<double>(to_us, (b + 1) * kTrafficBinUs);
      part = std::max(0.0, hi - lo) / span;
    }
    traffic_[b - begin] += bytes * part;
  }
}

void LinkMeter::AddTraffic(const transport::FlowResult& r, double wire) {
  uint64_t last = r.last_us / kTrafficBinUs;
  if (last + 1 > traffic_end_) {
    // Slide the window forward to end at this flow's last bin.
    const uint64_t add = last + 1 - traffic_end_;
    if (add >= kTrafficBins || traffic_end_ == 0) {
      traffic_.assign(kTrafficBins, 0.0);
      last = std::max(last, kTrafficBins - 1);  // the window starts at bin 0 or later
    } else {
      for (uint64_t k = 0; k < add; ++k) {
        traffic_.pop_front();
        traffic_.push_back(0.0);
      }
    }
    traffic_end_ = last + 1;
  }
  if (r.arrivals.usable()) {
    // Where the bytes came, scaled to the wire's (IPv4 and UDP headers).
    // Spread evenly, a flow that waited on others for part of its time
    // puts bytes into moments when the others had the link, and the
    // busiest moment of such sums reads a saturated host faster than its
    // link (schedd takes a host's throughput from it).
    double datagrams = 0;
    for (uint64_t b : r.arrivals.bytes) datagrams += double(b);
    const uint64_t begin = traffic_end_ - kTrafficBins;
    for (size_t i = 0; i < r.arrivals.bytes.size() && datagrams > 0; ++i) {
      const uint64_t bin = r.arrivals.first_bin + i;
      if (bin < begin || bin >= traffic_end_) continue;
      traffic_[bin - begin] += double(r.arrivals.bytes[i]) * wire / datagrams;
    }
  } else {
    const Arrivals a = ArrivalsOf(r, wire);
    for (int i = 0; i < a.pieces; ++i) {
      Spread(a.piece[i].from_us, a.piece[i].to_us, a.piece[i].bytes);
    }
  }
  traffic_new_ = true;
}

void LinkMeter::OnFlow(const transport::Peer& from, const transport::FlowResult& r) {
  if (r.received == 0 || r.last_us < r.first_us) return;
  // Bytes as the link carries them: each datagram's header and its IPv4
  // and UDP headers count, as a shaper counts them.
  const double wire = double(r.bytes) + double(r.received) * kPacketOverheadBytes;
  const double per_packet = wire / r.received;
  absl::MutexLock lock(&mu_);
  if (local_ip_ == 0 || from.ip != local_ip_) AddTraffic(r, wire);
  Link& l = links_[from];
  l.now.from = from;
  Link::Span& sp = l.span;
  if (sp.open &&
      (r.first_us <= sp.last_us ||
       (r.iteration == sp.iteration && r.first_us <= sp.last_us + SpanGapUs(sp, per_packet)))) {
    if (r.last_us <= sp.start_us) return;  // over before the span's timing began
    sp.bytes_after += BytesSince(ArrivalsOf(r, wire), sp.start_us);
    sp.payload += r.bytes;
    sp.last_us = std::max(sp.last_us, r.last_us);
    sp.longest_us = std::max(sp.longest_us, r.last_us - r.first_us);
    sp.per_packet = per_packet;
    if (sp.payload >= kSpanProbes * config_.probe_bytes) CloseSpan(&l);
    return;
  }
  CloseSpan(&l);
  // A new span: its first flow needs a dispersion of its own.
  if (r.received < 2 || r.last_us == r.first_us) return;
  sp.open = true;
  const Arrivals a = ArrivalsOf(r, wire);
  if (a.pieces == 2) {
    // The second half: the packets after the one that made half, over
    // the time from it to the last. A token-bucket shaper passes its
    // burst allowance at line rate when a flow starts after a pause, and
    // the flow's first bytes then read far above the link's rate.
    sp.start_us = a.piece[1].from_us;
    sp.bytes_after = a.piece[1].bytes;
  } else {
    // The first packet marks the start: the bytes after it.
    sp.start_us = r.first_us;
    sp.bytes_after = wire - per_packet;
  }
  sp.payload = r.bytes;
  sp.iteration = r.iteration;
  sp.last_us = r.last_us;
  sp.longest_us = r.last_us - r.first_us;
  sp.per_packet = per_packet;
}

uint64_t LinkMeter::SpanGapUs(const Link::Span& sp, double per_packet) {
  const double rate =
      sp.last_us > sp.start_us ? sp.bytes_after * 1e6 / double(sp.last_us - sp.start_us) : 0;
  if (rate <= 0) return kSpanGapMinUs;
  return std::max(
      {kSpanGapMinUs, uint64_t(kSpanGapPackets * per_packet * 1e6 / rate), sp.longest_us});
}

void LinkMeter::CloseSpan(Link* l) {
  Link::Span sp = l->span;
  l->span = Link::Span{};
  if (!sp.open || sp.payload < config_.probe_bytes || sp.last_us <= sp.start_us) return;
  l->recent.push_back(
      {sp.bytes_after * 1e6 / double(sp.last_us - sp.start_us), sp.payload, sp.last_us});
  ++l->now.samples;
  l->now.bytes += sp.payload;
  // Spans end in about the order they are timed; the newest one's end is
  // this link's now.
  const uint64_t now_us = std::max(l->now.updated_us, sp.last_us);
  while (l->recent.size() > config_.probe_num ||
         (l->recent.size() > 1 && l->recent.front().last_us + config_.window_us < now_us)) {
    l->recent.pop_front();
  }
  const auto best = std::max_element(l->recent.begin(), l->recent.end(),
                                     [](const auto& a, const auto& b) { return a.rate < b.rate; });
  l->now.bytes_per_s = best->rate;
  l->now.flow_bytes = best->flow_bytes;
  l->now.sampled_us = best->last_us;
  l->now.updated_us = now_us;
}

void LinkMeter::CloseQuietSpans(uint64_t now_us) {
  for (auto& [peer, l] : links_) {
    const Link::Span& sp = l.span;
    // A flow that continues the span began within the gap and, being of
    // about the size of the span's flows, is over within twice the
    // longest of them; until then it may still come.
    if (sp.open && now_us > sp.last_us + SpanGapUs(sp, sp.per_packet) + 2 * sp.longest_us) {
      CloseSpan(&l);
    }
  }
}

std::vector<LinkSample> LinkMeter::TakeChanged() {
  const uint64_t now_us = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  CloseQuietSpans(now_us);
  std::vector<LinkSample> out;
  for (auto& [peer, l] : links_) {
    // The first estimate takes probe_num probes.
    if (l.now.samples < config_.probe_num) continue;
    const double moved =
        l.reported > 0 ? std::abs(l.now.bytes_per_s - l.reported) / l.reported : 1.0;
    const bool refresh = l.now.samples > l.reported_samples && now_us >= l.reported_us + kRefreshUs;
    if (l.reported > 0 && moved <= config_.report_rate && !refresh) continue;
    l.reported = l.now.bytes_per_s;
    l.reported_samples = l.now.samples;
    l.reported_us = now_us;
    out.push_back(Reported(l, now_us));
  }
  return out;
}

std::vector<LinkSample> LinkMeter::All() {
  const uint64_t now_us = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  CloseQuietSpans(now_us);
  std::vector<LinkSample> out;
  for (const auto& [peer, l] : links_) {
    if (l.now.samples == 0) continue;
    out.push_back(Reported(l, now_us));
  }
  return out;
}

LinkSample LinkMeter::Reported(const Link& l, uint64_t now_us) {
  auto age = [&](uint64_t end_us) { return now_us > end_us ? now_us - end_us : 0; };
  LinkSample s = l.now;
  s.age_us = age(l.now.sampled_us);
  const size_t skip = l.recent.size() > kProbesReported ? l.recent.size() - kProbesReported : 0;
  for (size_t k = skip; k < l.recent.size(); ++k) {
    s.probes.push_back({l.recent[k].rate, age(l.recent[k].last_us)});
  }
  return s;
}

bool LinkMeter::TakeTraffic(uint64_t bins, NodeTraffic* out) {
  const int64_t now_unix_ms = absl::ToUnixMillis(clock_->Now());
  const uint64_t now_us = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  if (!traffic_new_) return false;
  traffic_new_ = false;
  bins = std::clamp<uint64_t>(bins, 1, kTrafficBins);
  const uint64_t end = now_us / kTrafficBinUs + 1;  // the current bin is the last
  const uint64_t first = end > bins ? end - bins : 0;
  out->bin_ms = kTrafficBinUs / 1000;
  out->first_bin_unix_ms = now_unix_ms - int64_t(now_us / 1000) + int64_t(first * out->bin_ms);
  out->in_bytes.assign(end - first, 0);
  const uint64_t begin = traffic_end_ - kTrafficBins;
  for (uint64_t b = std::max(first, begin); b < std::min(end, traffic_end_); ++b) {
    out->in_bytes[b - first] = static_cast<uint64_t>(traffic_[b - begin] + 0.5);
  }
  return true;
}

void LinkMeter::SetLocalIp(uint32_t ip) {
  absl::MutexLock lock(&mu_);
  local_ip_ = ip;
}

void LinkMeter::Reset() {
  absl::MutexLock lock(&mu_);
  links_.clear();
  traffic_.clear();
  traffic_end_ = 0;
  traffic_new_ = false;
}

}  // namespace hetps
