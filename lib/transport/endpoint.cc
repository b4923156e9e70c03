#include "lib/transport/endpoint.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <queue>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/base/splitmix.h"
#include "lib/base/status_macros.h"
#include "lib/transport/recv_budget.h"
#include "lib/transport/udp_socket.h"

namespace hetps {
namespace transport {
namespace {

constexpr size_t kAckEchoMax = 64;  // seqs an ACK repeats (ack_echo)

}  // namespace

void AppendPackets(uint32_t chunk_id, const float* data, uint32_t floats, uint32_t payload_floats,
                   bool mark_ends_critical, std::vector<PacketSpan>* out) {
  const size_t first = out->size();
  for (uint32_t off = 0; off < floats; off += payload_floats) {
    PacketSpan p;
    p.chunk_id = chunk_id;
    p.chunk_offset = off;
    p.data = data + off;
    p.floats = std::min(payload_floats, floats - off);
    out->push_back(p);
  }
  if (mark_ends_critical && out->size() > first) {
    (*out)[first].critical = true;
    out->back().critical = true;
  }
}

absl::Status ValidateFlow(const std::vector<PacketSpan>& packets, uint32_t payload_floats) {
  if (packets.empty() || packets.size() > kFlowPacketsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("a flow needs 1 to ", kFlowPacketsMax, " packets"));
  }
  for (const PacketSpan& p : packets) {
    if (p.floats == 0 || p.floats > payload_floats || p.data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("packet of ", p.floats, " floats (1 to ", payload_floats, " allowed)"));
    }
  }
  return absl::OkStatus();
}

void AppendJson(const FlowTiming& t, JsonWriter* w) {
  w->BeginObject();
  w->Key("submitted").Uint(t.submitted_us);
  w->Key("taken").Uint(t.taken_us);
  w->Key("first_sent").Uint(t.first_sent_us);
  w->Key("last_sent").Uint(t.last_sent_us);
  w->Key("done").Uint(t.done_us);
  w->Key("pacing_holds").Uint(t.pacing_holds);
  w->Key("window_holds").Uint(t.window_holds);
  w->Key("pacing_bps").Uint(t.pacing_rate_bps);
  w->Key("cwnd").Uint(t.cwnd_bytes);
  w->Key("cap_bps").Uint(t.rate_cap_bps);
  w->Key("btlbw_bps").Uint(t.btlbw_bps);
  w->Key("rtprop_us").Uint(t.rtprop_us);
  w->Key("startup").Bool(t.in_startup);
  w->EndObject();
}

void AppendJson(const FlowResult& r, JsonWriter* w) {
  w->BeginArray().Uint(r.first_us).Uint(r.last_us).Uint(r.closed_us).EndArray();
}

// ---- SendHandle ----------------------------------------------------------

bool SendHandle::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!done_) {
    if (mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) break;
    if (absl::Now() >= deadline) break;
  }
  return done_ && status_.ok();
}

bool SendHandle::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status SendHandle::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Duration SendHandle::elapsed() const {
  absl::MutexLock lock(&mu_);
  return (done_ ? finished_ : clock_->Now()) - started_;
}

CloseReason SendHandle::close_reason() const {
  absl::MutexLock lock(&mu_);
  return close_reason_;
}

uint32_t SendHandle::receiver_packets() const {
  absl::MutexLock lock(&mu_);
  return receiver_packets_;
}

FlowTiming SendHandle::timing() const {
  absl::MutexLock lock(&mu_);
  return timing_;
}

void SendHandle::Finish(absl::Status s) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(s);
  finished_ = clock_->Now();
}

// ---- Endpoint internals --------------------------------------------------

struct PacketState {
  SendSample sample;
  uint64_t tx_seq = 0;  // latest transmission's number (per peer)
  uint16_t tx_count = 0;
  uint16_t lost_tx_count = 0;  // tx_count when last declared lost; 0: never
  bool acked = false;
  bool in_flight = false;
  bool queued_retx = false;
};

struct SendFlow {
  uint32_t flow_id = 0;
  Peer peer;
  uint32_t iteration = 0;
  std::vector<PacketSpan> packets;
  std::vector<PacketState> state;
  std::shared_ptr<SendHandle> handle;
  uint32_t next_new = 0;
  uint32_t acked = 0;
  uint32_t prefix_acked = 0;  // seqs below it acknowledged (the receiver's ACK prefix)
  std::deque<uint32_t> retx;  // lost packets resent before new ones (LTP: critical only, CQ)
  // Loss-tolerant: packets [0, critical_count) are critical; lost normal
  // packets wait in rq until nothing new is left.
  bool lossy = false;
  uint32_t critical_count = 0;
  std::deque<uint32_t> rq;
  FlowTiming timing;  // the peer's hold counters when taken, until it finishes
};

struct InflightEntry {
  uint32_t flow_id;
  uint32_t seq;
  uint64_t tx_seq;
  uint64_t sent_us;
};

struct PeerState {
  explicit PeerState(const CongestionConfig& c) : cc(c) {}
  CongestionControl cc;
  uint64_t inflight_bytes = 0;
  uint64_t next_send_us = 0;
  uint64_t tx_counter = 0;
  uint64_t highest_acked_tx = 0;
  std::deque<InflightEntry> inflight;
  std::deque<uint32_t> flows;                  // active flow ids, served round-robin
  uint64_t receiver_share_bps = 0;             // the receiver's fair share (ACK btlbw_kbps)
  IngressRate acked{kShareBinUs, kShareBins};  // bytes acknowledged (egress share)
  uint64_t active_since_us = 0;                // flows became non-empty
  uint64_t idle_since_us = 0;                  // flows became empty; 0: never active
  double srtt_us = 0;
  double rttvar_us = 0;
  uint32_t pacing_holds = 0;  // FlowTiming's counters, since the peer was new
  uint32_t window_holds = 0;
};

struct RecvKey {
  Peer peer;
  uint32_t flow_id;
  bool operator==(const RecvKey& o) const { return peer == o.peer && flow_id == o.flow_id; }
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
  uint64_t last_us = 0;
  std::vector<uint64_t> bitmap;
  // Loss-tolerant flows (Early Close).
  bool lossy = false;
  uint64_t start_us = 0;               // first packet's arrival
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
  LinkThreshold threshold;
  LinkEstimate estimate;
  IngressRate recent{kShareBinUs, kShareBins};  // this peer's data rate (fair share)
};

struct Pending {
  Peer to;
  std::array<uint8_t, kHeaderBytes> head;
  const uint8_t* body = nullptr;
  size_t body_len = 0;
};

struct Endpoint::Impl {
  Impl(const EndpointConfig& c, Receiver* r, const Clock* clk, uint64_t seed)
      : config(c),
        receiver(r),
        clock(clk),
        seed(seed),
        key_shared(c.key),
        early_close(c.early_close),
        early_close_shared(c.early_close),
        auth(c.authenticate,
             [this] { return this->seed != 0 ? Mix64(this->seed + ++sender_draws) : RandomU64(); }),
        budget(c.recv_peer_bytes_max, c.recv_bytes_max),
        flow_counter(static_cast<uint32_t>(seed != 0 ? seed : std::random_device{}())) {}

  const EndpointConfig config;
  Receiver* const receiver;
  const Clock* const clock;
  const uint64_t seed;  // nonzero: sender nonces derive from it (simulations)
  std::unique_ptr<DatagramSocket> socket;
  Peer self;         // our address as peers know it: what our tags cover
  int wake_fd = -1;  // threaded endpoints: Send and Shutdown wake the thread

  // Shared with other threads.
  mutable absl::Mutex mu;
  std::vector<std::unique_ptr<SendFlow>> submitted ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> cancelled ABSL_GUARDED_BY(mu);
  EndpointStats published ABSL_GUARDED_BY(mu);
  std::atomic<bool> stop{false};           // read every loop iteration: no lock
  DataKey key_shared ABSL_GUARDED_BY(mu);  // SetKey's, taken by the thread
  bool key_changed ABSL_GUARDED_BY(mu) = true;
  EarlyCloseConfig early_close;  // the thread's copy, refreshed from early_close_shared
  EarlyCloseConfig early_close_shared ABSL_GUARDED_BY(mu);
  size_t active_flows ABSL_GUARDED_BY(mu) = 0;

  // Owned by the endpoint thread.
  uint64_t sender_draws = 0;  // seeded sender values drawn so far
  PacketAuth auth;
  EndpointStats stats;
  absl::flat_hash_map<uint32_t, std::unique_ptr<SendFlow>> flows;
  absl::flat_hash_map<Peer, std::unique_ptr<PeerState>> peers;
  absl::flat_hash_map<RecvKey, RecvFlow> recv;
  RecvBudget budget;  // what open receive flows hold, per peer and in total
  absl::flat_hash_map<RecvKey, StopInfo> closed;  // how each remembered flow closed
  absl::flat_hash_map<Peer, RecvLink> links;
  IngressRate ingress;  // data bytes received, all flows (shared-link LT, ingress share)
  IngressRate egress;   // data bytes acknowledged, all peers (egress share)
  absl::flat_hash_map<Peer, uint64_t> share_peers;  // IngressShareBps's scratch: first start
  std::vector<uint64_t> share_rates;                // IngressShareBps's and SetRateCaps' scratch
  std::deque<RecvKey> closed_order;
  std::vector<Pending> pending;
  std::vector<OutDatagram> flush_out;  // Flush's scratch, kept to reuse its capacity
  struct AckBatch {
    Header about;
    std::vector<uint32_t> seqs;
    uint64_t due_us = 0;  // delayed ACKs (EndpointConfig::ack_every)
  };
  absl::flat_hash_map<RecvKey, AckBatch> acks;     // ACKs not sent yet
  uint64_t next_ack_us = UINT64_MAX;               // earliest due_us in acks
  std::vector<std::vector<uint8_t>> ack_payloads;  // bodies of queued ACKs, until Flush
  std::vector<InDatagram> rx;
  std::atomic<uint32_t> flow_counter;
  uint64_t last_gc_us = 0;
  struct {
    uint64_t congestion_rounds = 0, standing_queue_rounds = 0, undone_rounds = 0,
             startup_restarts = 0;
  } retired;  // counters of peers forgotten (GarbageCollect)
  uint64_t last_publish_us = 0;
  uint64_t next_threshold_us = UINT64_MAX;

  uint64_t Now() const { return clock->MonotonicMicros(); }
  void Run();
  // One turn of the loop; the next time a turn is due.
  uint64_t Turn();
  // After the loop: every unfinished flow finishes CANCELLED.
  void Finish();
  void Wake();
  void TakeSubmissions(uint64_t now);
  void Receive(uint64_t now);
  // LT of an open loss-tolerant flow: its link's, never below the shared
  // ingress bound (early_close.h).
  uint64_t FlowLt(const RecvLink& link, const RecvFlow& f, uint64_t ingress_bps) const;
  void HandleData(const Peer& from, const Packet& p, uint64_t now);
  void HandleAck(const Peer& from, const Packet& p, uint64_t now);
  // rtt_sample: false for a packet covered only by an ACK's prefix.
  bool AckOne(SendFlow& f, PeerState& ps, uint32_t seq, uint64_t now, bool rtt_sample);
  void QueueAck(const Peer& to, const Header& about, uint64_t now, bool urgent);
  void EmitAcks(uint64_t now);
  uint64_t IngressShareBps(uint64_t now);
  void SetRateCaps(uint64_t now);
  void HandleStop(const Peer& from, const Packet& p);
  // Loss-tolerant flows: refresh thresholds, close what is due; returns the
  // next time a threshold passes (UINT64_MAX: none).
  uint64_t CheckEarlyClose(uint64_t now);
  void CloseFlow(const RecvKey& key, CloseReason reason);
  // A STOP about `about`'s flow saying how it closed.
  void QueueStop(const Peer& to, const Header& about, const StopInfo& how);
  // An ACK or STOP about `about`'s flow; `body` (ACK seq list) must live
  // until the next Flush.
  void QueueControl(const Peer& to, PacketType type, const Header& about,
                    const std::vector<uint8_t>* body = nullptr);
  void DetectLosses(PeerState& ps, uint64_t now);
  void MarkLost(SendFlow& f, uint32_t seq, PeerState& ps);
  void SendData(uint64_t now);
  uint64_t NextSendTime(uint64_t now);
  void Flush(uint64_t now);
  void FinishFlow(uint32_t flow_id, absl::Status s);
  void CloseRecv(const RecvKey& key, const StopInfo& how);
  // Opens a receive flow for `h`'s first packet, or says why not.
  DropReason OpenRecv(const RecvKey& key, const Header& h, uint64_t now);
  void DropRecv(absl::flat_hash_map<RecvKey, RecvFlow>::iterator it);
  void GarbageCollect(uint64_t now);
  // Forgets the estimates of peers without a flow for idle_us (0: every
  // idle peer), and the Early Close state of links without an open flow
  // as long; their counters stay in the totals.
  void ForgetIdlePeers(uint64_t now, uint64_t idle_us);
  void Publish();
  PeerState& PeerFor(const Peer& p);
  uint32_t RtoUs(const PeerState& ps) const;
};

Endpoint::Endpoint(const EndpointConfig& config, Receiver* receiver, const Clock* clock,
                   uint64_t seed)
    : config_(config), impl_(std::make_unique<Impl>(config, receiver, clock, seed)) {}

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(const EndpointConfig& config,
                                                           Receiver* receiver, EndpointEnv env) {
  if (config.packet_bytes < kHeaderBytes + 4 || config.packet_bytes > kDatagramBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("data plane: packet_bytes ", config.packet_bytes,
                                                   " outside [", kHeaderBytes + 4, ", ",
                                                   kDatagramBytesMax, "]"));
  }
  if (config.batch_max == 0 || config.batch_max > 1024) {
    return absl::InvalidArgumentError("data plane: batch_max outside [1, 1024]");
  }
  if (config.ack_every == 0 || config.ack_every > kAckSeqsMax + 1) {
    return absl::InvalidArgumentError("data plane: ack_every outside [1, 257]");
  }
  if (config.ack_delay_max_us > 100'000) {
    return absl::InvalidArgumentError("data plane: ack_delay_max_us above 100000");
  }
  if (config.recv_peer_bytes_max < RecvFlowBytes(1) ||
      config.recv_bytes_max < config.recv_peer_bytes_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: recv_peer_bytes_max must be at least ", RecvFlowBytes(1),
                     " and at most recv_bytes_max"));
  }
  const Clock* clock = env.clock != nullptr ? env.clock : RealClock::Get();
  auto e = std::unique_ptr<Endpoint>(new Endpoint(config, receiver, clock, env.seed));
  if (env.socket != nullptr) {
    e->impl_->socket = std::move(env.socket);
  } else {
    UdpSocketOptions so;
    so.buffer_bytes = config.socket_buffer_bytes;
    so.batch_max = config.batch_max;
    so.datagram_bytes_max = kDatagramBytesMax;
    so.gso = config.gso;
    so.gro = config.gro;
    auto sock = UdpSocket::Create(config.bind, so);
    if (!sock.ok()) return sock.status();
    e->impl_->socket = std::move(*sock);
  }
  e->local_ = e->impl_->socket->local();
  e->impl_->self = e->local_;
  if (config.advertise_ip != 0) e->impl_->self.ip = config.advertise_ip;
  e->threaded_ = env.threaded;
  if (env.threaded) {
    e->impl_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->impl_->wake_fd < 0) return absl::InternalError("data plane: eventfd failed");
    Impl* impl = e->impl_.get();
    e->thread_ = std::thread([impl] { impl->Run(); });
  }
  return e;
}

Endpoint::~Endpoint() {
  Shutdown();
  if (impl_->wake_fd >= 0) close(impl_->wake_fd);
}

void Endpoint::Shutdown() {
  if (impl_->stop.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  if (threaded_) {
    impl_->Wake();
    if (thread_.joinable()) thread_.join();
  } else {
    impl_->Finish();
  }
}

uint64_t Endpoint::Step() {
  if (threaded_ || impl_->stop) return UINT64_MAX;
  return impl_->Turn();
}

std::shared_ptr<SendHandle> Endpoint::Send(const Peer& to, uint32_t iteration,
                                           std::vector<PacketSpan> packets, SendOptions options) {
  auto handle = std::make_shared<SendHandle>(impl_->clock);
  handle->started_ = impl_->clock->Now();
  handle->flow_id_ = impl_->flow_counter.fetch_add(1);
  if (absl::Status s = ValidateFlow(packets, config_.payload_floats()); !s.ok()) {
    handle->Finish(absl::Status(s.code(), absl::StrCat("data plane: ", s.message())));
    return handle;
  }
  auto f = std::make_unique<SendFlow>();
  if (options.loss_tolerant) {
    // Critical packets first (CQ before NQ): the first packet always is one.
    packets.front().critical = true;
    auto mid = std::stable_partition(packets.begin(), packets.end(),
                                     [](const PacketSpan& p) { return p.critical; });
    f->lossy = true;
    f->critical_count = static_cast<uint32_t>(mid - packets.begin());
  }
  f->timing.submitted_us = impl_->clock->MonotonicMicros();
  f->flow_id = handle->flow_id_;
  f->peer = to;
  f->iteration = iteration;
  f->packets = std::move(packets);
  f->state.resize(f->packets.size());
  f->handle = handle;
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stop) {
      handle->Finish(absl::CancelledError("data plane: endpoint shut down"));
      return handle;
    }
    if (!impl_->key_shared.set) {
      handle->Finish(absl::FailedPreconditionError(
          "data plane: no job key installed (the job's assignment carries it)"));
      return handle;
    }
    if (impl_->active_flows >= config_.send_flows_max) {
      handle->Finish(absl::ResourceExhaustedError(absl::StrCat(
          "data plane: ", config_.send_flows_max, " flows already in progress (send_flows_max)")));
      return handle;
    }
    ++impl_->active_flows;
    impl_->submitted.push_back(std::move(f));
  }
  impl_->Wake();
  return handle;
}

void Endpoint::Cancel(const std::shared_ptr<SendHandle>& handle) {
  if (handle == nullptr || handle->done()) return;
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->cancelled.push_back(handle->flow_id());
  }
  impl_->Wake();
}

void Endpoint::SetKey(const DataKey& key) {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->key_shared = key;
    impl_->key_changed = true;
  }
  impl_->Wake();
}

absl::Status Endpoint::SetEarlyClose(const EarlyCloseConfig& config) {
  RETURN_IF_ERROR(ValidateEarlyCloseConfig(config));
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->early_close_shared = config;
  }
  impl_->Wake();
  return absl::OkStatus();
}

EndpointStats Endpoint::GetStats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->published;
}

void Endpoint::Impl::Wake() {
  if (wake_fd < 0) return;  // threadless: the owner's next Step takes it
  const uint64_t one = 1;
  ssize_t r = write(wake_fd, &one, sizeof(one));
  (void)r;  // a full counter still wakes the loop
}

PeerState& Endpoint::Impl::PeerFor(const Peer& p) {
  auto& slot = peers[p];
  if (slot == nullptr) {
    CongestionConfig cc = config.congestion;
    cc.packet_bytes = config.packet_bytes;
    slot = std::make_unique<PeerState>(cc);
  }
  return *slot;
}

uint32_t Endpoint::Impl::RtoUs(const PeerState& ps) const {
  // srtt + 4 rttvar, but at least 1.5 srtt: on a steady path rttvar decays
  // towards 0, and a queue that then builds up would fire the timer for
  // packets that are only late (each a spurious resend).
  double rto = ps.srtt_us > 0 ? ps.srtt_us + std::max(4 * ps.rttvar_us, ps.srtt_us / 2)
                              : double(config.rto_initial_us);
  return static_cast<uint32_t>(std::clamp<double>(rto, config.rto_min_us, config.rto_max_us));
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
      ps.active_since_us = now;
    }
    f->timing.taken_us = now;
    f->timing.pacing_holds = ps.pacing_holds;
    f->timing.window_holds = ps.window_holds;
    ps.flows.push_back(f->flow_id);
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
      if (f.state[i].in_flight) {
        ps.inflight_bytes -= kHeaderBytes + f.packets[i].floats * sizeof(float);
        f.state[i].in_flight = false;
      }
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
    // What EmitAcks set: the prefix and the receiver's fair share.
    h.flags = about.flags & kFlagAckPrefix;
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

// A peer's rate for FairShareBps. One that began sending within the rate
// window has not shown a rate yet: it counts as able to take a full
// share, not as a slow one (else the first share it hears is the link).
namespace {
uint64_t ShareRate(IngressRate& recent, uint64_t active_since_us, uint64_t now) {
  return now - active_since_us < kShareWindowUs ? UINT64_MAX : recent.rate_bps(now);
}
}  // namespace

// The max-min fair share of this endpoint's ingress among the peers
// sending to it now (FairShareBps over their recent rates; 0 with fewer
// than two): ACKs carry it in btlbw_kbps, and the senders cap their pacing
// at it (congestion.h, SetRateCap).
uint64_t Endpoint::Impl::IngressShareBps(uint64_t now) {
  share_peers.clear();
  for (const auto& [key, f] : recv) {
    auto [it, fresh] = share_peers.try_emplace(key.peer, f.start_us);
    if (!fresh) it->second = std::min(it->second, f.start_us);
  }
  if (share_peers.size() < 2) return 0;
  share_rates.clear();
  for (const auto& [p, start] : share_peers) {
    share_rates.push_back(ShareRate(links[p].recent, start, now));
  }
  return FairShareBps(ingress.link_rate_bps(now), share_rates);
}

// The same on the sending side over this endpoint's egress (bytes
// acknowledged, all peers) and its active peers' recent rates; each active
// peer's controller is capped at the smaller of that and the receiver's
// advertised share.
void Endpoint::Impl::SetRateCaps(uint64_t now) {
  share_rates.clear();
  for (auto& [peer, ps] : peers) {
    if (ps->flows.empty()) continue;
    share_rates.push_back(ShareRate(ps->acked, ps->active_since_us, now));
  }
  const uint64_t egress_share = FairShareBps(egress.link_rate_bps(now), share_rates);
  for (auto& [peer, ps] : peers) {
    if (ps->flows.empty()) continue;
    uint64_t cap = ps->receiver_share_bps;
    if (egress_share > 0 && (cap == 0 || egress_share < cap)) cap = egress_share;
    ps->cc.SetRateCap(cap);
  }
}

void Endpoint::Impl::EmitAcks(uint64_t now) {
  if (acks.empty() || next_ack_us > now) return;
  const uint64_t share_kbps = std::min<uint64_t>(IngressShareBps(now) / 1000, UINT32_MAX);
  next_ack_us = UINT64_MAX;
  for (auto it = acks.begin(); it != acks.end();) {
    const RecvKey& key = it->first;
    AckBatch& batch = it->second;
    if (batch.due_us > now) {
      next_ack_us = std::min(next_ack_us, batch.due_us);
      ++it;
      continue;
    }
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
      h.flags = 0;  // QueueControl keeps only kFlagAckPrefix of an ACK's flags
      if (prefix > 0) {
        h.flags |= kFlagAckPrefix;
        h.chunk_offset = prefix;
      }
      const std::vector<uint8_t>* body = nullptr;
      if (extra > 0) {
        ack_payloads.emplace_back(extra * sizeof(uint32_t));
        EncodeAckSeqs(batch.seqs.data() + i + 1, extra, ack_payloads.back().data());
        body = &ack_payloads.back();
      }
      QueueControl(key.peer, PacketType::kAck, h, body);
    }
    acks.erase(it++);
  }
}

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
      // Authenticated before anything else reads it (packet_auth.h).
      if (why == DropReason::kNone) {
        why = auth.Verify(d.from, p.header, d.data, p.payload, p.header.payload_bytes);
      }
      if (why != DropReason::kNone) {
        ++stats.drops[size_t(why)];
        continue;
      }
      switch (p.header.type) {
        case PacketType::kData:
          HandleData(d.from, p, now);
          break;
        case PacketType::kAck:
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

void Endpoint::Impl::HandleData(const Peer& from, const Packet& p, uint64_t now) {
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
  }
  RecvFlow& f = it->second;
  if (h.total_packets != f.total || h.iteration != f.iteration ||
      f.lossy != ((h.flags & kFlagLossTolerant) != 0)) {
    ++stats.drops[size_t(DropReason::kBadSequence)];
    return;
  }
  f.last_us = now;
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
  RecvLink& link = links[from];
  link.recent.OnBytes(now, f.packet_bytes);
  link.last_us = now;
  receiver->OnData(from, h, p.payload);
  ++f.received;
  while (f.prefix < f.total && f.has(f.prefix)) ++f.prefix;
  if (f.lossy) {
    if (h.flags & kFlagCriticalEnd) f.critical_end = h.seq;
    if ((h.flags & kFlagResent) || h.seq + 1 == f.total) f.first_pass_done = true;
    if (h.rtprop_us > 0) f.rtprop_us = h.rtprop_us;
    if (h.btlbw_kbps > 0) f.btlbw_bps = uint64_t(h.btlbw_kbps) * 1000;
  }
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
  f.bitmap.assign(RecvBitmapWords(h.total_packets), 0);
  f.lossy = (h.flags & kFlagLossTolerant) != 0;
  f.start_us = now;
  f.packet_bytes = kHeaderBytes + h.payload_bytes;
  if (f.lossy) {
    f.rtprop_us = h.rtprop_us;
    f.btlbw_bps = uint64_t(h.btlbw_kbps) * 1000;
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

void Endpoint::Impl::QueueStop(const Peer& to, const Header& about, const StopInfo& how) {
  ack_payloads.emplace_back(kStopPayloadBytes);
  EncodeStop(how, ack_payloads.back().data());
  QueueControl(to, PacketType::kStop, about, &ack_payloads.back());
}

void Endpoint::Impl::CloseFlow(const RecvKey& key, CloseReason reason) {
  auto it = recv.find(key);
  if (it == recv.end()) return;
  const RecvFlow& f = it->second;
  FlowResult r;
  r.flow_id = key.flow_id;
  r.iteration = f.iteration;
  r.total_packets = f.total;
  r.received = f.received;
  r.reason = reason;
  r.first_us = f.start_us;
  r.last_us = f.last_us;
  r.closed_us = Now();
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

void Endpoint::Impl::HandleAck(const Peer& from, const Packet& p, uint64_t now) {
  ++stats.acks_received;
  const Header& h = p.header;
  auto it = flows.find(h.flow_id);
  if (it == flows.end() || it->second->peer != from) return;  // finished or not ours
  SendFlow& f = *it->second;
  PeerState& ps = PeerFor(from);
  ps.receiver_share_bps = uint64_t(h.btlbw_kbps) * 1000;
  bool finished = AckOne(f, ps, h.seq, now, true);
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
bool Endpoint::Impl::AckOne(SendFlow& f, PeerState& ps, uint32_t seq, uint64_t now,
                            bool rtt_sample) {
  if (seq >= f.state.size()) {
    ++stats.drops[size_t(DropReason::kBadSequence)];
    return false;
  }
  PacketState& st = f.state[seq];
  if (st.acked) return false;
  const uint32_t bytes = kHeaderBytes + f.packets[seq].floats * sizeof(float);
  st.acked = true;
  if (st.in_flight) {
    ps.inflight_bytes -= bytes;
    st.in_flight = false;
  }
  SendSample sample = st.sample;
  if (!rtt_sample) sample.retransmitted = true;  // as a resent packet: no RTT
  // Declared lost, yet delivered: not resent since, or acknowledged sooner
  // than half an RTprop after the resend (so the first copy arrived).
  if (st.lost_tx_count > 0 &&
      (st.tx_count == st.lost_tx_count ||
       (now >= sample.sent_us && 2 * (now - sample.sent_us) < ps.cc.rtprop_us()))) {
    ++stats.losses_spurious;
    ps.cc.OnSpuriousLoss(bytes);
    st.lost_tx_count = 0;
  }
  ps.cc.OnAck(now, bytes, sample);
  egress.OnBytes(now, bytes);
  ps.acked.OnBytes(now, bytes);
  if (!sample.retransmitted && now >= sample.sent_us) {
    const double rtt = double(now - sample.sent_us);
    if (ps.srtt_us == 0) {
      ps.srtt_us = rtt;
      ps.rttvar_us = rtt / 2;
    } else {
      ps.rttvar_us = 0.75 * ps.rttvar_us + 0.25 * std::abs(ps.srtt_us - rtt);
      ps.srtt_us = 0.875 * ps.srtt_us + 0.125 * rtt;
    }
  }
  ps.highest_acked_tx = std::max(ps.highest_acked_tx, st.tx_seq);
  return ++f.acked == f.state.size();
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
  const uint32_t rto = RtoUs(ps);
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
    // Lost: three later transmissions were acknowledged, or the timer ran out.
    if (e.tx_seq + 3 <= ps.highest_acked_tx || now >= e.sent_us + rto) {
      if (e.tx_seq + 3 > ps.highest_acked_tx) ++stats.losses_timeout;
      MarkLost(f, e.seq, ps);
      ps.inflight.pop_front();
      continue;
    }
    break;
  }
}

void Endpoint::Impl::SendData(uint64_t now) {
  const uint64_t burst_us_max = 200;  // lets one wake-up fill a batch
  SetRateCaps(now);
  for (auto& [peer, psp] : peers) {
    PeerState& ps = *psp;
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
      if (f.lossy) {
        h.flags |= kFlagLossTolerant;
        if (seq + 1 == f.critical_count) h.flags |= kFlagCriticalEnd;
        if (retransmission && seq >= f.critical_count) h.flags |= kFlagResent;
      }
      h.payload_bytes = static_cast<uint16_t>(span.floats * sizeof(float));
      h.key_id = auth.key_id();
      h.packet_number = auth.NextPacketNumber();
      h.sender = auth.sender();
      h.flow_id = fid;
      h.seq = seq;
      h.total_packets = static_cast<uint32_t>(f.packets.size());
      h.chunk_id = span.chunk_id;
      h.chunk_offset = span.chunk_offset;
      h.iteration = f.iteration;
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
  for (auto& [peer, psp] : peers) {
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
    auth.Seal(self, p.head.data(), p.body, p.body_len);
    out.push_back({p.to, p.head.data(), kHeaderBytes, p.body, p.body_len});
  }
  size_t done = 0;
  int spins = 0;
  while (done < out.size()) {
    const int n = socket->SendBatch(out.data() + done, out.size() - done);
    if (n < 0) break;  // socket error: treat the rest as lost; recovery resends
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
      stats.bytes_sent += out[done + i].head_len + out[done + i].body_len;
    }
    done += n;
  }
  pending.clear();
  ack_payloads.clear();
}

void Endpoint::Impl::GarbageCollect(uint64_t now) {
  const uint64_t idle_us = uint64_t(config.recv_flow_idle_ms) * 1000;
  for (auto it = recv.begin(); it != recv.end();) {
    if (now > it->second.last_us + idle_us) {
      DropRecv(it++);
    } else {
      ++it;
    }
  }
  // Peers gone quiet are forgotten, so state (and the metric series made
  // from it) does not pile up with every peer ever seen; their counters
  // stay in the totals.
  ForgetIdlePeers(now, uint64_t(config.peer_forget_ms) * 1000);
}

void Endpoint::Impl::ForgetIdlePeers(uint64_t now, uint64_t idle_us) {
  for (auto it = peers.begin(); it != peers.end();) {
    PeerState& ps = *it->second;
    if (ps.flows.empty() && ps.inflight_bytes == 0 && now >= ps.idle_since_us + idle_us &&
        (ps.idle_since_us != 0 || idle_us == 0)) {
      retired.congestion_rounds += ps.cc.congestion_rounds();
      retired.standing_queue_rounds += ps.cc.standing_queue_rounds();
      retired.undone_rounds += ps.cc.undone_rounds();
      retired.startup_restarts += ps.cc.startup_restarts();
      peers.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = links.begin(); it != links.end();) {
    const bool open = std::any_of(recv.begin(), recv.end(),
                                  [&](const auto& r) { return r.first.peer == it->first; });
    if (!open && now >= it->second.last_us + idle_us) {
      links.erase(it++);
    } else {
      ++it;
    }
  }
}

void Endpoint::Impl::Publish() {
  EndpointStats s = stats;
  s.congestion_rounds = retired.congestion_rounds;
  s.standing_queue_rounds = retired.standing_queue_rounds;
  s.undone_rounds = retired.undone_rounds;
  s.startup_restarts = retired.startup_restarts;
  for (auto& [peer, ps] : peers) {
    s.peers.push_back({peer, ps->cc.btlbw_bps(), ps->cc.rtprop_us(), ps->cc.pacing_rate_bps(),
                       ps->cc.cwnd_bytes(), ps->cc.congestion_rounds(), ps->cc.rate_cap_bps(),
                       ps->cc.in_startup(), ps->inflight_bytes});
    s.congestion_rounds += ps->cc.congestion_rounds();
    s.standing_queue_rounds += ps->cc.standing_queue_rounds();
    s.undone_rounds += ps->cc.undone_rounds();
    s.startup_restarts += ps->cc.startup_restarts();
  }
  for (auto& [peer, link] : links) {
    if (link.estimate.lossy_flows == 0) continue;  // Early Close state only for LTP links
    s.links.push_back(link.estimate);
    s.links.back().peer = peer;
  }
  s.ingress_bps = ingress.link_rate_bps(Now());
  s.recv_state_bytes = budget.total();
  absl::MutexLock lock(&mu);
  published = std::move(s);
}

uint64_t Endpoint::Impl::Turn() {
  uint64_t now = Now();
  TakeSubmissions(now);
  Receive(now);
  now = Now();
  EmitAcks(now);  // delayed ACKs now due
  if (now >= next_threshold_us || next_threshold_us == 0) next_threshold_us = CheckEarlyClose(now);
  SendData(now);
  Flush(now);
  if (now - last_gc_us > 1'000'000) {
    GarbageCollect(now);
    last_gc_us = now;
  }
  // Threadless: every turn, so GetStats between Steps is exact.
  if (wake_fd < 0 || now - last_publish_us > 1000) {
    Publish();
    last_publish_us = now;
  }
  return std::min(NextSendTime(now), socket->next_arrival_us());
}

void Endpoint::Impl::Run() {
  prctl(PR_SET_TIMERSLACK, 1UL);  // microsecond pacing needs tight timers
  pthread_setname_np(pthread_self(), "hetps-dataplane");
  pollfd fds[2] = {{socket->fd(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t next = Turn();
    const uint64_t now = Now();
    const uint64_t wait_us = next > now ? next - now : 0;
    timespec ts{static_cast<time_t>(wait_us / 1'000'000),
                static_cast<long>(wait_us % 1'000'000) * 1000};
    if (wait_us > 0 && ppoll(fds, 2, &ts, nullptr) > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = read(wake_fd, &v, sizeof(v));
      (void)r;
    }
  }
  Finish();
}

void Endpoint::Impl::Finish() {
  Publish();
  std::vector<uint32_t> ids;
  for (auto& [id, f] : flows) ids.push_back(id);
  for (uint32_t id : ids) FinishFlow(id, absl::CancelledError("data plane: endpoint shut down"));
  std::vector<std::unique_ptr<SendFlow>> left;
  {
    absl::MutexLock lock(&mu);
    left.swap(submitted);
  }
  for (auto& f : left) f->handle->Finish(absl::CancelledError("data plane: endpoint shut down"));
}

}  // namespace transport
}  // namespace hetps
