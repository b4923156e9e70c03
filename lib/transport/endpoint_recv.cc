// The UDP endpoint's receive side: datagrams read and authenticated,
// receive flows opened within the budget (recv_budget.h), packets handed
// to the Receiver, loss-tolerant flows closed early (early_close.h).
#include <algorithm>

#include "lib/transport/endpoint_internal.h"

namespace hetps {
namespace transport {

void Endpoint::Impl::Receive(uint64_t now) {
  // Bounded work per wake-up so sending is never starved.
  for (int round = 0; round < 16; ++round) {
    const int got = socket->RecvBatch(&rx);
    if (got <= 0) return;
    // Stamp each batch after it is read, never with an earlier time: the
    // thread can be preempted for milliseconds on a busy host, and a wake-up
    // takes receive work (psd aggregates as packets arrive); an ACK stamped
    // before it arrived reads as a shorter RTT and a faster delivery (late
    // stamps only lengthen RTT samples, which the min filter ignores).
    now = Now();
    for (const InDatagram& d : rx) {
      ++stats.datagrams_received;
      stats.bytes_received += d.len;
      Packet p;
      DropReason why = d.truncated ? DropReason::kOversized : Decode(d.data, d.len, &p);
      // Authenticated before anything else reads it (packet_auth.h); a
      // private channel's carry no tag (datagram_socket.h), only the key id.
      if (why == DropReason::kNone) {
        why = d.private_channel
                  ? auth.CheckKey(p.header)
                  : auth.Verify(d.from, p.header, d.data, p.payload, p.header.payload_bytes);
      }
      if (why != DropReason::kNone) {
        ++stats.drops[size_t(why)];
        continue;
      }
      switch (p.header.type) {
        case PacketType::kData:
          // When it arrived, as far as the socket says: what times the
          // flow for its receiver (FlowResult), where a batch read late
          // would read as one instant. Timers and ACKs keep `now`.
          HandleData(d.from, p, now, now - std::min(now, d.age_us));
          break;
        case PacketType::kAck:
          // ACKs keep the read time. The kernel stamps a datagram before
          // netfilter and any local ingress queue: where those delay it (a
          // firewall, the testbed's delay queue), its time reads early, an
          // RTT short and the RTO below the real RTT.
          HandleAck(d.from, p, now);
          break;
        case PacketType::kStop:
          HandleStop(d.from, p);
          break;
      }
    }
    EmitAcks(now);
    Flush(now);
    if (static_cast<uint32_t>(got) < config.batch_max) return;
  }
}

void Endpoint::Impl::HandleData(const Peer& from, const Packet& p, uint64_t now, uint64_t arrived) {
  const Header& h = p.header;
  const RecvKey key{from, h.flow_id};
  if (auto c = closed.find(key); c != closed.end()) {
    // A retransmission whose ACK was lost: never delivered twice. ACK it
    // again so the sender can finish; a flow closed early gets its STOP
    // again (the first one may have been lost).
    ++stats.drops[size_t(DropReason::kDuplicate)];
    QueueAck(from, h, now, true);
    if (c->second.reason != CloseReason::kComplete) {
      QueueStop(from, h, c->second);
    }
    return;
  }
  auto it = recv.find(key);
  if (it == recv.end()) {
    if (DropReason why = OpenRecv(key, h, now); why != DropReason::kNone) {
      ++stats.drops[size_t(why)];
      return;
    }
    it = recv.find(key);
    it->second.first_at_us = arrived;
  }
  RecvFlow& f = it->second;
  if (h.total_packets != f.total || h.iteration != f.iteration || h.plan != f.plan ||
      h.samples != f.samples || f.lossy != ((h.flags & kFlagLossTolerant) != 0)) {
    ++stats.drops[size_t(DropReason::kBadSequence)];
    return;
  }
  f.last_us = now;
  f.last_at_us = std::max(f.last_at_us, arrived);
  uint64_t& word = f.bitmap[h.seq / 64];
  const uint64_t bit = uint64_t{1} << (h.seq % 64);
  // The flow's last missing packet: nothing will come to share its ACK.
  QueueAck(from, h, now, f.received + 1 == f.total && !(word & bit));
  if (word & bit) {
    ++stats.drops[size_t(DropReason::kDuplicate)];
    return;
  }
  word |= bit;
  ingress.OnBytes(now, f.packet_bytes);
  ingress_now.OnBytes(now, f.packet_bytes);
  RecvLink& link = links[from];
  link.recent.OnBytes(now, f.packet_bytes);
  if (link.last_us == 0 || now >= link.last_us + kShareWindowUs) link.active_since_us = now;
  link.last_us = now;
  link.clean = (h.flags & kFlagPathClean) != 0;
  receiver->OnData(from, h, p.payload);
  ++f.received;
  if (f.received == (f.total + 1) / 2) f.mid_us = std::max(f.first_at_us, arrived);
  f.bytes += h.payload_bytes;
  f.arrivals.Add(std::max(f.first_at_us, arrived), kHeaderBytes + h.payload_bytes);
  while (f.prefix < f.total && f.has(f.prefix)) ++f.prefix;
  if (f.lossy) {
    if (h.flags & kFlagCriticalEnd) f.critical_end = h.seq;
    if ((h.flags & kFlagResent) || h.seq + 1 == f.total) f.first_pass_done = true;
  }
  // The sender's latest estimates: the LT model's (loss-tolerant flows)
  // and the ingress share's (IngressShareBps).
  if (h.rtprop_us > 0) f.rtprop_us = h.rtprop_us;
  if (h.btlbw_kbps > 0) f.btlbw_bps = uint64_t(h.btlbw_kbps) * 1000;
  if (f.received == f.total) {
    CloseFlow(key, CloseReason::kComplete);
  } else if (f.lossy && now - f.start_us >= f.lt_us &&
             DecideEarlyClose(now - f.start_us, f.lt_us, f.deadline_us, f.received, f.total,
                              f.critical_in(), f.first_pass_done,
                              early_close.min_fraction) != EarlyCloseDecision::kWait) {
    CloseFlow(key, now - f.start_us >= f.deadline_us ? CloseReason::kDeadline
                                                     : CloseReason::kEarlyFraction);
  }
}

DropReason Endpoint::Impl::OpenRecv(const RecvKey& key, const Header& h, uint64_t now) {
  if (receiver == nullptr) return DropReason::kUnexpected;
  // Bounded before anything is allocated from the header (recv_budget.h).
  RecvFlow f;
  if (DropReason why = AdmitFlow(
          budget, key.peer, recv.size(), config.recv_flows_max, h,
          [&] { return receiver->AcceptFlow(key.peer, h); }, &f.charged);
      why != DropReason::kNone) {
    return why;
  }
  f.total = h.total_packets;
  f.iteration = h.iteration;
  f.plan = h.plan;
  f.samples = h.samples;
  f.bitmap.assign(RecvBitmapWords(h.total_packets), 0);
  f.lossy = (h.flags & kFlagLossTolerant) != 0;
  f.start_us = now;
  f.packet_bytes = kHeaderBytes + h.payload_bytes;
  f.rtprop_us = h.rtprop_us;
  f.btlbw_bps = uint64_t(h.btlbw_kbps) * 1000;
  if (f.lossy) {
    const uint64_t flow_bytes = uint64_t(f.total) * f.packet_bytes;
    f.shared_bytes = flow_bytes;
    for (auto& [k, g] : recv) {
      if (!g.lossy) continue;
      f.shared_bytes += uint64_t(g.total - g.received) * g.packet_bytes;
      g.shared_bytes += flow_bytes;
    }
    f.lt_us = FlowLt(links[key.peer], f, ingress.link_rate_bps(now));
    next_threshold_us = 0;  // the shared deadline: computed this turn
  }
  recv.emplace(key, std::move(f));
  return DropReason::kNone;
}

void Endpoint::Impl::CloseFlow(const RecvKey& key, CloseReason reason) {
  auto it = recv.find(key);
  if (it == recv.end()) return;
  RecvFlow& f = it->second;
  FlowResult r;
  r.flow_id = key.flow_id;
  r.iteration = f.iteration;
  r.plan = f.plan;
  r.samples = f.samples;
  r.total_packets = f.total;
  r.received = f.received;
  r.bytes = f.bytes;
  r.reason = reason;
  r.first_us = f.first_at_us;
  r.mid_us = f.mid_us;
  r.last_us = f.last_at_us;
  r.closed_us = Now();
  r.arrivals = std::move(f.arrivals);
  const StopInfo how{reason, f.received};
  Header about;
  about.flow_id = key.flow_id;
  about.seq = 0;
  about.total_packets = f.total;
  about.iteration = f.iteration;
  QueueStop(key.peer, about, how);
  if (f.lossy) {
    RecvLink& link = links[key.peer];
    link.estimate.peer = key.peer;
    link.estimate.lt_us = f.lt_us;  // the LT this flow had by its end
    link.threshold.OnFlowClosed(early_close, r.complete(), f.last_us - f.start_us);
    link.estimate.last_fraction = double(f.received) / double(f.total);
    ++link.estimate.lossy_flows;
    link.estimate.packets_missing += f.total - f.received;
    ++stats.lossy_closes[size_t(reason)];
    stats.packets_missing += f.total - f.received;
  }
  CloseRecv(key, how);
  ++stats.flows_received;
  receiver->OnFlowDone(key.peer, r);
}

uint64_t Endpoint::Impl::CheckEarlyClose(uint64_t now) {
  // Pass 1: each open loss-tolerant flow's LT; the deadline is shared by
  // every receiving link: max(LT) + C.
  uint64_t max_lt = 0;
  bool any = false;
  const uint64_t ingress_bps = ingress.link_rate_bps(now);
  for (auto& [key, f] : recv) {
    if (!f.lossy) continue;
    any = true;
    RecvLink& link = links[key.peer];
    f.lt_us = FlowLt(link, f, ingress_bps);
    link.estimate.peer = key.peer;
    link.estimate.lt_us = f.lt_us;
    max_lt = std::max(max_lt, f.lt_us);
  }
  if (!any) return UINT64_MAX;
  const uint64_t deadline = DeadlineUs(early_close, max_lt);
  // Pass 2: close what is due; the next time a threshold passes.
  std::vector<std::pair<RecvKey, CloseReason>> due;
  uint64_t next = UINT64_MAX;
  for (auto& [key, f] : recv) {
    if (!f.lossy) continue;
    f.deadline_us = deadline;
    const uint64_t elapsed = now - f.start_us;
    switch (DecideEarlyClose(elapsed, f.lt_us, deadline, f.received, f.total, f.critical_in(),
                             f.first_pass_done, early_close.min_fraction)) {
      case EarlyCloseDecision::kCloseFraction:
        due.push_back({key, CloseReason::kEarlyFraction});
        continue;
      case EarlyCloseDecision::kCloseDeadline:
        due.push_back({key, CloseReason::kDeadline});
        continue;
      case EarlyCloseDecision::kWait:
        break;
    }
    // After LT, arrivals close the flow (HandleData); the timer needs only LT
    // (if not passed yet) and the deadline.
    if (elapsed < f.lt_us && f.lt_us != UINT64_MAX) next = std::min(next, f.start_us + f.lt_us);
    if (deadline != UINT64_MAX) next = std::min(next, f.start_us + deadline);
  }
  // In a fixed order: the receiver hears the closes, and the STOPs go
  // out, as they would in a replay.
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, reason] : due) CloseFlow(key, reason);
  // Estimates in the headers move LT: look again soon while flows are open.
  return std::min(next, now + 1000);
}

uint64_t Endpoint::Impl::FlowLt(const RecvLink& link, const RecvFlow& f,
                                uint64_t ingress_bps) const {
  const uint64_t lt = link.threshold.LtUs(early_close, uint64_t(f.total) * f.packet_bytes,
                                          f.rtprop_us, f.btlbw_bps);
  if (lt == UINT64_MAX) return lt;
  return std::max(lt, SharedLtUs(early_close, f.rtprop_us, f.shared_bytes, ingress_bps));
}

void Endpoint::Impl::DropRecv(absl::flat_hash_map<RecvKey, RecvFlow>::iterator it) {
  budget.Release(it->first.peer, it->second.charged);
  recv.erase(it);
}

void Endpoint::Impl::CloseRecv(const RecvKey& key, const StopInfo& how) {
  if (auto it = recv.find(key); it != recv.end()) DropRecv(it);
  if (closed.insert({key, how}).second) closed_order.push_back(key);
  while (closed_order.size() > config.closed_flows_remembered) {
    closed.erase(closed_order.front());
    closed_order.pop_front();
  }
}

}  // namespace transport
}  // namespace hetps
