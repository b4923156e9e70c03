#include "lib/transport/udp_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace transport {

sockaddr_in Peer::ToSockaddr() const {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = port;
  return a;
}

Peer Peer::FromSockaddr(const sockaddr_in& a) { return Peer{a.sin_addr.s_addr, a.sin_port}; }

std::string Peer::ToString() const {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ip;
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return absl::StrCat(buf, ":", ntohs(port));
}

absl::StatusOr<Peer> ResolvePeer(const HostPort& addr) {
  std::string host = addr.host == "localhost" ? "127.0.0.1" : addr.host;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: '", addr.host, "' is not a numeric IPv4 address"));
  }
  return Peer{a.s_addr, htons(addr.port)};
}

absl::StatusOr<std::unique_ptr<UdpSocket>> UdpSocket::Create(const HostPort& addr,
                                                             size_t buffer_bytes, size_t batch_max,
                                                             size_t datagram_bytes_max) {
  auto peer = ResolvePeer(addr);
  if (!peer.ok()) return peer.status();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  auto s = std::unique_ptr<UdpSocket>(new UdpSocket(fd, batch_max, datagram_bytes_max));
  const int size = static_cast<int>(buffer_bytes);
  // FORCE variants exceed net.core.*mem_max when we are root; fall back.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
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

UdpSocket::UdpSocket(int fd, size_t batch_max, size_t datagram_bytes_max)
    : fd_(fd),
      batch_max_(batch_max),
      slot_bytes_(datagram_bytes_max + 1),  // one spare byte detects oversize
      rx_buf_(batch_max * slot_bytes_),
      rx_msgs_(batch_max),
      rx_iov_(batch_max),
      rx_addr_(batch_max),
      tx_msgs_(batch_max),
      tx_iov_(2 * batch_max),
      tx_addr_(batch_max) {}

UdpSocket::~UdpSocket() { close(fd_); }

int UdpSocket::SendBatch(const OutDatagram* d, size_t n) {
  n = std::min(n, batch_max_);
  if (n == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    tx_addr_[i] = d[i].to.ToSockaddr();
    tx_iov_[2 * i].iov_base = const_cast<uint8_t*>(d[i].head);
    tx_iov_[2 * i].iov_len = d[i].head_len;
    tx_iov_[2 * i + 1].iov_base = const_cast<uint8_t*>(d[i].body);
    tx_iov_[2 * i + 1].iov_len = d[i].body_len;
    msghdr& h = tx_msgs_[i].msg_hdr;
    h = msghdr{};
    h.msg_name = &tx_addr_[i];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &tx_iov_[2 * i];
    h.msg_iovlen = d[i].body_len > 0 ? 2 : 1;
  }
  const int sent = sendmmsg(fd_, tx_msgs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return 0;
    // A peer's ICMP unreachable surfaces as ECONNREFUSED on the next call;
    // the datagram is gone either way: report it as sent, loss recovery
    // handles the rest.
    if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) return 1;
    return -errno;
  }
  return sent;
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
  }
  const int got =
      recvmmsg(fd_, rx_msgs_.data(), static_cast<unsigned>(batch_max_), MSG_DONTWAIT, nullptr);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED) return 0;
    return -errno;
  }
  for (int i = 0; i < got; ++i) {
    InDatagram d;
    d.from = Peer::FromSockaddr(rx_addr_[i]);
    d.data = rx_buf_.data() + i * slot_bytes_;
    d.len = rx_msgs_[i].msg_len;
    d.truncated = (rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || d.len >= slot_bytes_;
    out->push_back(d);
  }
  return got;
}

}  // namespace transport
}  // namespace hetps
