#include "lib/transport/udp_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

// Debian 12's glibc has both; older headers may not.
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace hetps {
namespace transport {

absl::StatusOr<std::unique_ptr<UdpSocket>> UdpSocket::Create(const HostPort& addr,
                                                             const UdpSocketOptions& options) {
  auto peer = ResolvePeer(addr);
  if (!peer.ok()) return peer.status();
  if (options.batch_max == 0) return absl::InvalidArgumentError("udp socket: batch_max is 0");
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  auto s = std::unique_ptr<UdpSocket>(new UdpSocket(fd, options));
  const int size = static_cast<int>(options.buffer_bytes);
  // FORCE variants exceed net.core.*mem_max when we are root; fall back.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  }
  if (s->gro_) {
    const int one = 1;
    if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) s->gro_ = false;
  }
  if (s->rx_timestamps_) {
    const int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) != 0) {
      s->rx_timestamps_ = false;
    }
  }
  sockaddr_in a = peer->ToSockaddr();
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind data plane to ", addr.ToString(), ": ", strerror(errno)));
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  s->local_ = Peer::FromSockaddr(a);
  return s;
}

namespace {

// Room for UDP_GRO's segment size and SO_TIMESTAMPNS's receive time.
constexpr size_t kControlSlot = CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(timespec));
// A coalesced (GRO) message is at most 64 KiB; one spare byte detects a
// datagram longer than the slot.
constexpr size_t kGroBytesMax = 65536;

uint64_t Nanos(const timespec& ts) {
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

}  // namespace

UdpSocket::UdpSocket(int fd, const UdpSocketOptions& o)
    : fd_(fd),
      batch_max_(o.batch_max),
      slot_bytes_((o.gro ? std::max(o.datagram_bytes_max, kGroBytesMax) : o.datagram_bytes_max) +
                  1),
      datagram_bytes_max_(o.datagram_bytes_max),
      gso_(o.gso),
      gro_(o.gro),
      rx_timestamps_(o.rx_timestamps),
      rx_buf_(batch_max_ * slot_bytes_),
      rx_msgs_(batch_max_),
      rx_iov_(batch_max_),
      rx_addr_(batch_max_),
      rx_control_(batch_max_ * kControlSlot),
      tx_msgs_(batch_max_),
      tx_iov_(2 * batch_max_ * (o.gso ? kGsoSegmentsMax : 1)),
      tx_addr_(batch_max_),
      tx_control_(batch_max_ * kControlSlot),
      tx_count_(batch_max_) {}

UdpSocket::~UdpSocket() { close(fd_); }

int UdpSocket::SendBatch(const OutDatagram* d, size_t n) {
  size_t msgs = 0;
  size_t iov = 0;
  for (size_t i = 0; i < n && msgs < batch_max_;) {
    const size_t len = d[i].head_len + d[i].body_len;
    size_t run = 1;
    if (gso_) {
      size_t bytes = len;
      while (i + run < n && run < kGsoSegmentsMax && d[i + run].to == d[i].to) {
        const size_t l = d[i + run].head_len + d[i + run].body_len;
        if (l > len || l == 0 || bytes + l > kGsoBytesMax) break;
        bytes += l;
        ++run;
        if (l < len) break;  // only the last segment may be shorter
      }
    }
    tx_addr_[msgs] = d[i].to.ToSockaddr();
    msghdr& h = tx_msgs_[msgs].msg_hdr;
    h = msghdr{};
    h.msg_name = &tx_addr_[msgs];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &tx_iov_[iov];
    for (size_t k = i; k < i + run; ++k) {
      tx_iov_[iov++] = iovec{const_cast<uint8_t*>(d[k].head), d[k].head_len};
      if (d[k].body_len > 0) tx_iov_[iov++] = iovec{const_cast<uint8_t*>(d[k].body), d[k].body_len};
    }
    h.msg_iovlen = &tx_iov_[iov] - h.msg_iov;
    if (run > 1) {
      h.msg_control = &tx_control_[msgs * kControlSlot];
      h.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = static_cast<uint16_t>(len);
      std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    }
    tx_count_[msgs++] = static_cast<uint32_t>(run);
    i += run;
  }
  if (msgs == 0) return 0;
  const int sent = sendmmsg(fd_, tx_msgs_.data(), static_cast<unsigned>(msgs), MSG_DONTWAIT);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return 0;
    // A kernel or device without UDP GSO for this route (EIO), or segments
    // over the path MTU (EINVAL): send datagram by datagram from now on.
    if (gso_ && tx_count_[0] > 1 && (errno == EIO || errno == EINVAL)) {
      gso_ = false;
      return SendBatch(d, n);
    }
    // A peer's ICMP unreachable surfaces as ECONNREFUSED on the next call;
    // the datagrams are gone either way: report them as sent, loss recovery
    // handles the rest.
    if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
      return static_cast<int>(tx_count_[0]);
    }
    return -errno;
  }
  int datagrams = 0;
  for (int m = 0; m < sent; ++m) datagrams += static_cast<int>(tx_count_[m]);
  return datagrams;
}

int UdpSocket::RecvBatch(std::vector<InDatagram>* out) {
  out->clear();
  for (size_t i = 0; i < batch_max_; ++i) {
    rx_iov_[i].iov_base = rx_buf_.data() + i * slot_bytes_;
    rx_iov_[i].iov_len = slot_bytes_;
    msghdr& h = rx_msgs_[i].msg_hdr;
    h = msghdr{};
    h.msg_name = &rx_addr_[i];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &rx_iov_[i];
    h.msg_iovlen = 1;
    if (gro_ || rx_timestamps_) {
      h.msg_control = &rx_control_[i * kControlSlot];
      h.msg_controllen = kControlSlot;
    }
  }
  const int got =
      recvmmsg(fd_, rx_msgs_.data(), static_cast<unsigned>(batch_max_), MSG_DONTWAIT, nullptr);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED) return 0;
    return -errno;
  }
  timespec now{};
  if (rx_timestamps_) clock_gettime(CLOCK_REALTIME, &now);  // the kernel's clock for them
  const uint64_t read_ns = Nanos(now);
  for (int i = 0; i < got; ++i) {
    msghdr& h = rx_msgs_[i].msg_hdr;
    InDatagram d;
    d.from = Peer::FromSockaddr(rx_addr_[i]);
    d.data = rx_buf_.data() + i * slot_bytes_;
    d.len = rx_msgs_[i].msg_len;
    d.truncated = (h.msg_flags & MSG_TRUNC) != 0 || d.len >= slot_bytes_;
    size_t segment = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (gro_ && c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
          c->cmsg_len >= CMSG_LEN(sizeof(int))) {
        int v = 0;
        std::memcpy(&v, CMSG_DATA(c), sizeof(v));
        if (v > 0 && !d.truncated) segment = static_cast<size_t>(v);
      } else if (rx_timestamps_ && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                 c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
        timespec ts;
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
        const uint64_t at_ns = Nanos(ts);
        // The clocks of a stepped host can disagree: no age then.
        if (at_ns <= read_ns && read_ns - at_ns <= kRxAgeMaxUs * 1000) {
          d.age_us = (read_ns - at_ns) / 1000;
        }
      }
    }
    if (segment == 0 || segment >= d.len) {
      d.truncated = d.truncated || d.len > datagram_bytes_max_;
      out->push_back(d);
      continue;
    }
    // Coalesced: equal-sized datagrams, the last possibly shorter.
    for (size_t off = 0; off < d.len; off += segment) {
      InDatagram part = d;
      part.data = d.data + off;
      part.len = std::min(segment, d.len - off);
      part.truncated = part.len > datagram_bytes_max_;
      out->push_back(part);
    }
  }
  return got;
}

}  // namespace transport
}  // namespace hetps
