#include "lib/transport/tcp_endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
// linux/tcp.h, not netinet/tcp.h: glibc's tcp_info lacks delivery_rate and min_rtt.
#include <linux/tcp.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/transport/packet_auth.h"
#include "lib/transport/recv_budget.h"

namespace hetps {
namespace transport {
namespace {

constexpr size_t kConnectionsMax = 4096;
constexpr size_t kWriteChunk = 256 << 10;  // frames copied to a connection's buffer at a time
constexpr size_t kReadPerWake = 4 << 20;   // bytes read from one connection per wake (fairness)
constexpr size_t kFrameBytesMax = kTcpFrameBytesMax;
// What an incoming connection holds before any flow: its receive buffer
// (two frames) and bookkeeping, charged to its host's receive budget.
constexpr uint64_t kConnRecvBytes = 2 * kFrameBytesMax + 4096;

uint64_t NowMicros() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1000;
}

std::string ReadProcLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Sets TCP_CONGESTION on `fd` (nothing for an empty name).
absl::Status SetCongestionOn(int fd, const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), socklen_t(name.size())) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "TCP congestion control '", name, "' refused by the kernel (", std::strerror(err),
        "); available: ", ReadProcLine("/proc/sys/net/ipv4/tcp_available_congestion_control"),
        "; allowed without CAP_NET_ADMIN: ",
        ReadProcLine("/proc/sys/net/ipv4/tcp_allowed_congestion_control")));
  }
  return absl::OkStatus();
}

std::string CongestionOf(int fd) {
  char name[32] = {0};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

struct OutFlow {
  uint32_t flow_id = 0;
  uint32_t iteration = 0;
  uint32_t plan = 0;
  uint32_t samples = 0;
  std::vector<PacketSpan> packets;
  size_t next = 0;  // packets copied to the connection so far
  std::shared_ptr<SendHandle> handle;
};

struct InFlow {
  uint64_t charged = 0;  // bytes charged to the receive budget
  uint32_t total = 0;
  uint32_t iteration = 0;
  uint32_t plan = 0;
  uint32_t samples = 0;
  uint32_t received = 0;
  uint64_t bytes = 0;
  uint64_t first_us = 0;
  uint64_t mid_us = 0;
  uint64_t last_us = 0;
  ArrivalProfile arrivals;  // by read time: TCP hides arrivals
  std::vector<uint64_t> bitmap;
};

struct Conn {
  int fd = -1;
  bool outgoing = false;
  bool connecting = false;  // outgoing: connect() not finished
  bool want_write = false;  // EPOLLOUT registered
  Peer peer;                // outgoing: the destination; incoming: from the hello
  uint32_t remote_ip = 0;   // incoming: the address it came from
  Peer host;                // incoming: {remote_ip, 0}, what its receive budget is charged to
  uint64_t charged = 0;     // incoming: bytes charged for the connection itself
  std::vector<uint8_t> wbuf;
  size_t woff = 0;
  std::unique_ptr<TcpStreamReader> reader;      // incoming bytes: the hello, then frames
  std::deque<OutFlow*> queue;                   // outgoing: flows still to copy
  absl::flat_hash_map<uint32_t, InFlow> flows;  // incoming: flows being received
  uint64_t retrans_seen = 0;                    // TCP_INFO total_retrans already counted
};

}  // namespace

struct TcpEndpoint::Impl {
  Impl(const EndpointConfig& c, Receiver* r)
      : config(c),
        receiver(r),
        flow_counter(std::random_device{}()),
        key_shared(c.key),
        auth(c.authenticate) {
    congestion = c.tcp_congestion;
  }

  void Run();
  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }

  // Thread-only.
  void TakeCommands();
  void Accept();
  Conn* ConnectTo(const Peer& to, std::string* error);
  void OnEvent(Conn* c, uint32_t events);
  bool FlushWrites(Conn* c);  // false: the connection failed
  void FillWrites(Conn* c);
  bool ReadFrames(Conn* c);  // false: close it
  bool HandleFrame(Conn* c, const uint8_t* data, size_t len);
  void CloseConn(Conn* c, const std::string& why);
  void UpdateInterest(Conn* c);
  void FinishFlow(uint32_t flow_id, absl::Status s, const StopInfo* stop);
  void Publish(uint64_t now, bool force);
  void SweepIdle(uint64_t now);
  void EraseInFlow(Conn* c, absl::flat_hash_map<uint32_t, InFlow>::iterator it);

  const EndpointConfig config;
  Receiver* const receiver;
  std::atomic<uint32_t> flow_counter;
  std::atomic<bool> stop{false};
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  uint16_t local_port = 0;  // network order
  Peer self;                // our data address as peers know it: what our tags cover

  // Shared with callers.
  mutable absl::Mutex mu;
  std::vector<std::pair<Peer, std::unique_ptr<OutFlow>>> pending ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> cancelled ABSL_GUARDED_BY(mu);
  std::string congestion ABSL_GUARDED_BY(mu);
  bool congestion_changed ABSL_GUARDED_BY(mu) = false;
  std::string congestion_running ABSL_GUARDED_BY(mu);
  EndpointStats published ABSL_GUARDED_BY(mu);
  DataKey key_shared ABSL_GUARDED_BY(mu);  // SetKey's, taken by the thread
  bool key_changed ABSL_GUARDED_BY(mu) = true;

  // Thread-only: the frames' tags and the replay windows.
  PacketAuth auth;

  // Thread-only.
  absl::flat_hash_map<int, std::unique_ptr<Conn>> conns;  // by fd
  absl::flat_hash_map<Peer, Conn*> out_conns;
  absl::flat_hash_map<uint32_t, std::unique_ptr<OutFlow>> flows;  // sent, awaiting STOP
  absl::flat_hash_map<uint32_t, Conn*> flow_conn;
  std::string cc;  // the congestion control new connections get
  EndpointStats stats;
  uint64_t retrans_closed = 0;  // retransmissions of connections already closed
  uint64_t last_publish_us = 0;
  uint64_t last_sweep_us = 0;
  // Incoming connections and their flows, per sending host (a connection's
  // data port is the peer's word, its IP the kernel's) and in total.
  RecvBudget budget{config.recv_peer_bytes_max, config.recv_bytes_max};
};

absl::Status CheckTcpCongestion(const std::string& name) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("TCP transport: socket() failed");
  absl::Status s = SetCongestionOn(fd, name);
  if (s.ok() && !name.empty() && CongestionOf(fd) != name) {
    s = absl::FailedPreconditionError(absl::StrCat(
        "TCP congestion control '", name, "' set but the kernel reports '", CongestionOf(fd), "'"));
  }
  close(fd);
  return s;
}

TcpEndpoint::TcpEndpoint(const EndpointConfig& config, Receiver* receiver)
    : config_(config), impl_(std::make_unique<Impl>(config, receiver)) {}

absl::StatusOr<std::unique_ptr<TcpEndpoint>> TcpEndpoint::Create(const EndpointConfig& config,
                                                                 Receiver* receiver) {
  if (config.packet_bytes < kHeaderBytes + 4 || config.packet_bytes > kDatagramBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP transport: packet_bytes ", config.packet_bytes, " out of range"));
  }
  RETURN_IF_ERROR(CheckTcpCongestion(config.tcp_congestion));
  auto e = std::unique_ptr<TcpEndpoint>(new TcpEndpoint(config, receiver));
  Impl& m = *e->impl_;
  m.cc = config.tcp_congestion;
  ASSIGN_OR_RETURN(Peer bind, ResolvePeer(config.bind));
  m.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0) return absl::InternalError("TCP transport: socket() failed");
  const int one = 1;
  setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = bind.ToSockaddr();
  if (::bind(m.listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    close(m.listen_fd);
    m.listen_fd = -1;
    return absl::UnavailableError(absl::StrCat("TCP transport: cannot listen on ",
                                               config.bind.ToString(), ": ", std::strerror(err)));
  }
  if (listen(m.listen_fd, 256) != 0) return absl::InternalError("TCP transport: listen() failed");
  socklen_t alen = sizeof(a);
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&a), &alen);
  e->local_ = Peer::FromSockaddr(a);
  m.local_port = e->local_.port;
  m.self = e->local_;
  if (config.advertise_ip != 0) m.self.ip = config.advertise_ip;
  m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.wake_fd < 0) return absl::InternalError("TCP transport: epoll failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = m.listen_fd;
  epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.listen_fd, &ev);
  ev.data.fd = m.wake_fd;
  epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.wake_fd, &ev);
  Impl* impl = e->impl_.get();
  e->thread_ = std::thread([impl] { impl->Run(); });
  return e;
}

TcpEndpoint::~TcpEndpoint() {
  Shutdown();
  for (int fd : {impl_->listen_fd, impl_->epoll_fd, impl_->wake_fd}) {
    if (fd >= 0) close(fd);
  }
}

void TcpEndpoint::Shutdown() {
  impl_->stop = true;
  if (impl_->wake_fd >= 0) impl_->Wake();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<SendHandle> TcpEndpoint::Send(const Peer& to, uint32_t iteration,
                                              std::vector<PacketSpan> packets,
                                              SendOptions options) {
  auto handle = std::make_shared<SendHandle>();
  handle->started_ = absl::Now();
  handle->flow_id_ = impl_->flow_counter.fetch_add(1);
  if (absl::Status s = ValidateFlow(packets, config_.payload_floats()); !s.ok()) {
    handle->Finish(absl::Status(s.code(), absl::StrCat("TCP transport: ", s.message())));
    return handle;
  }
  {
    absl::MutexLock lock(&handle->mu_);
    handle->timing_.submitted_us = NowMicros();
  }
  auto f = std::make_unique<OutFlow>();
  f->flow_id = handle->flow_id_;
  f->iteration = iteration;
  f->plan = options.plan;
  f->samples = options.samples;
  f->packets = std::move(packets);
  f->handle = handle;
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stop) {
      handle->Finish(absl::CancelledError("TCP transport: shut down"));
      return handle;
    }
    if (!impl_->key_shared.set) {
      handle->Finish(absl::FailedPreconditionError(
          "TCP transport: no job key installed (the job's assignment carries it)"));
      return handle;
    }
    impl_->pending.emplace_back(to, std::move(f));
  }
  impl_->Wake();
  return handle;
}

void TcpEndpoint::Cancel(const std::shared_ptr<SendHandle>& handle) {
  if (handle == nullptr || handle->done()) return;
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->cancelled.push_back(handle->flow_id());
  }
  impl_->Wake();
}

EndpointStats TcpEndpoint::GetStats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->published;
}

void TcpEndpoint::SetKey(const DataKey& key) {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->key_shared = key;
    impl_->key_changed = true;
  }
  impl_->Wake();
}

absl::Status TcpEndpoint::SetEarlyClose(const EarlyCloseConfig& config) {
  return ValidateEarlyCloseConfig(config);  // TCP delivers everything: nothing closes early
}

absl::Status TcpEndpoint::SetCongestion(const std::string& name) {
  RETURN_IF_ERROR(CheckTcpCongestion(name));
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->congestion = name;
    impl_->congestion_changed = true;
  }
  impl_->Wake();
  return absl::OkStatus();
}

std::string TcpEndpoint::congestion() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->congestion_running;
}

// ---- the thread ------------------------------------------------------------

void TcpEndpoint::Impl::Run() {
  std::vector<epoll_event> events(256);
  while (!stop) {
    const int n = epoll_wait(epoll_fd, events.data(), int(events.size()), 50);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd) {
        uint64_t v;
        while (read(wake_fd, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      if (fd == listen_fd) {
        Accept();
        continue;
      }
      auto it = conns.find(fd);
      if (it != conns.end()) OnEvent(it->second.get(), events[i].events);
    }
    TakeCommands();
    const uint64_t now = NowMicros();
    SweepIdle(now);
    Publish(now, false);
  }
  // Shut down: every unfinished flow is cancelled.
  {
    absl::MutexLock lock(&mu);
    for (auto& [peer, f] : pending)
      f->handle->Finish(absl::CancelledError("TCP transport: shut down"));
    pending.clear();
  }
  std::vector<uint32_t> ids;
  for (auto& [id, f] : flows) ids.push_back(id);
  for (uint32_t id : ids) FinishFlow(id, absl::CancelledError("TCP transport: shut down"), nullptr);
  for (auto& [fd, c] : conns) close(fd);
  conns.clear();
  out_conns.clear();
  Publish(NowMicros(), true);
}

void TcpEndpoint::Impl::TakeCommands() {
  std::vector<std::pair<Peer, std::unique_ptr<OutFlow>>> sends;
  std::vector<uint32_t> cancels;
  bool cc_changed = false;
  {
    absl::MutexLock lock(&mu);
    sends.swap(pending);
    cancels.swap(cancelled);
    if (congestion_changed) {
      cc = congestion;
      congestion_changed = false;
      cc_changed = true;
    }
    if (key_changed) {
      auth.SetKey(key_shared);
      key_changed = false;
    }
  }
  if (cc_changed) {
    for (auto& [peer, c] : out_conns) {
      if (SetCongestionOn(c->fd, cc).ok() && !cc.empty()) {
        absl::MutexLock lock(&mu);
        congestion_running = CongestionOf(c->fd);
      }
    }
  }
  for (auto& [to, f] : sends) {
    const uint32_t id = f->flow_id;
    if (flows.size() >= config.send_flows_max) {
      f->handle->Finish(absl::ResourceExhaustedError(
          absl::StrCat("TCP transport: ", flows.size(), " flows already active")));
      continue;
    }
    Conn* c = nullptr;
    if (auto it = out_conns.find(to); it != out_conns.end()) {
      c = it->second;
    } else {
      std::string error;
      c = ConnectTo(to, &error);
      if (c == nullptr) {
        f->handle->Finish(absl::UnavailableError(error));
        continue;
      }
    }
    c->queue.push_back(f.get());
    flow_conn[id] = c;
    flows[id] = std::move(f);
    if (!c->connecting) {
      FillWrites(c);
      if (!FlushWrites(c)) continue;
    }
  }
  for (uint32_t id : cancels) {
    auto it = flow_conn.find(id);
    if (it == flow_conn.end()) continue;
    Conn* c = it->second;
    // Frames already copied go out whole (the stream must stay in step);
    // the rest never does, and the receiver forgets the flow when idle.
    c->queue.erase(std::remove_if(c->queue.begin(), c->queue.end(),
                                  [id](OutFlow* f) { return f->flow_id == id; }),
                   c->queue.end());
    FinishFlow(id, absl::CancelledError("TCP transport: flow cancelled"), nullptr);
  }
}

Conn* TcpEndpoint::Impl::ConnectTo(const Peer& to, std::string* error) {
  if (conns.size() >= kConnectionsMax) {
    *error = "TCP transport: too many connections";
    return nullptr;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = absl::StrCat("TCP transport: socket() failed: ", std::strerror(errno));
    return nullptr;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (absl::Status s = SetCongestionOn(fd, cc); !s.ok()) {
    close(fd);
    *error = std::string(s.message());
    return nullptr;
  }
  sockaddr_in a = to.ToSockaddr();
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    *error = absl::StrCat("TCP transport: connect to ", to.ToString(), ": ", std::strerror(errno));
    close(fd);
    return nullptr;
  }
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->outgoing = true;
  c->connecting = true;
  c->peer = to;
  c->wbuf.resize(kTcpHelloBytes);
  EncodeTcpHello(ntohs(local_port), c->wbuf.data());
  c->reader = std::make_unique<TcpStreamReader>(/*expect_hello=*/false);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  c->want_write = true;
  Conn* raw = c.get();
  conns[fd] = std::move(c);
  out_conns[to] = raw;
  return raw;
}

void TcpEndpoint::Impl::Accept() {
  for (;;) {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    const int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const Peer host{a.sin_addr.s_addr, 0};
    if (receiver == nullptr) {
      ++stats.drops[size_t(DropReason::kUnexpected)];
      close(fd);
      continue;
    }
    if (conns.size() >= kConnectionsMax || !budget.Charge(host, kConnRecvBytes)) {
      ++stats.drops[size_t(DropReason::kOverBudget)];
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->remote_ip = a.sin_addr.s_addr;
    c->host = host;
    c->charged = kConnRecvBytes;
    c->reader = std::make_unique<TcpStreamReader>(/*expect_hello=*/true);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    conns[fd] = std::move(c);
  }
}

void TcpEndpoint::Impl::OnEvent(Conn* c, uint32_t events) {
  const int fd = c->fd;
  if (c->connecting && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      CloseConn(c, absl::StrCat("TCP transport: connect to ", c->peer.ToString(), ": ",
                                std::strerror(err)));
      return;
    }
    c->connecting = false;
    const std::string running = CongestionOf(fd);
    absl::MutexLock lock(&mu);
    congestion_running = running;
  }
  if (events & EPOLLIN) {
    if (!ReadFrames(c)) return;  // closed
  } else if (events & (EPOLLERR | EPOLLHUP)) {
    CloseConn(c, absl::StrCat("TCP transport: connection with ", c->peer.ToString(), " failed"));
    return;
  }
  if (conns.find(fd) == conns.end()) return;
  if (!c->connecting) {
    FillWrites(c);
    FlushWrites(c);
  }
}

void TcpEndpoint::Impl::FillWrites(Conn* c) {
  if (c->woff > 0 && c->woff == c->wbuf.size()) {
    c->wbuf.clear();
    c->woff = 0;
  }
  while (!c->queue.empty() && c->wbuf.size() - c->woff < kWriteChunk) {
    OutFlow* f = c->queue.front();
    const uint32_t total = uint32_t(f->packets.size());
    while (f->next < total && c->wbuf.size() - c->woff < kWriteChunk) {
      const PacketSpan& p = f->packets[f->next];
      Header h;
      h.type = PacketType::kData;
      h.flags = uint8_t((p.critical ? kFlagCritical : 0) | (f->next + 1 == total ? kFlagLast : 0));
      h.payload_bytes = uint16_t(p.floats * sizeof(float));
      h.key_id = auth.key_id();
      h.packet_number = auth.NextPacketNumber();
      h.sender = auth.sender();
      h.flow_id = f->flow_id;
      h.seq = uint32_t(f->next);
      h.total_packets = total;
      h.chunk_id = p.chunk_id;
      h.chunk_offset = p.chunk_offset;
      h.iteration = f->iteration;
      h.plan = f->plan;
      h.samples = f->samples;
      const size_t at = c->wbuf.size();
      c->wbuf.resize(at + kHeaderBytes + h.payload_bytes);
      uint8_t* head = c->wbuf.data() + at;
      EncodeHeader(h, head);
      std::memcpy(head + kHeaderBytes, p.data, h.payload_bytes);
      auth.Seal(self, head, head + kHeaderBytes, h.payload_bytes);
      ++f->next;
      ++stats.data_packets_sent;
    }
    if (f->next < total) break;
    c->queue.pop_front();  // all copied; the handle waits for the receiver's STOP
  }
}

bool TcpEndpoint::Impl::FlushWrites(Conn* c) {
  while (c->woff < c->wbuf.size()) {
    const ssize_t n = send(c->fd, c->wbuf.data() + c->woff, c->wbuf.size() - c->woff,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->woff += size_t(n);
      stats.bytes_sent += uint64_t(n);
      if (c->woff == c->wbuf.size()) FillWrites(c);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    CloseConn(
        c, absl::StrCat("TCP transport: send to ", c->peer.ToString(), ": ", std::strerror(errno)));
    return false;
  }
  if (c->woff == c->wbuf.size()) {
    c->wbuf.clear();
    c->woff = 0;
  }
  UpdateInterest(c);
  return true;
}

void TcpEndpoint::Impl::UpdateInterest(Conn* c) {
  const bool want = c->connecting || c->woff < c->wbuf.size() || !c->queue.empty();
  if (want == c->want_write) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
  ev.data.fd = c->fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_write = want;
}

bool TcpEndpoint::Impl::ReadFrames(Conn* c) {
  size_t taken = 0;
  while (taken < kReadPerWake) {
    TcpStreamReader& r = *c->reader;
    const ssize_t n = recv(c->fd, r.space(), r.space_left(), 0);
    if (n == 0) {
      CloseConn(c, absl::StrCat("TCP transport: ", c->peer.ToString(), " closed the connection"));
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      CloseConn(c, absl::StrCat("TCP transport: receive from ", c->peer.ToString(), ": ",
                                std::strerror(errno)));
      return false;
    }
    taken += size_t(n);
    stats.bytes_received += uint64_t(n);
    r.Commit(size_t(n));
    for (;;) {
      const uint8_t* data = nullptr;
      size_t len = 0;
      const TcpStreamReader::Item item = r.Next(&data, &len);
      if (item == TcpStreamReader::Item::kNeedMore) break;
      if (item == TcpStreamReader::Item::kBadMagic || item == TcpStreamReader::Item::kBadVersion) {
        ++stats.drops[size_t(item == TcpStreamReader::Item::kBadMagic ? DropReason::kBadMagic
                                                                      : DropReason::kBadVersion)];
        CloseConn(c, "TCP transport: bad hello");
        return false;
      }
      if (item == TcpStreamReader::Item::kHello) {
        c->peer.ip = c->remote_ip;
        c->peer.port = htons(r.hello_port());
        continue;
      }
      if (!HandleFrame(c, data, len)) return false;
    }
    r.Compact();
  }
  return true;
}

bool TcpEndpoint::Impl::HandleFrame(Conn* c, const uint8_t* data, size_t len) {
  ++stats.datagrams_received;
  Packet p;
  const DropReason bad = Decode(data, len, &p);
  if (bad != DropReason::kNone) {
    ++stats.drops[size_t(bad)];
    CloseConn(c, absl::StrCat("TCP transport: bad frame from ", c->peer.ToString(), " (",
                              DropReasonName(bad), ")"));
    return false;
  }
  const Header& h = p.header;
  // Before anything else reads it; the stream stays in step either way.
  if (DropReason why = auth.Verify(c->peer, h, data, p.payload, h.payload_bytes);
      why != DropReason::kNone) {
    ++stats.drops[size_t(why)];
    return true;
  }
  if (c->outgoing) {
    // Only STOPs come back on a connection we opened.
    if (h.type != PacketType::kStop) {
      ++stats.drops[size_t(DropReason::kBadType)];
      return true;
    }
    auto fc = flow_conn.find(h.flow_id);
    if (fc == flow_conn.end() || fc->second != c) {
      ++stats.drops[size_t(DropReason::kDuplicate)];
      return true;
    }
    const StopInfo info = DecodeStop(p);
    ++stats.acks_received;
    FinishFlow(h.flow_id, absl::OkStatus(), &info);
    return true;
  }
  if (h.type != PacketType::kData) {
    ++stats.drops[size_t(DropReason::kBadType)];
    return true;
  }
  auto it = c->flows.find(h.flow_id);
  if (it == c->flows.end()) {
    // Bounded before anything is allocated from the header (recv_budget.h).
    // A refused flow leaves no state: its later frames are asked about again.
    InFlow f;
    if (DropReason why = AdmitFlow(
            budget, c->host, c->flows.size(), config.recv_flows_max, h,
            [&] { return receiver->AcceptFlow(c->peer, h); }, &f.charged);
        why != DropReason::kNone) {
      ++stats.drops[size_t(why)];
      return true;
    }
    f.total = h.total_packets;
    f.iteration = h.iteration;
    f.plan = h.plan;
    f.samples = h.samples;
    f.first_us = NowMicros();
    f.bitmap.assign(RecvBitmapWords(h.total_packets), 0);
    it = c->flows.emplace(h.flow_id, std::move(f)).first;
  }
  InFlow& f = it->second;
  f.last_us = NowMicros();
  if (h.total_packets != f.total || h.iteration != f.iteration || h.plan != f.plan ||
      h.samples != f.samples) {
    ++stats.drops[size_t(DropReason::kBadSequence)];
    return true;
  }
  uint64_t& word = f.bitmap[h.seq / 64];
  const uint64_t bit = uint64_t{1} << (h.seq % 64);
  if (word & bit) {
    ++stats.drops[size_t(DropReason::kDuplicate)];
    return true;
  }
  word |= bit;
  receiver->OnData(c->peer, h, p.payload);
  f.bytes += h.payload_bytes;
  f.arrivals.Add(f.last_us, kHeaderBytes + h.payload_bytes);
  if (++f.received == (f.total + 1) / 2) f.mid_us = f.last_us;
  if (f.received < f.total) return true;
  FlowResult r;
  r.flow_id = h.flow_id;
  r.iteration = f.iteration;
  r.plan = f.plan;
  r.samples = f.samples;
  r.total_packets = f.total;
  r.received = f.received;
  r.bytes = f.bytes;
  r.first_us = f.first_us;
  r.mid_us = f.mid_us;
  r.last_us = f.last_us;
  r.closed_us = NowMicros();
  r.arrivals = std::move(f.arrivals);
  EraseInFlow(c, it);
  ++stats.flows_received;
  // STOP (complete) back to the sender: its handle finishes on delivery.
  Header stop;
  stop.type = PacketType::kStop;
  stop.payload_bytes = kStopPayloadBytes;
  stop.key_id = auth.key_id();
  stop.packet_number = auth.NextPacketNumber();
  stop.sender = auth.sender();
  stop.flow_id = h.flow_id;
  stop.total_packets = r.total_packets;
  stop.iteration = r.iteration;
  const size_t at = c->wbuf.size();
  c->wbuf.resize(at + kHeaderBytes + kStopPayloadBytes);
  uint8_t* head = c->wbuf.data() + at;
  EncodeHeader(stop, head);
  EncodeStop(StopInfo{CloseReason::kComplete, r.received}, head + kHeaderBytes);
  auth.Seal(self, head, head + kHeaderBytes, kStopPayloadBytes);
  ++stats.acks_sent;
  receiver->OnFlowDone(c->peer, r);
  return FlushWrites(c);
}

void TcpEndpoint::Impl::FinishFlow(uint32_t flow_id, absl::Status s, const StopInfo* stop) {
  auto it = flows.find(flow_id);
  if (it == flows.end()) return;
  std::shared_ptr<SendHandle> handle = it->second->handle;
  {
    absl::MutexLock lock(&handle->mu_);
    handle->timing_.done_us = NowMicros();
    if (stop != nullptr) {
      handle->close_reason_ = stop->reason;
      handle->receiver_packets_ = stop->received;
    }
  }
  if (s.ok()) ++stats.flows_sent;
  flows.erase(it);
  flow_conn.erase(flow_id);
  handle->Finish(std::move(s));
}

void TcpEndpoint::Impl::CloseConn(Conn* c, const std::string& why) {
  const int fd = c->fd;
  if (c->outgoing) {
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
      retrans_closed += info.tcpi_total_retrans;
    }
    std::vector<uint32_t> lost;
    for (auto& [id, conn] : flow_conn) {
      if (conn == c) lost.push_back(id);
    }
    for (uint32_t id : lost) FinishFlow(id, absl::UnavailableError(why), nullptr);
    out_conns.erase(c->peer);
  }
  // An incoming connection's half-received flows are gone with it; their
  // senders see the failure on their side.
  for (auto it = c->flows.begin(); it != c->flows.end();) EraseInFlow(c, it++);
  budget.Release(c->host, c->charged);
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  conns.erase(fd);
}

void TcpEndpoint::Impl::SweepIdle(uint64_t now) {
  if (now - last_sweep_us < 1'000'000) return;
  last_sweep_us = now;
  const uint64_t idle = uint64_t(config.recv_flow_idle_ms) * 1000;
  for (auto& [fd, c] : conns) {
    for (auto it = c->flows.begin(); it != c->flows.end();) {
      if (now - it->second.last_us > idle) {
        EraseInFlow(c.get(), it++);
      } else {
        ++it;
      }
    }
  }
}

void TcpEndpoint::Impl::EraseInFlow(Conn* c, absl::flat_hash_map<uint32_t, InFlow>::iterator it) {
  budget.Release(c->host, it->second.charged);
  c->flows.erase(it);
}

void TcpEndpoint::Impl::Publish(uint64_t now, bool force) {
  if (!force && now - last_publish_us < 2000) return;
  last_publish_us = now;
  stats.peers.clear();
  uint64_t retrans = retrans_closed;
  for (auto& [peer, c] : out_conns) {
    if (c->connecting) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    retrans += info.tcpi_total_retrans;
    PeerEstimate e;
    e.peer = peer;
    e.btlbw_bps = info.tcpi_delivery_rate * 8;
    e.rtprop_us = info.tcpi_min_rtt;
    e.pacing_rate_bps = info.tcpi_pacing_rate * 8;
    e.cwnd_bytes = uint64_t(info.tcpi_snd_cwnd) * info.tcpi_snd_mss;
    stats.peers.push_back(e);
  }
  stats.retransmissions = std::max(stats.retransmissions, retrans);
  stats.recv_state_bytes = budget.total();
  absl::MutexLock lock(&mu);
  published = stats;
}

// ---- choosing a transport --------------------------------------------------

TransportKind TransportKindFor(const std::string& job_transport) {
  return job_transport == "tcp" ? TransportKind::kTcp : TransportKind::kUdp;
}

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(TransportKind kind,
                                                           const EndpointConfig& config,
                                                           Receiver* receiver) {
  if (kind == TransportKind::kTcp) {
    ASSIGN_OR_RETURN(std::unique_ptr<TcpEndpoint> t, TcpEndpoint::Create(config, receiver));
    return std::unique_ptr<Transport>(std::move(t));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> e, Endpoint::Create(config, receiver));
  return std::unique_ptr<Transport>(std::move(e));
}

}  // namespace transport
}  // namespace hetps
