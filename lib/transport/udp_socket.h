// A non-blocking IPv4 UDP socket with batched I/O (sendmmsg / recvmmsg).
// Owns its file descriptor. Not thread-safe: one owner thread (the endpoint).
#ifndef HETPS_LIB_TRANSPORT_UDP_SOCKET_H_
#define HETPS_LIB_TRANSPORT_UDP_SOCKET_H_

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/net_address.h"

namespace hetps {
namespace transport {

// An IPv4 address and port in network byte order, comparable and hashable.
struct Peer {
  uint32_t ip = 0;    // network byte order
  uint16_t port = 0;  // network byte order
  bool operator==(const Peer& o) const { return ip == o.ip && port == o.port; }
  bool operator!=(const Peer& o) const { return !(*this == o); }
  template <typename H>
  friend H AbslHashValue(H h, const Peer& p) {
    return H::combine(std::move(h), p.ip, p.port);
  }
  sockaddr_in ToSockaddr() const;
  static Peer FromSockaddr(const sockaddr_in& a);
  std::string ToString() const;
};

// Resolves a numeric IPv4 "a.b.c.d:port" (or "localhost:port").
absl::StatusOr<Peer> ResolvePeer(const HostPort& addr);

// Sent as one datagram: `head` then `body` (gathered by the kernel, so a
// payload goes out straight from the caller's buffer).
struct OutDatagram {
  Peer to;
  const uint8_t* head = nullptr;
  size_t head_len = 0;
  const uint8_t* body = nullptr;
  size_t body_len = 0;
};

struct InDatagram {
  Peer from;
  uint8_t* data = nullptr;  // points into the socket's receive buffers
  size_t len = 0;
  bool truncated = false;  // larger than the receive slot (MSG_TRUNC)
};

class UdpSocket {
 public:
  // Binds `addr` (port 0: any free port). buffer_bytes sizes SO_SNDBUF and
  // SO_RCVBUF (forced past rmem_max when running as root).
  static absl::StatusOr<std::unique_ptr<UdpSocket>> Create(const HostPort& addr,
                                                           size_t buffer_bytes, size_t batch_max,
                                                           size_t datagram_bytes_max);
  ~UdpSocket();
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  int fd() const { return fd_; }
  Peer local() const { return local_; }

  // Sends up to batch_max datagrams with one sendmmsg. Returns how many left
  // (fewer when the socket buffer is full); errors other than EAGAIN are
  // returned as a negative errno.
  int SendBatch(const OutDatagram* d, size_t n);
  // Receives up to batch_max datagrams without blocking. The returned views
  // stay valid until the next RecvBatch. Returns the count, or negative errno.
  int RecvBatch(std::vector<InDatagram>* out);

 private:
  UdpSocket(int fd, size_t batch_max, size_t datagram_bytes_max);

  int fd_;
  Peer local_;
  size_t batch_max_;
  size_t slot_bytes_;
  std::vector<uint8_t> rx_buf_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iov_;
  std::vector<sockaddr_in> rx_addr_;
  std::vector<mmsghdr> tx_msgs_;
  std::vector<iovec> tx_iov_;  // two per datagram
  std::vector<sockaddr_in> tx_addr_;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_UDP_SOCKET_H_
