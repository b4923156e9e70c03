// The UDP endpoint's control datagrams: ACKs batched and delayed per
// flow (carrying the receiver's fair share of its ingress), STOPs, and
// the fair-share rate caps on the sending side.
#include <algorithm>
#include <utility>

#include "lib/transport/endpoint_internal.h"

namespace hetps {
namespace transport {
namespace {

constexpr size_t kAckEchoMax = 64;  // seqs an ACK repeats (ack_echo)

}  // namespace

void Endpoint::Impl::QueueControl(const Peer& to, PacketType type, const Header& about,
                                  const std::vector<uint8_t>* body) {
  Pending p;
  p.to = to;
  if (body != nullptr) {
    p.body = body->data();
    p.body_len = body->size();
  }
  Header h;
  h.type = type;
  h.key_id = auth.key_id();
  h.packet_number = auth.NextPacketNumber();
  h.sender = auth.sender();
  h.flow_id = about.flow_id;
  h.seq = about.seq;
  h.total_packets = about.total_packets;
  h.chunk_id = about.chunk_id;
  h.chunk_offset = about.chunk_offset;
  h.iteration = about.iteration;
  if (type == PacketType::kAck) {
    // What EmitAcks set: the prefix, the transmission and the receiver's
    // fair share.
    h.flags = about.flags & (kFlagAckPrefix | kFlagAckTx);
    h.ack_tx = about.ack_tx;
    h.btlbw_kbps = about.btlbw_kbps;
  }
  h.payload_bytes = static_cast<uint16_t>(p.body_len);
  EncodeHeader(h, p.head.data());
  pending.push_back(p);
  if (type == PacketType::kAck) ++stats.acks_sent;
}

void Endpoint::Impl::QueueAck(const Peer& to, const Header& about, uint64_t now, bool urgent) {
  AckBatch& b = acks[RecvKey{to, about.flow_id}];
  if (b.seqs.empty()) {
    b.about = about;
    const uint64_t delay = std::min<uint64_t>(config.ack_delay_max_us, about.rtprop_us / 8);
    b.due_us = now + delay;
  }
  b.seqs.push_back(about.seq);
  if (urgent || b.seqs.size() >= config.ack_every) b.due_us = now;
  next_ack_us = std::min(next_ack_us, b.due_us);
}

void Endpoint::Impl::QueueStop(const Peer& to, const Header& about, const StopInfo& how) {
  ack_payloads.emplace_back(kStopPayloadBytes);
  EncodeStop(how, ack_payloads.back().data());
  QueueControl(to, PacketType::kStop, about, &ack_payloads.back());
}

void Endpoint::Impl::EmitAcks(uint64_t now) {
  if (acks.empty() || next_ack_us > now) return;
  const uint64_t share_kbps = std::min<uint64_t>(IngressShareBps(now) / 1000, UINT32_MAX);
  next_ack_us = UINT64_MAX;
  // The due batches in a fixed order, not the table's: the ACKs reach the
  // wire as they would in a replay.
  acks_due.clear();
  for (const auto& [key, batch] : acks) {
    if (batch.due_us > now) {
      next_ack_us = std::min(next_ack_us, batch.due_us);
    } else {
      acks_due.push_back(key);
    }
  }
  std::sort(acks_due.begin(), acks_due.end());
  for (const RecvKey& key : acks_due) {
    auto it = acks.find(key);
    AckBatch& batch = it->second;
    auto open = recv.find(key);
    // The flow's prefix as it is now (a flow that completed: all of it).
    uint32_t prefix = 0;
    if (config.ack_prefix) {
      if (open != recv.end()) {
        prefix = open->second.prefix;
      } else if (auto c = closed.find(key);
                 c != closed.end() && c->second.reason == CloseReason::kComplete) {
        prefix = batch.about.total_packets;
      }
    }
    if (config.ack_echo && open != recv.end()) {
      // The previous ACK's seqs again (those the prefix does not cover): a
      // lost ACK datagram is answered by the next one.
      std::vector<uint32_t>& echo = open->second.ack_echo;
      const size_t fresh = batch.seqs.size();
      for (uint32_t seq : echo) {
        if (seq >= prefix) batch.seqs.push_back(seq);
      }
      echo.assign(batch.seqs.begin() + (fresh > kAckEchoMax ? fresh - kAckEchoMax : 0),
                  batch.seqs.begin() + fresh);
    }
    for (size_t i = 0; i < batch.seqs.size(); i += 1 + kAckSeqsMax) {
      const size_t extra = std::min(kAckSeqsMax, batch.seqs.size() - i - 1);
      Header h = batch.about;
      h.seq = batch.seqs[i];
      h.btlbw_kbps = static_cast<uint32_t>(share_kbps);
      h.flags = 0;  // QueueControl keeps only an ACK's own flags
      if (prefix > 0) {
        h.flags |= kFlagAckPrefix;
        h.chunk_offset = prefix;
      }
      if (i == 0 && config.ack_tx) {
        // The batch's first seq arrived in the datagram it was opened by.
        h.flags |= kFlagAckTx;
        h.ack_tx = TxOf(batch.about.packet_number);
      }
      const std::vector<uint8_t>* body = nullptr;
      if (extra > 0) {
        ack_payloads.emplace_back(extra * sizeof(uint32_t));
        EncodeAckSeqs(batch.seqs.data() + i + 1, extra, ack_payloads.back().data());
        body = &ack_payloads.back();
      }
      QueueControl(key.peer, PacketType::kAck, h, body);
    }
    acks.erase(it);
  }
}

// A peer's rate for FairShareBps. One that began sending within the rate
// window, after a longer gap, has not shown a rate yet: it counts as able
// to take a full share, not as a slow one (else the first share it hears
// is the link). One whose flows paused for less (a psd's segments to a
// worker that takes each at once) is measured: counted as new at every
// segment, it would hold the others to an even split of what it leaves.
namespace {
uint64_t ShareRate(IngressRate& recent, uint64_t active_since_us, uint64_t now) {
  return now - active_since_us < kShareWindowUs ? UINT64_MAX : recent.rate_bps(now);
}
}  // namespace

// The max-min fair share of this endpoint's ingress among the peers
// sending to it now (FairShareBps over their recent rates; for one alone,
// the capacity where others shared it lately, else 0): ACKs carry it in
// btlbw_kbps, and the senders cap their pacing
// at it (congestion.h, SetRateCap). Senders whose RTprop to us is that of
// an unpaced path (loopback, one LAN) neither pace nor cross the link the
// share divides: they do not count. The capacity is the busy-span rate,
// raised to the largest BtlBw a counted sender reports
// (ShareCapacityBps): the shares would otherwise hold the senders to the
// rate of a link that has since got faster. That BtlBw is a member's word
// (the job key authenticates it): overstated, it only loosens the share.
// While some counted sender's packets say its path is clean, the capacity
// is lifted (congestion.h, "Share lift"); the same word, the same trust.
uint64_t Endpoint::Impl::IngressShareBps(uint64_t now) {
  share_peers.clear();
  uint64_t peer_max = 0;
  uint32_t rtprop_max = 0;
  for (const auto& [key, f] : recv) {
    if (f.rtprop_us > 0 && f.rtprop_us < config.congestion.unpaced_rtprop_us) continue;
    share_peers.insert(key.peer);
    peer_max = std::max(peer_max, f.btlbw_bps);
    rtprop_max = std::max(rtprop_max, f.rtprop_us);
  }
  if (share_peers.size() >= 2) ingress_shared_us = now;
  // A sender alone gets the link as its share where others shared it
  // lately (a worker's pulls from several psds, a psd's pushes): the
  // others finished, and the link's capacity is known. Uncapped, its
  // controller restarts from BtlBw at 2.89x (congestion.h, Room) and
  // overruns the queue, and the bursts read the link fast. Not a sender
  // that has been alone all along: C then is its own rate, held by
  // another bottleneck, and would hold it there.
  if (share_peers.empty() ||
      (share_peers.size() == 1 &&
       (ingress_shared_us == 0 || now - ingress_shared_us > kSharedLinkMemoryUs))) {
    ingress_lift.Reset();
    return 0;
  }
  share_rates.clear();
  bool room = false;
  for (const Peer& p : share_peers) {
    RecvLink& link = links[p];
    share_rates.push_back(ShareRate(link.recent, link.active_since_us, now));
    room = room || link.clean;
  }
  const uint64_t c =
      LiftedCapacity(&ingress_lift, ingress.link_rate_bps(now), peer_max, now, room, rtprop_max);
  return share_rates.size() == 1 ? c : FairShareBps(c, share_rates);
}

uint64_t Endpoint::Impl::LiftedCapacity(ShareLift* lift, uint64_t span_bps, uint64_t peer_max_bps,
                                        uint64_t now, bool room, uint32_t rtprop_us) {
  const uint64_t c = ShareCapacityBps(span_bps, peer_max_bps);
  if (!config.congestion.share_lift || c == 0) return c;
  const double f = lift->Update(now, room, rtprop_us);
  return static_cast<uint64_t>(std::min(f * double(c), 1e18));
}

// A peer's weight in the egress share: the bytes it has left, or what it
// took in the last share window, whichever is more. A psd streams its
// broadcast in segments: to a worker that takes each before the next
// comes, only a segment is ever left, and weighed by that alone it would
// squeeze the tail of a long transfer beside it. At least a packet: a
// peer whose last bytes are in flight is not held to a crawl for its
// next flow's first round trip.
double Endpoint::Impl::ShareWeight(const PeerState& ps, uint64_t rate_bps) const {
  double w = double(std::max<uint64_t>(ps.unacked_bytes, config.congestion.packet_bytes));
  if (rate_bps != UINT64_MAX) w = std::max(w, double(rate_bps) / 8e6 * double(kShareWindowUs));
  return w;
}

// Each active peer's controller is capped at the receiver's advertised
// share, and with congestion.egress_share at the smaller of that and the
// same max-min share over this endpoint's egress (bytes acknowledged to
// paced peers) among its active paced peers' recent rates. Unpaced peers
// (loopback, one LAN) are not behind the egress link the share divides.
// With congestion.weighted_share each peer's share is weighted by the
// bytes it has left (WeightedShareLevel): what this endpoint sends them
// together ends together, at the uplink's rate throughout.
//
// The egress capacity is ShareCapacityBps of the acknowledged bytes'
// busy spans and the active paced peers' BtlBw. The cap lift cannot
// raise a share held low by old spans where the receivers' downlinks
// hold other senders' queues; a flow's own delivery rate can, and so
// can the share lift: one peer whose path is clean shows that this
// endpoint's uplink, which every one of them crosses, holds no queue.
//
// A peer left alone where others shared the egress lately (the last flow
// of a worker's push) gets that capacity as its share, as a sender alone
// at a shared receiver does (IngressShareBps): uncapped, its controller
// went back to startup from a BtlBw it had measured beside the others
// and paced at up to 2.89x the uplink at the end of every push. The lift
// stands as it was while it is alone: its one path reading clean or not
// says nothing the shared spans did not.
void Endpoint::Impl::SetRateCaps(uint64_t now) {
  share_states.clear();
  double level = 0;  // bps per unit of weight; 0: no egress share
  if (config.congestion.egress_share) {
    share_rates.clear();
    share_weights.clear();
    uint64_t peer_max = 0;
    uint32_t rtprop_max = 0;
    bool room = false;
    for (PeerState* ps : peer_order) {
      if (ps->flows.empty() || ps->cc.unpaced()) continue;
      share_states.push_back(ps);
      const uint64_t rate = ShareRate(ps->acked, ps->active_since_us, now);
      share_rates.push_back(rate);
      share_weights.push_back(config.congestion.weighted_share ? ShareWeight(*ps, rate) : 1.0);
      peer_max = std::max(peer_max, ps->cc.btlbw_bps());
      rtprop_max = std::max(rtprop_max, ps->cc.rtprop_us());
      room = room || ps->cc.path_clean();
    }
    if (share_rates.size() >= 2) {
      egress_shared_us = now;
      level = WeightedShareLevel(
          LiftedCapacity(&egress_lift, egress.link_rate_bps(now), peer_max, now, room, rtprop_max),
          share_rates, share_weights, share_order);
    } else if (share_rates.size() == 1 && egress_shared_us != 0 &&
               now - egress_shared_us <= kSharedLinkMemoryUs) {
      const double c = double(ShareCapacityBps(egress.link_rate_bps(now), peer_max));
      level = c * egress_lift.lift() / share_weights[0];
    } else {
      egress_lift.Reset();
      share_states.clear();
    }
  }
  for (size_t i = 0; i < share_states.size() && level > 0; ++i) {
    share_states[i]->egress_share_bps =
        static_cast<uint64_t>(std::min(level * share_weights[i], 1e18));
  }
  // Data coming in at half the most this endpoint has taken in a bin or
  // more: our ACKs may queue behind it on our downlink. (Not the busy
  // spans' link rate: that takes several busy bins to measure.)
  const uint64_t in_max = ingress.rate_bps(now);
  const bool ack_path_loaded = in_max > 0 && 2 * ingress_now.rate_bps(now) >= in_max;
  for (PeerState* ps : peer_order) {
    if (ps->flows.empty()) continue;
    ps->cc.SetAckPathLoaded(ack_path_loaded);
    uint64_t cap = ps->receiver_share_bps;
    // Read once and cleared: only this call's shared peers set it.
    const uint64_t share = std::exchange(ps->egress_share_bps, 0);
    if (share > 0 && (cap == 0 || share < cap)) cap = share;
    ps->cc.SetRateCap(cap);
  }
}

}  // namespace transport
}  // namespace hetps
