// DatagramSocket: what the data-plane Endpoint sends and receives through.
// UdpSocket (udp_socket.h) is the kernel's; SimSocket (sim_network.h) is a
// seeded simulated network for tests, the endpoint fuzzer and replays.
// Implementations are not thread-safe: one owner thread (the endpoint's,
// or whoever drives a threadless endpoint).
#ifndef HETPS_LIB_TRANSPORT_DATAGRAM_SOCKET_H_
#define HETPS_LIB_TRANSPORT_DATAGRAM_SOCKET_H_

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
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
  // false: not authenticated, so it may only go through a private channel
  // (DatagramSocket::PrivateTo), never onto the network.
  bool sealed = true;
};

struct InDatagram {
  Peer from;
  uint8_t* data = nullptr;  // points into the socket's receive buffers
  size_t len = 0;
  bool truncated = false;  // larger than the receive slot (MSG_TRUNC)
  // How long before RecvBatch returned the datagram arrived (the kernel's
  // receive time, or the simulated arrival); 0: not known. A busy reader
  // takes many datagrams at once, and their arrival spacing, which times
  // a flow (FlowResult), is only here.
  uint64_t age_us = 0;
  // It came through a private channel (a local ring: only this user's
  // processes can write one), not from the network.
  bool private_channel = false;
};

// What a socket that sends to peers on this host through shared memory
// (local_ring.h) did; zeros for the others.
struct LocalRingStats {
  uint64_t datagrams_sent = 0;      // through rings
  uint64_t datagrams_received = 0;  // through rings
  uint64_t ring_full = 0;           // sent by UDP for want of room in a ring
  uint64_t rings_created = 0;
  uint64_t rings_attached = 0;
  uint64_t rings_refused = 0;  // offers whose ring failed a check
  uint64_t rings_broken = 0;   // attached rings that broke the layout
};

class DatagramSocket {
 public:
  virtual ~DatagramSocket() = default;
  virtual Peer local() const = 0;
  // Sends d[0..n) in order; returns how many left (fewer when the socket
  // has no room now, or when the next is unsealed and its private channel
  // has no room or is gone), or a negative errno.
  virtual int SendBatch(const OutDatagram* d, size_t n) = 0;
  // Whether a datagram to `to` would now go through a private channel,
  // which needs no tag: only this user's processes can write one, and they
  // are inside the trust boundary (docs/security.md).
  virtual bool PrivateTo(const Peer& /*to*/) const { return false; }
  // Receives what is waiting, without blocking; the views stay valid until
  // the next RecvBatch. Returns the number of messages (0: nothing; the
  // socket's batch_max: more may be waiting), or a negative errno.
  virtual int RecvBatch(std::vector<InDatagram>* out) = 0;
  // A descriptor that polls readable when RecvBatch has something and
  // writable when SendBatch has room.
  virtual int fd() const = 0;
  // The earliest time (Clock::MonotonicMicros) a datagram already on its
  // way becomes receivable without fd() saying so; UINT64_MAX: none (a
  // kernel socket: poll fd()).
  virtual uint64_t next_arrival_us() const { return UINT64_MAX; }
  virtual LocalRingStats local_ring_stats() const { return {}; }
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_DATAGRAM_SOCKET_H_
