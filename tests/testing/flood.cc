#include "tests/testing/flood.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/splitmix.h"
#include "lib/transport/packet_auth.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace testing {

using transport::Peer;

// ---- Capture ------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Capture>> Capture::Start(std::vector<uint16_t> ports, size_t max) {
  const int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("capture: AF_PACKET socket: ", std::strerror(errno), " (needs CAP_NET_RAW)"));
  }
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  if (bind(fd, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("capture: bind to lo: ", std::strerror(errno)));
  }
  timeval tv{0, 100'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  auto c = std::unique_ptr<Capture>(new Capture());
  c->fd_ = fd;
  c->ports_ = std::move(ports);
  c->max_ = max;
  c->thread_ = std::thread([p = c.get()] { p->Run(); });
  return c;
}

Capture::~Capture() { Stop(); }

void Capture::Run() {
  std::vector<uint8_t> buf(1 << 16);
  while (!stop_.load()) {
    sockaddr_ll from{};
    socklen_t len = sizeof(from);
    const ssize_t n =
        recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // loopback shows each packet twice
    if (size_t(n) < sizeof(iphdr)) continue;
    const iphdr* ip = reinterpret_cast<const iphdr*>(buf.data());
    const size_t ihl = size_t(ip->ihl) * 4;
    if (ip->protocol != IPPROTO_UDP || size_t(n) < ihl + sizeof(udphdr)) continue;
    const udphdr* udp = reinterpret_cast<const udphdr*>(buf.data() + ihl);
    if (std::find(ports_.begin(), ports_.end(), udp->dest) == ports_.end()) continue;
    const size_t payload = std::min<size_t>(ntohs(udp->len), size_t(n) - ihl) - sizeof(udphdr);
    const uint8_t* data = buf.data() + ihl + sizeof(udphdr);
    // One whole v2 datagram (GSO super-packets are skipped).
    transport::Packet p;
    if (transport::Decode(data, payload, &p) != transport::DropReason::kNone) continue;
    absl::MutexLock lock(&mu_);
    if (got_.size() >= max_) continue;
    got_.push_back(Captured{Peer{ip->saddr, udp->source}, Peer{ip->daddr, udp->dest},
                            std::vector<uint8_t>(data, data + payload)});
  }
}

std::vector<Captured> Capture::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  absl::MutexLock lock(&mu_);
  return got_;
}

// ---- Flood --------------------------------------------------------------------

namespace {

struct Rng {
  SplitMix64 s;
  uint64_t Next() { return s.Next(); }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
};

std::vector<uint8_t> RandomBytes(Rng& r, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(r.Next());
  return v;
}

transport::Header RandomHeader(Rng& r, uint8_t key_id) {
  transport::Header h;
  h.type = transport::PacketType(1 + r.Below(3));
  h.flags = uint8_t(r.Next()) & transport::kFlagsKnown;
  h.key_id = r.Below(4) == 0 ? uint8_t(r.Next()) : key_id;
  h.sender = r.Next();
  h.packet_number = r.Next();
  h.total_packets = uint32_t(r.Next());
  h.seq = h.total_packets > 0 ? uint32_t(r.Below(h.total_packets)) : 0;
  h.chunk_id = uint32_t(r.Next());
  h.chunk_offset = uint32_t(r.Next());
  h.iteration = uint32_t(r.Below(5000));
  h.rtprop_us = uint32_t(r.Next());
  h.btlbw_kbps = uint32_t(r.Next());
  return h;
}

std::vector<uint8_t> Encoded(const transport::Header& h, Rng& r) {
  std::vector<uint8_t> d(transport::kHeaderBytes + h.payload_bytes);
  transport::EncodeHeader(h, d.data());
  for (size_t i = transport::kTagOffset; i < d.size(); ++i) d[i] = uint8_t(r.Next());
  return d;
}

// One IPv4/UDP packet with the given source, for a raw socket.
std::vector<uint8_t> Spoofed(const Peer& from, const Peer& to, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> pkt(sizeof(iphdr) + sizeof(udphdr) + body.size());
  iphdr* ip = reinterpret_cast<iphdr*>(pkt.data());
  ip->version = 4;
  ip->ihl = 5;
  ip->ttl = 64;
  ip->protocol = IPPROTO_UDP;
  ip->tot_len = htons(uint16_t(pkt.size()));
  ip->saddr = from.ip;
  ip->daddr = to.ip;
  udphdr* udp = reinterpret_cast<udphdr*>(pkt.data() + sizeof(iphdr));
  udp->source = from.port;
  udp->dest = to.port;
  udp->len = htons(uint16_t(sizeof(udphdr) + body.size()));
  udp->check = 0;  // optional over IPv4
  std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr), body.data(), body.size());
  return pkt;
}

}  // namespace

absl::StatusOr<FloodCounts> Flood(const FloodSpec& spec) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("flood: socket");
  sockaddr_in self{};
  self.sin_family = AF_INET;
  self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(self));
  socklen_t sl = sizeof(self);
  getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl);
  const Peer me = Peer::FromSockaddr(self);
  const int raw = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);  // -1: not allowed

  Rng rng{SplitMix64{spec.seed}};
  transport::DataKey wrong;
  wrong.id = spec.key_id;
  for (auto& b : wrong.bytes) b = uint8_t(rng.Next());
  wrong.set = true;
  transport::PacketAuth forger(true, [&] { return rng.Next(); });
  forger.SetKey(wrong);

  FloodCounts sent;
  const sockaddr_in to = spec.to.ToSockaddr();
  constexpr size_t kBatch = 64;
  std::vector<std::vector<uint8_t>> bufs(kBatch);
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> msgs(kBatch);
  const auto start = std::chrono::steady_clock::now();
  uint64_t done = 0;
  const uint64_t kinds = 6;
  for (uint64_t round = 0; round < spec.per_kind * kinds; round += kBatch) {
    size_t n = 0;
    for (size_t i = 0; i < kBatch; ++i) {
      const uint64_t kind = (round + i) % kinds;
      std::vector<uint8_t>& b = bufs[n];
      if (kind == 0) {
        b = RandomBytes(rng, rng.Below(1500));
        ++sent.random_bytes;
      } else if (kind == 1) {
        transport::Header h = RandomHeader(rng, spec.key_id);
        h.payload_bytes = uint16_t(rng.Below(350) * 4);
        b = Encoded(h, rng);
        ++sent.random_headers;
      } else if (kind == 2) {
        transport::Header h = RandomHeader(rng, spec.key_id);
        h.type = transport::PacketType::kData;
        h.flags = 0;
        h.total_packets = 1 + uint32_t(rng.Below(1000));
        h.seq = uint32_t(rng.Below(h.total_packets));
        h.packet_number = forger.NextPacketNumber();
        h.sender = forger.sender();
        h.key_id = spec.key_id;
        h.payload_bytes = 4 * (1 + uint16_t(rng.Below(300)));
        b.assign(transport::kHeaderBytes + h.payload_bytes, 0);
        transport::EncodeHeader(h, b.data());
        forger.Seal(me, b.data(), b.data() + transport::kHeaderBytes, h.payload_bytes);
        ++sent.wrong_key;
      } else if (kind == 3) {
        transport::Header h = RandomHeader(rng, spec.key_id);
        h.type = transport::PacketType::kData;
        h.flags = 0;
        h.total_packets = transport::kFlowPacketsMax + 1 +
                          uint32_t(rng.Below(0xFFFFFFFFu - transport::kFlowPacketsMax));
        h.seq = uint32_t(rng.Below(h.total_packets));
        h.payload_bytes = 16;
        b = Encoded(h, rng);
        ++sent.impossible_size;
      } else if (spec.replays.empty()) {
        continue;
      } else {
        const Captured& c = spec.replays[rng.Below(spec.replays.size())];
        if (kind == 4 && raw >= 0) {
          const std::vector<uint8_t> pkt = Spoofed(c.from, spec.to, c.bytes);
          sockaddr_in dst = spec.to.ToSockaddr();
          if (sendto(raw, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&dst),
                     sizeof(dst)) == ssize_t(pkt.size())) {
            ++sent.replay_same_source;
          }
          continue;
        }
        b = c.bytes;
        ++sent.replay_other_source;
      }
      iov[n] = {b.data(), b.size()};
      msgs[n] = {};
      msgs[n].msg_hdr.msg_name = const_cast<sockaddr_in*>(&to);
      msgs[n].msg_hdr.msg_namelen = sizeof(to);
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
      ++n;
    }
    size_t off = 0;
    while (off < n) {
      const int k = sendmmsg(fd, msgs.data() + off, unsigned(n - off), 0);
      if (k <= 0) break;
      off += size_t(k);
    }
    done += kBatch;
    // Pace: `done` datagrams may not leave sooner than done / rate.
    const auto due = start + std::chrono::microseconds(done * 1'000'000 / spec.rate_per_s);
    std::this_thread::sleep_until(due);
  }
  close(fd);
  if (raw >= 0) close(raw);
  return sent;
}

uint64_t KernelUdpDrops(uint16_t port) {
  std::ifstream in("/proc/net/udp");
  std::string line;
  std::getline(in, line);  // header
  uint64_t drops = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode, ref, ptr, d;
    f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode >> ref >>
        ptr >> d;
    const size_t colon = local.find(':');
    if (colon == std::string::npos) continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) == ntohs(port)) {
      drops += std::stoull(d.empty() ? "0" : d);
    }
  }
  return drops;
}

uint64_t RssBytes(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace testing
}  // namespace hetps
