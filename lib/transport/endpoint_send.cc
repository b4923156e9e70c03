// The UDP endpoint's send side: flows taken from Send, paced and
// windowed per peer (congestion.h), ACKs and STOPs received, losses
// detected and resent, datagrams flushed to the socket.
#include <poll.h>

#include <algorithm>

#include "lib/transport/endpoint_internal.h"

namespace hetps {
namespace transport {
namespace {

// A queue grows the round trip a few times over, not without bound; and
// a receiver that refuses a flow for now (a push of a plan its psd has
// not reached) holds it by the sender's timer, which must keep trying.
constexpr uint32_t kRtoBackoffMax = 3;  // 8 x

}  // namespace

PeerState& Endpoint::Impl::PeerFor(const Peer& p) {
  auto& slot = peers[p];
  if (slot == nullptr) {
    CongestionConfig cc = config.congestion;
    cc.packet_bytes = config.packet_bytes;
    slot = std::make_unique<PeerState>(p, cc);
    peer_order.push_back(slot.get());
  }
  return *slot;
}

uint32_t Endpoint::Impl::RtoUs(const PeerState& ps) const {
  // srtt + 4 rttvar, but at least 1.5 srtt: on a steady path rttvar decays
  // towards 0, and a queue that then builds up would fire the timer for
  // packets that are only late (each a spurious resend).
  double rto = ps.srtt_us > 0 ? ps.srtt_us + std::max(4 * ps.rttvar_us, ps.srtt_us / 2)
                              : double(config.rto_initial_us);
  // Doubled per timer that ran out since the last RTT sample (RFC 6298
  // 5.5-5.7): DetectLosses.
  rto = std::clamp<double>(rto, config.rto_min_us, config.rto_max_us) * (1u << ps.rto_backoff);
  return static_cast<uint32_t>(std::min<double>(rto, config.rto_max_us));
}

void Endpoint::Impl::TakeSubmissions(uint64_t now) {
  bool new_key = false;
  std::vector<std::unique_ptr<SendFlow>> fresh;
  std::vector<uint32_t> cancel;
  {
    absl::MutexLock lock(&mu);
    fresh.swap(submitted);
    cancel.swap(cancelled);
    early_close = early_close_shared;
    if (key_changed) {
      // A fresh sender value per key: our nonces never repeat under it,
      // even across restarts (packet numbers start again at 0).
      auth.SetKey(key_shared);
      key_changed = false;
      new_key = true;
    }
  }
  // A new key is a new job: its traffic starts from fresh path estimates
  // and link thresholds, not from what the last job's pattern left (caps,
  // congestion cuts, restart backoffs). Peers still finishing a flow keep
  // theirs until they go idle.
  if (new_key) ForgetIdlePeers(now, /*idle_us=*/0);
  for (auto& f : fresh) {
    PeerState& ps = PeerFor(f->peer);
    if (ps.flows.empty()) {
      if (ps.next_send_us < now) ps.next_send_us = now;
      // The peer's estimates were measured before an idle gap, under
      // other shares: back to startup (congestion.h, Room).
      if (ps.idle_since_us != 0 && now >= ps.idle_since_us + kIdleRestartUs) {
        ps.cc.OnIdleRestart();
      }
      // A gap shorter than the share's rate window (a psd's next segment
      // to a worker that took the last one quickly) leaves the peer's
      // rate in that window: it is measured, not new.
      if (ps.idle_since_us == 0 || now >= ps.idle_since_us + kShareWindowUs) {
        ps.active_since_us = now;
      }
    }
    f->timing.taken_us = now;
    f->timing.pacing_holds = ps.pacing_holds;
    f->timing.window_holds = ps.window_holds;
    ps.flows.push_back(f->flow_id);
    for (const PacketSpan& span : f->packets) {
      ps.unacked_bytes += kHeaderBytes + span.floats * sizeof(float);
    }
    ++stats.flows_sent;
    flows[f->flow_id] = std::move(f);
  }
  for (uint32_t id : cancel) FinishFlow(id, absl::CancelledError("data plane: flow cancelled"));
}

void Endpoint::Impl::FinishFlow(uint32_t flow_id, absl::Status s) {
  auto it = flows.find(flow_id);
  if (it == flows.end()) return;
  SendFlow& f = *it->second;
  FlowTiming& t = f.timing;
  t.done_us = Now();
  if (f.rtt_samples > 0) t.rtt_mean_us = static_cast<uint32_t>(f.rtt_sum_us / f.rtt_samples);
  auto pit = peers.find(f.peer);
  if (pit != peers.end()) {
    PeerState& ps = *pit->second;
    t.pacing_holds = ps.pacing_holds - t.pacing_holds;
    t.window_holds = ps.window_holds - t.window_holds;
    t.pacing_rate_bps = ps.cc.pacing_rate_bps();
    t.cwnd_bytes = ps.cc.cwnd_bytes();
    t.rate_cap_bps = ps.cc.rate_cap_bps();
    t.btlbw_bps = ps.cc.btlbw_bps();
    t.rtprop_us = ps.cc.rtprop_us();
    t.in_startup = ps.cc.in_startup();
    for (uint32_t i = 0; i < f.state.size(); ++i) {
      const uint64_t bytes = kHeaderBytes + f.packets[i].floats * sizeof(float);
      if (f.state[i].in_flight) {
        ps.inflight_bytes -= bytes;
        f.state[i].in_flight = false;
      }
      // Closed early, stopped or cancelled: what was never acknowledged.
      if (!f.state[i].acked) ps.unacked_bytes -= std::min(ps.unacked_bytes, bytes);
    }
    ps.flows.erase(std::remove(ps.flows.begin(), ps.flows.end(), flow_id), ps.flows.end());
    if (ps.flows.empty()) ps.idle_since_us = t.done_us;
  }
  {
    absl::MutexLock lock(&f.handle->mu_);
    f.handle->timing_ = t;
  }
  f.handle->Finish(std::move(s));
  flows.erase(it);
  absl::MutexLock lock(&mu);
  --active_flows;
}

void Endpoint::Impl::SendData(uint64_t now) {
  const uint64_t burst_us_max = 200;  // lets one wake-up fill a batch
  SetRateCaps(now);
  // A different peer first each turn: a full batch (batch_max * 4) does
  // not always leave the same peers for the next turn.
  const size_t n = peer_order.size();
  if (n > 0) send_start = (send_start + 1) % n;
  for (size_t k = 0; k < n; ++k) {
    PeerState& ps = *peer_order[(send_start + k) % n];
    if (ps.flows.empty()) continue;
    DetectLosses(ps, now);
    const uint64_t rate = std::max<uint64_t>(ps.cc.pacing_rate_bps(), 1);
    const uint64_t cwnd = ps.cc.cwnd_bytes();
    if (ps.next_send_us + burst_us_max < now) ps.next_send_us = now - burst_us_max;
    size_t idle_flows = 0;
    while (!ps.flows.empty() && idle_flows < ps.flows.size() && ps.next_send_us <= now &&
           pending.size() < config.batch_max * 4) {
      const uint32_t fid = ps.flows.front();
      ps.flows.pop_front();
      ps.flows.push_back(fid);
      SendFlow& f = *flows[fid];
      uint32_t seq = UINT32_MAX;
      bool retransmission = false;
      std::deque<uint32_t>* from_queue = nullptr;
      for (std::deque<uint32_t>* q : {&f.retx, &f.rq}) {
        while (!q->empty() && f.state[q->front()].acked) {
          f.state[q->front()].queued_retx = false;
          q->pop_front();
        }
      }
      if (!f.retx.empty()) {
        from_queue = &f.retx;
      } else if (f.next_new < f.packets.size()) {
        seq = f.next_new++;
      } else if (!f.rq.empty()) {
        from_queue = &f.rq;
      }
      if (from_queue != nullptr) {
        seq = from_queue->front();
        from_queue->pop_front();
        f.state[seq].queued_retx = false;
        retransmission = true;
      } else if (seq == UINT32_MAX) {
        ++idle_flows;  // everything sent, waiting for ACKs
        continue;
      }
      idle_flows = 0;
      const PacketSpan& span = f.packets[seq];
      const uint32_t bytes = kHeaderBytes + span.floats * sizeof(float);
      if (ps.inflight_bytes + bytes > cwnd && ps.inflight_bytes > 0) {
        // Window full: put the packet back and wait for ACKs.
        if (retransmission) {
          from_queue->push_front(seq);
          f.state[seq].queued_retx = true;
        } else {
          --f.next_new;
        }
        ++ps.window_holds;
        break;
      }
      PacketState& st = f.state[seq];
      if (f.timing.first_sent_us == 0) f.timing.first_sent_us = now;
      f.timing.last_sent_us = now;
      st.tx_seq = ++ps.tx_counter;
      if (st.tx_count > 0) {
        st.prev_tx = st.tx;
        st.prev_sent_us = st.sample.sent_us;
      }
      st.sample = ps.cc.OnSend(now, retransmission || st.tx_count > 0);
      ++st.tx_count;
      st.in_flight = true;
      ps.inflight_bytes += bytes;
      ps.inflight.push_back({fid, seq, st.tx_seq, now});
      if (retransmission) {
        ++stats.retransmissions;
        if (from_queue == &f.rq) ++stats.deferred_retransmissions;
        f.handle->retransmissions_.fetch_add(1);
      }
      ++stats.data_packets_sent;

      Pending p;
      p.to = f.peer;
      Header h;
      h.type = PacketType::kData;
      h.flags = span.critical ? kFlagCritical : 0;
      if (seq + 1 == f.packets.size()) h.flags |= kFlagLast;
      if (ps.cc.path_clean()) h.flags |= kFlagPathClean;
      if (f.lossy) {
        h.flags |= kFlagLossTolerant;
        if (seq + 1 == f.critical_count) h.flags |= kFlagCriticalEnd;
        if (retransmission && seq >= f.critical_count) h.flags |= kFlagResent;
      }
      h.payload_bytes = static_cast<uint16_t>(span.floats * sizeof(float));
      h.key_id = auth.key_id();
      h.packet_number = auth.NextPacketNumber();
      st.tx = TxOf(h.packet_number);
      h.sender = auth.sender();
      h.flow_id = fid;
      h.seq = seq;
      h.total_packets = static_cast<uint32_t>(f.packets.size());
      h.chunk_id = span.chunk_id;
      h.chunk_offset = span.chunk_offset;
      h.iteration = f.iteration;
      h.plan = f.plan;
      h.samples = f.samples;
      h.rtprop_us = ps.cc.rtprop_us();
      h.btlbw_kbps =
          static_cast<uint32_t>(std::min<uint64_t>(ps.cc.btlbw_bps() / 1000, UINT32_MAX));
      EncodeHeader(h, p.head.data());
      p.body = reinterpret_cast<const uint8_t*>(span.data);
      p.body_len = h.payload_bytes;
      pending.push_back(p);
      // 64-bit: bytes * 8e6 overflows 32 bits from 537 bytes up (it did,
      // and paced 1400-byte packets 4.3x faster than the rate).
      ps.next_send_us += uint64_t(bytes) * 8'000'000 / rate;
    }
    if (ps.next_send_us > now && idle_flows < ps.flows.size()) ++ps.pacing_holds;
  }
}

uint64_t Endpoint::Impl::NextSendTime(uint64_t now) {
  uint64_t next = now + 10'000;  // idle poll: GC and stats
  for (PeerState* psp : peer_order) {
    PeerState& ps = *psp;
    if (ps.flows.empty()) continue;
    bool has_work = false;
    for (uint32_t fid : ps.flows) {
      const SendFlow& f = *flows[fid];
      if (!f.retx.empty() || !f.rq.empty() || f.next_new < f.packets.size()) {
        has_work = true;
        break;
      }
    }
    // Room for a full packet (SendData's test): a window short of one
    // waits for ACKs, not for the pacing slot (else the loop spins).
    const bool room =
        ps.inflight_bytes == 0 || ps.inflight_bytes + config.packet_bytes <= ps.cc.cwnd_bytes();
    if (has_work && room) next = std::min(next, ps.next_send_us);
    if (!ps.inflight.empty()) next = std::min(next, ps.inflight.front().sent_us + RtoUs(ps));
  }
  next = std::min(next, next_ack_us);
  return std::min(next, next_threshold_us);
}

void Endpoint::Impl::Flush(uint64_t now) {
  std::vector<OutDatagram>& out = flush_out;
  out.clear();
  for (Pending& p : pending) {
    // Through a private channel a tag proves nothing (datagram_socket.h).
    const bool sealed = !socket->PrivateTo(p.to);
    if (sealed) auth.Seal(self, p.head.data(), p.body, p.body_len);
    out.push_back({p.to, p.head.data(), kHeaderBytes, p.body, p.body_len, sealed});
  }
  size_t done = 0;
  int spins = 0;
  while (done < out.size()) {
    const int n = socket->SendBatch(out.data() + done, out.size() - done);
    if (n < 0) break;  // socket error: treat the rest as lost; recovery resends
    if (n == 0 && !out[done].sealed) {
      // Its channel filled up or went away: the rest of the batch goes
      // tagged, by the network where no ring has room (as one run).
      for (size_t i = done; i < out.size(); ++i) {
        if (out[i].sealed) continue;
        auth.Seal(self, pending[i].head.data(), pending[i].body, pending[i].body_len);
        out[i].sealed = true;
        ++stats.datagrams_tagged_late;
      }
      continue;
    }
    if (n == 0) {
      // Socket buffer full: wait briefly for room rather than drop.
      ++stats.send_buffer_waits;
      pollfd pfd{socket->fd(), POLLOUT, 0};
      poll(&pfd, 1, 1);
      if (++spins > 100) break;
      continue;
    }
    for (int i = 0; i < n; ++i) {
      ++stats.datagrams_sent;
      if (!out[done + i].sealed) ++stats.datagrams_sent_untagged;
      stats.bytes_sent += out[done + i].head_len + out[done + i].body_len;
    }
    done += n;
  }
  pending.clear();
  ack_payloads.clear();
}

void Endpoint::Impl::HandleAck(const Peer& from, const Packet& p, uint64_t now) {
  ++stats.acks_received;
  const Header& h = p.header;
  auto it = flows.find(h.flow_id);
  if (it == flows.end() || it->second->peer != from) return;  // finished or not ours
  SendFlow& f = *it->second;
  PeerState& ps = PeerFor(from);
  ps.receiver_share_bps = uint64_t(h.btlbw_kbps) * 1000;
  bool finished = AckOne(f, ps, h.seq, now, true, (h.flags & kFlagAckTx) ? &h.ack_tx : nullptr);
  const size_t extra = h.payload_bytes / sizeof(uint32_t);
  for (size_t i = 0; i < extra && !finished; ++i) {
    finished = AckOne(f, ps, AckSeq(p, i), now, true);
  }
  // The prefix covers packets whose own ACK was lost: delivered, but
  // their RTT is unknown (the ACK that names them came later).
  const uint32_t prefix = std::min<uint32_t>(AckPrefix(h), uint32_t(f.state.size()));
  for (; f.prefix_acked < prefix && !finished; ++f.prefix_acked) {
    finished = AckOne(f, ps, f.prefix_acked, now, false);
  }
  if (finished) FinishFlow(h.flow_id, absl::OkStatus());
  DetectLosses(ps, now);
}

// Returns true when this ACK completed the flow.
bool Endpoint::Impl::AckOne(SendFlow& f, PeerState& ps, uint32_t seq, uint64_t now, bool rtt_sample,
                            const uint32_t* named_tx) {
  if (seq >= f.state.size()) {
    ++stats.drops[size_t(DropReason::kBadSequence)];
    return false;
  }
  PacketState& st = f.state[seq];
  if (st.acked) return false;
  const uint32_t bytes = kHeaderBytes + f.packets[seq].floats * sizeof(float);
  st.acked = true;
  ps.unacked_bytes -= std::min<uint64_t>(ps.unacked_bytes, bytes);
  if (st.in_flight) {
    ps.inflight_bytes -= bytes;
    st.in_flight = false;
  }
  // Which copy arrived, where the ACK names it: the latest, or the one
  // before it (a resend's first copy that came late).
  const bool latest = named_tx != nullptr && st.tx_count > 0 && *named_tx == st.tx;
  const bool earlier = named_tx != nullptr && !latest && st.tx_count > 1 && *named_tx == st.prev_tx;
  SendSample sample = st.sample;
  // As a resent packet: no RTT. Nor from a packet never sent, which only
  // a broken or hostile receiver acknowledges: its send time is 0.
  if (!rtt_sample || st.tx_count == 0) sample.retransmitted = true;
  if (latest) sample.retransmitted = false;  // a resend's own round trip
  // Declared lost, yet delivered: the copy declared lost arrived (named,
  // or not resent since), or, unnamed, acknowledged sooner than half an
  // RTprop after the resend (so the first copy arrived).
  if (st.lost_tx_count > 0 && (earlier ? st.lost_tx_count + 1 == st.tx_count
                                       : st.tx_count == st.lost_tx_count ||
                                             (!latest && now >= sample.sent_us &&
                                              2 * (now - sample.sent_us) < ps.cc.rtprop_us()))) {
    ++stats.losses_spurious;
    ps.cc.OnSpuriousLoss(bytes);
    st.lost_tx_count = 0;
  }
  ps.cc.OnAck(now, bytes, sample);
  if (!ps.cc.unpaced()) egress.OnBytes(now, bytes);  // the egress link's bytes only
  ps.acked.OnBytes(now, bytes);
  if (!sample.retransmitted && now >= sample.sent_us) {
    RttSample(f, ps, now - sample.sent_us);
  } else if (earlier && now >= st.prev_sent_us) {
    // The round trip that ran the timer out: the timer learns it (the
    // controller does not: its delivery-rate sample went with the resend).
    RttSample(f, ps, now - st.prev_sent_us);
  }
  // Only the ACK of a known transmission shows that the packets sent
  // before it had their chance: an unnamed one of a resent packet may be
  // for its first copy, sent before them (the timer ran out on a round
  // trip that had grown), and would declare every packet sent between the
  // two copies lost.
  if (st.tx_count == 1 || latest) f.highest_acked_tx = std::max(f.highest_acked_tx, st.tx_seq);
  return ++f.acked == f.state.size();
}

// A round trip measured: srtt and rttvar as RFC 6298, the flow's timing,
// and the timer's backoff ends.
void Endpoint::Impl::RttSample(SendFlow& f, PeerState& ps, uint64_t rtt_us64) {
  const uint32_t rtt_us = static_cast<uint32_t>(std::min<uint64_t>(rtt_us64, UINT32_MAX));
  const double rtt = rtt_us;
  if (f.rtt_samples == 0 || rtt_us < f.timing.rtt_min_us) f.timing.rtt_min_us = rtt_us;
  f.timing.rtt_max_us = std::max(f.timing.rtt_max_us, rtt_us);
  f.rtt_sum_us += rtt_us;
  ++f.rtt_samples;
  ps.rto_backoff = 0;
  if (ps.srtt_us == 0) {
    ps.srtt_us = rtt;
    ps.rttvar_us = rtt / 2;
  } else {
    ps.rttvar_us = 0.75 * ps.rttvar_us + 0.25 * std::abs(ps.srtt_us - rtt);
    ps.srtt_us = 0.875 * ps.srtt_us + 0.125 * rtt;
  }
}

void Endpoint::Impl::HandleStop(const Peer& from, const Packet& p) {
  auto it = flows.find(p.header.flow_id);
  if (it == flows.end() || it->second->peer != from) return;
  const StopInfo info = DecodeStop(p);
  if (p.header.payload_bytes > 0) {
    absl::MutexLock lock(&it->second->handle->mu_);
    it->second->handle->close_reason_ = info.reason;
    it->second->handle->receiver_packets_ = info.received;
  }
  FinishFlow(p.header.flow_id, absl::OkStatus());
}

void Endpoint::Impl::MarkLost(SendFlow& f, uint32_t seq, PeerState& ps) {
  PacketState& st = f.state[seq];
  if (st.in_flight) {
    const uint32_t bytes = kHeaderBytes + f.packets[seq].floats * sizeof(float);
    st.lost_tx_count = st.tx_count;
    ps.cc.OnLoss(bytes, ps.inflight_bytes);
    ps.inflight_bytes -= bytes;
    st.in_flight = false;
  }
  if (!st.queued_retx) {
    st.queued_retx = true;
    if (f.lossy && seq >= f.critical_count) {
      f.rq.push_back(seq);  // normal packet: after everything new (RQ)
    } else {
      f.retx.push_back(seq);
    }
  }
}

void Endpoint::Impl::DetectLosses(PeerState& ps, uint64_t now) {
  uint32_t rto = RtoUs(ps);
  while (!ps.inflight.empty()) {
    const InflightEntry& e = ps.inflight.front();
    auto it = flows.find(e.flow_id);
    if (it == flows.end()) {
      ps.inflight.pop_front();
      continue;
    }
    SendFlow& f = *it->second;
    PacketState& st = f.state[e.seq];
    if (st.acked || st.tx_seq != e.tx_seq) {  // delivered, or sent again since
      ps.inflight.pop_front();
      continue;
    }
    // Lost: three later transmissions of its flow were acknowledged, or
    // the timer ran out. Not of the peer's other flows: an ACK names one
    // flow's packets, and a lost one is repeated by that flow's next ACK
    // (ack_echo); between the two come the other flows' ACKs for later
    // packets, and flows interleaved to one peer (a psd's segments) read
    // each lost ACK as lost data, resent into the receiver's link.
    if (e.tx_seq + 3 <= f.highest_acked_tx || now >= e.sent_us + rto) {
      if (e.tx_seq + 3 > f.highest_acked_tx) {
        ++stats.losses_timeout;
        // The timer backs off, once per its own run: where the round trip
        // grew past it (a queue that built up), every packet in flight
        // runs it out and is resent. The first copies' ACKs, where they
        // name their transmission (kFlagAckTx), raise srtt as they come;
        // unnamed, a resent packet's ACK gives no RTT sample (Karn), only
        // a first copy acknowledged in time could raise the timer, and
        // until one is, each window goes out twice (the duplicates
        // keeping the queue standing). Packets sent under the longer
        // timer are acknowledged in time; their samples end the backoff.
        if (now >= ps.rto_backoff_until_us && ps.rto_backoff < kRtoBackoffMax) {
          ++ps.rto_backoff;
          rto = RtoUs(ps);
          ps.rto_backoff_until_us = now + rto;
        }
      }
      MarkLost(f, e.seq, ps);
      ps.inflight.pop_front();
      continue;
    }
    break;
  }
}

}  // namespace transport
}  // namespace hetps
