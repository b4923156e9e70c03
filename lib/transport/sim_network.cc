#include "lib/transport/sim_network.h"

#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/splitmix.h"

namespace hetps {
namespace transport {
namespace {

uint64_t Next(uint64_t* state) { return Mix64(*state += SplitMix64::kGamma); }

double Unit(uint64_t* state) { return double(Next(state) >> 11) * (1.0 / 9007199254740992.0); }

uint64_t PeerBits(const Peer& p) { return (uint64_t(p.ip) << 16) | p.port; }

struct Msg {
  uint64_t arrival_us;
  uint64_t order;
  Peer from;
  std::vector<uint8_t> bytes;
  bool operator>(const Msg& o) const {
    return arrival_us != o.arrival_us ? arrival_us > o.arrival_us : order > o.order;
  }
};

}  // namespace

// What is queued for one address, under its own lock.
struct SimSocket::Inbox {
  using Queue = std::priority_queue<Msg, std::vector<Msg>, std::greater<Msg>>;
  absl::Mutex mu;
  Queue queue ABSL_GUARDED_BY(mu);
  int efd ABSL_GUARDED_BY(mu) = -1;  // the socket's eventfd, once asked for
  // SetDownlink: datagrams at the downlink by when their link delivers
  // them, taken through it in that order once the clock is there.
  Queue at_downlink ABSL_GUARDED_BY(mu);
  uint64_t downlink_bps ABSL_GUARDED_BY(mu) = 0;
  uint64_t downlink_queue_max ABSL_GUARDED_BY(mu) = 0;
  uint64_t downlink_busy_until_us ABSL_GUARDED_BY(mu) = 0;

  // Moves what reached the downlink by `now` through it into `queue`;
  // returns how many it dropped at the tail.
  uint64_t Settle(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    uint64_t dropped = 0;
    while (!at_downlink.empty() && at_downlink.top().arrival_us <= now) {
      Msg m = std::move(const_cast<Msg&>(at_downlink.top()));
      at_downlink.pop();
      const uint64_t start = std::max(m.arrival_us, downlink_busy_until_us);
      if ((start - m.arrival_us) * downlink_bps / 8'000'000 > downlink_queue_max) {
        ++dropped;
        continue;
      }
      downlink_busy_until_us =
          start + (uint64_t(m.bytes.size()) * 8'000'000 + downlink_bps - 1) / downlink_bps;
      m.arrival_us = downlink_busy_until_us;
      queue.push(std::move(m));
    }
    return dropped;
  }
  uint64_t NextEvent() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    uint64_t next = queue.empty() ? UINT64_MAX : queue.top().arrival_us;
    if (!at_downlink.empty()) next = std::min(next, at_downlink.top().arrival_us);
    return next;
  }

  ~Inbox() {
    absl::MutexLock lock(&mu);
    if (efd >= 0) close(efd);
  }
};

SimNetwork::SimNetwork(const Clock* clock, uint64_t seed, LinkImpairment defaults)
    : clock_(clock), seed_(seed), defaults_(defaults) {}

SimNetwork::~SimNetwork() = default;

absl::StatusOr<std::unique_ptr<SimSocket>> SimNetwork::Open(Peer addr, size_t batch_max) {
  if (batch_max == 0) return absl::InvalidArgumentError("sim socket: batch_max is 0");
  absl::MutexLock lock(&mu_);
  if (addr.port == 0) {
    for (int tries = 0; tries < 65536; ++tries) {
      const uint16_t port = next_port_++;
      if (port == 0) continue;
      if (!inboxes_.contains(Peer{addr.ip, htons(port)})) {
        addr.port = htons(port);
        break;
      }
    }
    if (addr.port == 0) return absl::ResourceExhaustedError("sim network: no free port");
  }
  if (inboxes_.contains(addr)) {
    return absl::UnavailableError(absl::StrCat("sim network: ", addr.ToString(), " is taken"));
  }
  auto s = std::unique_ptr<SimSocket>(new SimSocket(this, addr, batch_max));
  inboxes_[addr] = s->inbox_;
  return s;
}

void SimNetwork::Close(const Peer& addr) {
  absl::MutexLock lock(&mu_);
  inboxes_.erase(addr);
}

void SimNetwork::SetLink(const Peer& from, const Peer& to, const LinkImpairment& imp) {
  absl::MutexLock lock(&mu_);
  links_[{from, to}] = imp;
}

void SimNetwork::SetEgress(const Peer& from, const LinkImpairment& imp) {
  absl::MutexLock lock(&mu_);
  egress_[from] = imp;
}

void SimNetwork::SetUplink(const Peer& from, uint64_t rate_bps, uint64_t queue_bytes_max) {
  absl::MutexLock lock(&mu_);
  uplinks_[from] = Uplink{rate_bps, queue_bytes_max};
}

void SimNetwork::SetDownlink(const Peer& to, uint64_t rate_bps, uint64_t queue_bytes_max) {
  std::shared_ptr<Inbox> in;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = inboxes_.find(to); it != inboxes_.end()) in = it->second;
  }
  if (in == nullptr) return;
  absl::MutexLock lock(&in->mu);
  in->downlink_bps = rate_bps;
  in->downlink_queue_max = queue_bytes_max;
}

LinkImpairment SimNetwork::ImpairmentFor(const Peer& from, const Peer& to) const {
  absl::ReaderMutexLock lock(&mu_);
  if (auto it = links_.find({from, to}); it != links_.end()) return it->second;
  if (auto it = egress_.find(from); it != egress_.end()) return it->second;
  return defaults_;
}

SimNetwork::LinkState SimNetwork::NewLink(const Peer& from, const Peer& to) const {
  LinkState s;
  s.rng = Mix64(seed_ ^ Mix64(PeerBits(from)) ^ Mix64(~PeerBits(to)));
  return s;
}

void SimNetwork::Wake(std::vector<int>* fds) {
  const uint64_t one = 1;
  for (int fd : *fds) (void)!write(fd, &one, sizeof(one));
  fds->clear();
}

void SimNetwork::Route(const Peer& from, const Peer& to, LinkState& link,
                       std::vector<uint8_t> bytes, std::vector<int>* wake,
                       uint64_t* uplink_busy_us) {
  ++counters_.sent;
  const LinkImpairment imp = ImpairmentFor(from, to);
  Uplink up;
  if (uplink_busy_us != nullptr) {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = uplinks_.find(from); it != uplinks_.end()) up = it->second;
  }
  // Every datagram draws the same number of values, whatever its fate, so
  // one datagram's fate never shifts the next one's.
  const double lose = Unit(&link.rng);
  const double dup = Unit(&link.rng);
  const uint64_t jitter1 = Next(&link.rng);
  const uint64_t jitter2 = Next(&link.rng);
  std::shared_ptr<Inbox> in;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = inboxes_.find(to); it != inboxes_.end()) in = it->second;
  }
  if (in == nullptr) {
    ++counters_.unroutable;
    return;
  }
  uint64_t now = clock_->MonotonicMicros();
  if (up.rate_bps > 0) {
    // The uplink first (it carries what its link then loses): the
    // datagram enters its link when it leaves the uplink.
    const uint64_t start = std::max(now, *uplink_busy_us);
    if ((start - now) * up.rate_bps / 8'000'000 > up.queue_bytes_max) {
      ++counters_.queue_dropped;
      ++counters_.uplink_dropped;
      return;
    }
    *uplink_busy_us = start + (uint64_t(bytes.size()) * 8'000'000 + up.rate_bps - 1) / up.rate_bps;
    now = *uplink_busy_us;
  }
  if (lose < imp.loss) {
    ++counters_.lost;
    return;
  }
  uint64_t leaves = now;
  if (imp.rate_bps > 0) {
    const uint64_t start = std::max(now, link.busy_until_us);
    const uint64_t queued_bytes = (start - now) * imp.rate_bps / 8'000'000;
    if (queued_bytes > imp.queue_bytes_max) {
      ++counters_.queue_dropped;
      return;
    }
    link.busy_until_us =
        start + (uint64_t(bytes.size()) * 8'000'000 + imp.rate_bps - 1) / imp.rate_bps;
    leaves = link.busy_until_us;
  }
  const uint64_t base = leaves + imp.delay_us;
  absl::MutexLock lock(&in->mu);
  Inbox::Queue& q = in->downlink_bps > 0 ? in->at_downlink : in->queue;
  if (dup < imp.duplicate) {
    ++counters_.duplicated;
    q.push(Msg{base + (imp.jitter_us > 0 ? jitter2 % imp.jitter_us : 0), order_++, from, bytes});
  }
  q.push(Msg{base + (imp.jitter_us > 0 ? jitter1 % imp.jitter_us : 0), order_++, from,
             std::move(bytes)});
  // Woken once per batch, after every lock is released.
  if (in->efd >= 0 && std::find(wake->begin(), wake->end(), in->efd) == wake->end()) {
    wake->push_back(in->efd);
  }
}

void SimNetwork::Inject(const Peer& from, const Peer& to, const uint8_t* data, size_t len) {
  std::vector<int> wake;
  {
    absl::MutexLock lock(&inject_mu_);
    auto [it, fresh] = inject_links_.try_emplace({from, to});
    if (fresh) it->second = NewLink(from, to);
    Route(from, to, it->second, std::vector<uint8_t>(data, data + len), &wake);
  }
  Wake(&wake);
}

uint64_t SimNetwork::next_arrival_us() const {
  std::vector<std::shared_ptr<Inbox>> all;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [addr, in] : inboxes_) all.push_back(in);
  }
  uint64_t next = UINT64_MAX;
  for (const auto& in : all) {
    absl::MutexLock lock(&in->mu);
    next = std::min(next, in->NextEvent());
  }
  return next;
}

SimStats SimNetwork::stats() const {
  SimStats s;
  s.sent = counters_.sent;
  s.delivered = counters_.delivered;
  s.lost = counters_.lost;
  s.queue_dropped = counters_.queue_dropped;
  s.uplink_dropped = counters_.uplink_dropped;
  s.downlink_dropped = counters_.downlink_dropped;
  s.duplicated = counters_.duplicated;
  s.unroutable = counters_.unroutable;
  return s;
}

// ---- SimSocket ---------------------------------------------------------------

SimSocket::SimSocket(SimNetwork* net, Peer local, size_t batch_max)
    : net_(net), local_(local), batch_max_(batch_max), inbox_(std::make_shared<Inbox>()) {}

SimSocket::~SimSocket() { net_->Close(local_); }

int SimSocket::SendBatch(const OutDatagram* d, size_t n) {
  std::vector<int> wake;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> bytes(d[i].head_len + d[i].body_len);
    if (d[i].head_len > 0) std::memcpy(bytes.data(), d[i].head, d[i].head_len);
    if (d[i].body_len > 0) std::memcpy(bytes.data() + d[i].head_len, d[i].body, d[i].body_len);
    auto [it, fresh] = links_.try_emplace(d[i].to);
    if (fresh) it->second = net_->NewLink(local_, d[i].to);
    net_->Route(local_, d[i].to, it->second, std::move(bytes), &wake, &uplink_busy_until_us_);
  }
  SimNetwork::Wake(&wake);
  return static_cast<int>(n);
}

int SimSocket::RecvBatch(std::vector<InDatagram>* out) {
  out->clear();
  held_.clear();
  held_from_.clear();
  held_age_.clear();
  const uint64_t now = net_->clock_->MonotonicMicros();
  {
    absl::MutexLock lock(&inbox_->mu);
    const uint64_t dropped = inbox_->Settle(now);
    net_->counters_.queue_dropped += dropped;
    net_->counters_.downlink_dropped += dropped;
    if (inbox_->efd >= 0) {
      uint64_t v;  // drained: readable again only when something new is queued
      (void)!read(inbox_->efd, &v, sizeof(v));
    }
    auto& q = inbox_->queue;
    while (!q.empty() && q.top().arrival_us <= now && held_.size() < batch_max_) {
      Msg m = std::move(const_cast<Msg&>(q.top()));
      q.pop();
      held_from_.push_back(m.from);
      held_age_.push_back(now - m.arrival_us);
      held_.push_back(std::move(m.bytes));
    }
  }
  net_->counters_.delivered += held_.size();
  for (size_t i = 0; i < held_.size(); ++i) {
    out->push_back(
        InDatagram{held_from_[i], held_[i].data(), held_[i].size(), false, held_age_[i]});
  }
  return static_cast<int>(held_.size());
}

int SimSocket::fd() const {
  absl::MutexLock lock(&inbox_->mu);
  if (inbox_->efd < 0) inbox_->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return inbox_->efd;
}

uint64_t SimSocket::next_arrival_us() const {
  absl::MutexLock lock(&inbox_->mu);
  return inbox_->NextEvent();
}

}  // namespace transport
}  // namespace hetps
