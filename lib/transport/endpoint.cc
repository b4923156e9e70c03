// The UDP endpoint (endpoint.h): its API, its thread's event loop and the
// state it publishes. The send side is in endpoint_send.cc, the receive
// side in endpoint_recv.cc, ACKs, STOPs and fair shares in endpoint_ack.cc;
// the state they share in endpoint_internal.h.
#include "lib/transport/endpoint.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/transport/endpoint_internal.h"
#include "lib/transport/local_ring.h"
#include "lib/transport/udp_socket.h"

namespace hetps {
namespace transport {

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
  w->Key("rtt_min_us").Uint(t.rtt_min_us);
  w->Key("rtt_mean_us").Uint(t.rtt_mean_us);
  w->Key("rtt_max_us").Uint(t.rtt_max_us);
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
  if (config.congestion.share_lift_step_rtprops == 0 ||
      config.congestion.share_lift_step_rtprops > 64) {
    return absl::InvalidArgumentError("data plane: share_lift_step_rtprops outside [1, 64]");
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
    if (config.local_rings) {
      LocalRingOptions lo;
      lo.ring_bytes = config.local_ring_bytes;
      auto rings = LocalRingSocket::Create(std::move(e->impl_->socket), lo);
      if (!rings.ok()) return rings.status();
      e->impl_->socket = std::move(*rings);
    }
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
  f->plan = options.plan;
  f->samples = options.samples;
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
  std::sort(ids.begin(), ids.end());  // handles finish in a fixed order
  for (uint32_t id : ids) FinishFlow(id, absl::CancelledError("data plane: endpoint shut down"));
  std::vector<std::unique_ptr<SendFlow>> left;
  {
    absl::MutexLock lock(&mu);
    left.swap(submitted);
  }
  for (auto& f : left) f->handle->Finish(absl::CancelledError("data plane: endpoint shut down"));
}

void Endpoint::Impl::Publish() {
  EndpointStats s = stats;
  s.local_rings = socket->local_ring_stats();
  s.congestion_rounds = retired.congestion_rounds;
  s.standing_queue_rounds = retired.standing_queue_rounds;
  s.undone_rounds = retired.undone_rounds;
  s.startup_restarts = retired.startup_restarts;
  s.cap_lift_rounds = retired.cap_lift_rounds;
  s.share_lift_steps = ingress_lift.steps() + egress_lift.steps();
  for (const PeerState* ps : peer_order) {
    s.peers.push_back({ps->peer, ps->cc.btlbw_bps(), ps->cc.rtprop_us(), ps->cc.pacing_rate_bps(),
                       ps->cc.cwnd_bytes(), ps->cc.congestion_rounds(), ps->cc.rate_cap_bps(),
                       ps->cc.in_startup(), ps->inflight_bytes});
    s.congestion_rounds += ps->cc.congestion_rounds();
    s.standing_queue_rounds += ps->cc.standing_queue_rounds();
    s.undone_rounds += ps->cc.undone_rounds();
    s.startup_restarts += ps->cc.startup_restarts();
    s.cap_lift_rounds += ps->cc.cap_lift_rounds();
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
      retired.cap_lift_rounds += ps.cc.cap_lift_rounds();
      peer_order.erase(std::find(peer_order.begin(), peer_order.end(), &ps));
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

}  // namespace transport
}  // namespace hetps
