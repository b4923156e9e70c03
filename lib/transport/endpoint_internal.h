// The UDP endpoint's internals (lib/transport/endpoint.h), shared by the
// files that implement it; nothing outside them includes this.
#ifndef HETPS_LIB_TRANSPORT_ENDPOINT_INTERNAL_H_
#define HETPS_LIB_TRANSPORT_ENDPOINT_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/splitmix.h"
#include "lib/transport/congestion.h"
#include "lib/transport/datagram_socket.h"
#include "lib/transport/early_close.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/packet_auth.h"
#include "lib/transport/recv_budget.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {

struct PacketState {
  SendSample sample;
  uint64_t tx_seq = 0;  // latest transmission's number (per peer)
  uint16_t tx_count = 0;
  uint16_t lost_tx_count = 0;  // tx_count when last declared lost; 0: never
  // The latest transmission and the one before it as ACKs name them
  // (wire.h TxOf), and when that one went out.
  uint32_t tx = 0;
  uint32_t prev_tx = 0;
  uint64_t prev_sent_us = 0;
  bool acked = false;
  bool in_flight = false;
  bool queued_retx = false;
};

struct SendFlow {
  uint32_t flow_id = 0;
  Peer peer;
  uint32_t iteration = 0;
  uint32_t plan = 0;
  uint32_t samples = 0;
  std::vector<PacketSpan> packets;
  std::vector<PacketState> state;
  std::shared_ptr<SendHandle> handle;
  uint32_t next_new = 0;
  uint32_t acked = 0;
  uint32_t prefix_acked = 0;  // seqs below it acknowledged (the receiver's ACK prefix)
  // The latest of its transmissions acknowledged (PeerState::tx_counter's
  // numbers): loss is judged by the flow's own ACKs (DetectLosses).
  uint64_t highest_acked_tx = 0;
  std::deque<uint32_t> retx;  // lost packets resent before new ones (LTP: critical only, CQ)
  // Loss-tolerant: packets [0, critical_count) are critical; lost normal
  // packets wait in rq until nothing new is left.
  bool lossy = false;
  uint32_t critical_count = 0;
  std::deque<uint32_t> rq;
  FlowTiming timing;        // the peer's hold counters when taken, until it finishes
  uint64_t rtt_sum_us = 0;  // FlowTiming's rtt_mean_us, over rtt_samples
  uint32_t rtt_samples = 0;
};

struct InflightEntry {
  uint32_t flow_id;
  uint32_t seq;
  uint64_t tx_seq;
  uint64_t sent_us;
};

struct PeerState {
  PeerState(const Peer& p, const CongestionConfig& c) : peer(p), cc(c) {}
  const Peer peer;
  CongestionControl cc;
  uint64_t inflight_bytes = 0;
  // Bytes of this peer's active flows not acknowledged yet: its weight in
  // the egress share (CongestionConfig::weighted_share).
  uint64_t unacked_bytes = 0;
  uint64_t next_send_us = 0;
  uint64_t tx_counter = 0;
  std::deque<InflightEntry> inflight;
  std::deque<uint32_t> flows;                  // active flow ids, served round-robin
  uint64_t receiver_share_bps = 0;             // the receiver's fair share (ACK btlbw_kbps)
  uint64_t egress_share_bps = 0;               // SetRateCaps' share of our egress (0: none)
  IngressRate acked{kShareBinUs, kShareBins};  // bytes acknowledged (egress share)
  uint64_t active_since_us = 0;                // first flow after kShareWindowUs idle
  uint64_t idle_since_us = 0;                  // flows became empty; 0: never active
  double srtt_us = 0;
  double rttvar_us = 0;
  // RTO doublings since the last RTT sample (Endpoint::Impl::RtoUs), and
  // until when the timer that made the last one runs.
  uint32_t rto_backoff = 0;
  uint64_t rto_backoff_until_us = 0;
  uint32_t pacing_holds = 0;  // FlowTiming's counters, since the peer was new
  uint32_t window_holds = 0;
};

struct RecvKey {
  Peer peer;
  uint32_t flow_id;
  bool operator==(const RecvKey& o) const { return peer == o.peer && flow_id == o.flow_id; }
  // A fixed order for what a hash table hands out in its own order.
  bool operator<(const RecvKey& o) const {
    return std::tie(peer.ip, peer.port, flow_id) < std::tie(o.peer.ip, o.peer.port, o.flow_id);
  }
  template <typename H>
  friend H AbslHashValue(H h, const RecvKey& k) {
    return H::combine(std::move(h), k.peer, k.flow_id);
  }
};

struct RecvFlow {
  uint64_t charged = 0;  // bytes charged to the receive budget
  uint32_t total = 0;
  uint32_t received = 0;
  uint32_t iteration = 0;
  uint32_t plan = 0;
  uint32_t samples = 0;
  uint64_t bytes = 0;  // payload delivered
  uint64_t last_us = 0;
  std::vector<uint64_t> bitmap;
  // Loss-tolerant flows (Early Close).
  bool lossy = false;
  uint64_t start_us = 0;  // first packet's arrival (read), for timers
  // FlowResult's times: arrivals as the socket says (InDatagram::age_us).
  uint64_t first_at_us = 0, mid_us = 0, last_at_us = 0;
  ArrivalProfile arrivals;
  uint32_t critical_end = UINT32_MAX;  // seq flagged kFlagCriticalEnd, once seen
  uint32_t prefix = 0;                 // seqs [0, prefix) all received (ACK prefix)
  std::vector<uint32_t> ack_echo;      // the last ACK's fresh seqs, repeated in the next
  bool first_pass_done = false;        // the sender sent every packet once
  uint32_t rtprop_us = 0;              // sender's latest estimates
  uint64_t btlbw_bps = 0;
  uint32_t packet_bytes = 0;    // first packet's datagram size
  uint64_t lt_us = UINT64_MAX;  // thresholds, relative to start_us
  uint64_t deadline_us = UINT64_MAX;
  // Loss-tolerant bytes the receiver's link carries while this flow is
  // open: its own, what other open flows still missed when it began, and
  // every flow begun since (the shared-link LT bound, early_close.h).
  uint64_t shared_bytes = 0;
  bool critical_in() const { return critical_end != UINT32_MAX && prefix > critical_end; }
  bool has(uint32_t seq) const { return (bitmap[seq / 64] >> (seq % 64)) & 1; }
};

struct RecvLink {
  uint64_t last_us = 0;  // its latest data packet (idle links are forgotten)
  // Data came with no gap of kShareWindowUs since (IngressShareBps).
  uint64_t active_since_us = 0;
  LinkThreshold threshold;
  LinkEstimate estimate;
  IngressRate recent{kShareBinUs, kShareBins};  // this peer's data rate (fair share)
  bool clean = false;  // its latest data packet said kFlagPathClean (share lift)
};

struct Pending {
  Peer to;
  std::array<uint8_t, kHeaderBytes> head;
  const uint8_t* body = nullptr;
  size_t body_len = 0;
};

// The endpoint's state. The thread that runs Turn owns everything below
// "Owned by the endpoint thread"; other threads reach the endpoint only
// through the part under `mu`. The members are grouped by the file that
// works on them: endpoint.cc (the API and the event loop), endpoint_send.cc
// (send flows, pacing, loss detection), endpoint_recv.cc (receive flows,
// Early Close) and endpoint_ack.cc (ACK batching, STOPs, fair shares).
struct Endpoint::Impl {
  Impl(const EndpointConfig& c, Receiver* r, const Clock* clk, uint64_t seed)
      : config(c),
        receiver(r),
        clock(clk),
        seed(seed),
        key_shared(c.key),
        early_close_shared(c.early_close),
        flow_counter(static_cast<uint32_t>(seed != 0 ? seed : std::random_device{}())),
        auth(c.authenticate,
             [this] { return this->seed != 0 ? Mix64(this->seed + ++sender_draws) : RandomU64(); }),
        early_close(c.early_close),
        budget(c.recv_peer_bytes_max, c.recv_bytes_max),
        ingress_lift(c.congestion.share_lift_step_rtprops),
        egress_lift(c.congestion.share_lift_step_rtprops) {}

  const EndpointConfig config;
  Receiver* const receiver;
  const Clock* const clock;
  const uint64_t seed;  // nonzero: sender nonces derive from it (simulations)
  std::unique_ptr<DatagramSocket> socket;
  Peer self;         // our address as peers know it: what our tags cover
  int wake_fd = -1;  // threaded endpoints: Send and Shutdown wake the thread

  // ---- Shared with other threads (Send, Cancel, SetKey, GetStats).
  mutable absl::Mutex mu;
  std::vector<std::unique_ptr<SendFlow>> submitted ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> cancelled ABSL_GUARDED_BY(mu);
  EndpointStats published ABSL_GUARDED_BY(mu);
  std::atomic<bool> stop{false};           // read every loop iteration: no lock
  DataKey key_shared ABSL_GUARDED_BY(mu);  // SetKey's, taken by the thread
  bool key_changed ABSL_GUARDED_BY(mu) = true;
  EarlyCloseConfig early_close_shared ABSL_GUARDED_BY(mu);
  size_t active_flows ABSL_GUARDED_BY(mu) = 0;
  std::atomic<uint32_t> flow_counter;

  // ---- Owned by the endpoint thread.
  uint64_t sender_draws = 0;  // seeded sender values drawn so far
  PacketAuth auth;
  EndpointStats stats;

  // Send side (endpoint_send.cc).
  absl::flat_hash_map<uint32_t, std::unique_ptr<SendFlow>> flows;
  absl::flat_hash_map<Peer, std::unique_ptr<PeerState>> peers;
  // The same peers in the order they were first seen: every loop over
  // peers whose order reaches the wire or a share goes by it, so a seeded
  // simulation replays exactly (a hash table's order differs between
  // processes).
  std::vector<PeerState*> peer_order;
  size_t send_start = 0;               // SendData serves peers from here round-robin
  std::vector<Pending> pending;        // control datagrams queued for Flush
  std::vector<OutDatagram> flush_out;  // Flush's scratch, kept to reuse its capacity
  struct {
    uint64_t congestion_rounds = 0, standing_queue_rounds = 0, undone_rounds = 0,
             startup_restarts = 0, cap_lift_rounds = 0;
  } retired;  // counters of peers forgotten (ForgetIdlePeers)

  // Receive side (endpoint_recv.cc).
  EarlyCloseConfig early_close;  // the thread's copy, refreshed from early_close_shared
  std::vector<InDatagram> rx;
  absl::flat_hash_map<RecvKey, RecvFlow> recv;
  RecvBudget budget;  // what open receive flows hold, per peer and in total
  absl::flat_hash_map<RecvKey, StopInfo> closed;  // how each remembered flow closed
  std::deque<RecvKey> closed_order;
  absl::flat_hash_map<Peer, RecvLink> links;
  IngressRate ingress;  // data bytes received, all flows (shared-link LT, ingress share)
  // The same over the last few share bins: whether the downlink, which the
  // ACKs of our own flows cross, is loaded now (congestion.h, "Standing
  // round trip").
  IngressRate ingress_now{kShareBinUs, kShareBins};
  uint64_t next_threshold_us = UINT64_MAX;

  // ACKs, STOPs and fair shares (endpoint_ack.cc).
  struct AckBatch {
    Header about;
    std::vector<uint32_t> seqs;
    uint64_t due_us = 0;  // delayed ACKs (EndpointConfig::ack_every)
  };
  absl::flat_hash_map<RecvKey, AckBatch> acks;     // ACKs not sent yet
  std::vector<RecvKey> acks_due;                   // EmitAcks' scratch
  uint64_t next_ack_us = UINT64_MAX;               // earliest due_us in acks
  std::vector<std::vector<uint8_t>> ack_payloads;  // bodies of queued ACKs, until Flush
  IngressRate egress;                     // data bytes acknowledged, all peers (egress share)
  absl::flat_hash_set<Peer> share_peers;  // IngressShareBps's scratch
  std::vector<uint64_t> share_rates;      // IngressShareBps's and SetRateCaps' scratch
  std::vector<double> share_weights;      // SetRateCaps' scratch
  std::vector<size_t> share_order;        // SetRateCaps' scratch
  std::vector<PeerState*> share_states;   // SetRateCaps' scratch
  ShareLift ingress_lift, egress_lift;    // congestion.h, "Share lift"
  uint64_t ingress_shared_us = 0;         // last time two counted senders shared our ingress
  uint64_t egress_shared_us = 0;          // last time two paced peers shared our egress

  // Event loop (endpoint.cc).
  uint64_t last_gc_us = 0;
  uint64_t last_publish_us = 0;

  uint64_t Now() const { return clock->MonotonicMicros(); }

  // ---- Event loop (endpoint.cc).
  void Run();
  // One turn of the loop; the next time a turn is due.
  uint64_t Turn();
  // After the loop: every unfinished flow finishes CANCELLED.
  void Finish();
  void Wake();
  void Publish();
  void GarbageCollect(uint64_t now);
  // Forgets the estimates of peers without a flow for idle_us (0: every
  // idle peer), and the Early Close state of links without an open flow
  // as long; their counters stay in the totals.
  void ForgetIdlePeers(uint64_t now, uint64_t idle_us);

  // ---- Send side (endpoint_send.cc).
  // New flows, cancellations, a new key and Early Close settings from the
  // other threads.
  void TakeSubmissions(uint64_t now);
  PeerState& PeerFor(const Peer& p);
  uint32_t RtoUs(const PeerState& ps) const;
  void SendData(uint64_t now);
  uint64_t NextSendTime(uint64_t now);
  // Sends what SendData and the ACK/STOP queue left in `pending` and the
  // socket's batch.
  void Flush(uint64_t now);
  void FinishFlow(uint32_t flow_id, absl::Status s);
  void HandleAck(const Peer& from, const Packet& p, uint64_t now);
  // rtt_sample: false for a packet covered only by an ACK's prefix.
  // named_tx: the transmission the ACK names (kFlagAckTx), or nullptr.
  bool AckOne(SendFlow& f, PeerState& ps, uint32_t seq, uint64_t now, bool rtt_sample,
              const uint32_t* named_tx = nullptr);
  void RttSample(SendFlow& f, PeerState& ps, uint64_t rtt_us);
  void HandleStop(const Peer& from, const Packet& p);
  void DetectLosses(PeerState& ps, uint64_t now);
  void MarkLost(SendFlow& f, uint32_t seq, PeerState& ps);

  // ---- Receive side (endpoint_recv.cc).
  void Receive(uint64_t now);
  // `arrived`: when the socket says it arrived (<= now).
  void HandleData(const Peer& from, const Packet& p, uint64_t now, uint64_t arrived);
  // Opens a receive flow for `h`'s first packet, or says why not.
  DropReason OpenRecv(const RecvKey& key, const Header& h, uint64_t now);
  // Loss-tolerant flows: refresh thresholds, close what is due; returns the
  // next time a threshold passes (UINT64_MAX: none).
  uint64_t CheckEarlyClose(uint64_t now);
  // LT of an open loss-tolerant flow: its link's, never below the shared
  // ingress bound (early_close.h).
  uint64_t FlowLt(const RecvLink& link, const RecvFlow& f, uint64_t ingress_bps) const;
  void CloseFlow(const RecvKey& key, CloseReason reason);
  void CloseRecv(const RecvKey& key, const StopInfo& how);
  void DropRecv(absl::flat_hash_map<RecvKey, RecvFlow>::iterator it);

  // ---- ACKs, STOPs and fair shares (endpoint_ack.cc).
  void QueueAck(const Peer& to, const Header& about, uint64_t now, bool urgent);
  void EmitAcks(uint64_t now);
  // A STOP about `about`'s flow saying how it closed.
  void QueueStop(const Peer& to, const Header& about, const StopInfo& how);
  // An ACK or STOP about `about`'s flow; `body` (ACK seq list) must live
  // until the next Flush.
  void QueueControl(const Peer& to, PacketType type, const Header& about,
                    const std::vector<uint8_t>* body = nullptr);
  uint64_t IngressShareBps(uint64_t now);
  // ShareCapacityBps, times the link's share lift while `room` (some flow
  // across it says its path is clean).
  uint64_t LiftedCapacity(ShareLift* lift, uint64_t span_bps, uint64_t peer_max_bps, uint64_t now,
                          bool room, uint32_t rtprop_us);
  // A peer's weight in the egress share (endpoint_ack.cc); rate_bps as
  // ShareRate says (UINT64_MAX: new).
  double ShareWeight(const PeerState& ps, uint64_t rate_bps) const;
  void SetRateCaps(uint64_t now);
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_ENDPOINT_INTERNAL_H_
