// A non-blocking IPv4 UDP socket with batched I/O (sendmmsg / recvmmsg) and,
// where the kernel has them, UDP segmentation offloads: runs of equal-sized
// datagrams to one peer leave as one GSO send (UDP_SEGMENT), and the kernel
// may hand over runs of received datagrams coalesced (UDP_GRO), which
// RecvBatch splits again. On the wire every datagram stays separate; the
// offloads only cut the per-datagram cost of the kernel's path, which bounds
// a user-space UDP data plane (docs/benchmarks.md).
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
#include "lib/transport/datagram_socket.h"

namespace hetps {
namespace transport {

struct UdpSocketOptions {
  size_t buffer_bytes = 8u << 20;  // SO_SNDBUF and SO_RCVBUF
  size_t batch_max = 64;           // messages per sendmmsg / recvmmsg
  size_t datagram_bytes_max = 65000;
  bool gso = true;  // coalesce runs of equal-sized datagrams with UDP_SEGMENT
  bool gro = true;  // accept coalesced runs on receive (UDP_GRO)
  // Kernel receive times (SO_TIMESTAMPNS), as InDatagram::age_us.
  bool rx_timestamps = true;
};

// An age beyond this is a clock step, not a wait (InDatagram::age_us 0).
constexpr uint64_t kRxAgeMaxUs = 10'000'000;

// At most this many datagrams go out in one GSO send (the kernel's limit is
// 64 on older kernels), and at most kGsoBytesMax bytes.
constexpr size_t kGsoSegmentsMax = 64;
constexpr size_t kGsoBytesMax = 65000;

class UdpSocket final : public DatagramSocket {
 public:
  // Binds `addr` (port 0: any free port). buffer_bytes sizes SO_SNDBUF and
  // SO_RCVBUF (forced past rmem_max when running as root). An offload the
  // kernel refuses is turned off, not an error.
  static absl::StatusOr<std::unique_ptr<UdpSocket>> Create(const HostPort& addr,
                                                           const UdpSocketOptions& options);
  ~UdpSocket() override;
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  int fd() const override { return fd_; }
  Peer local() const override { return local_; }

  bool gso() const { return gso_; }
  bool gro() const { return gro_; }
  bool rx_timestamps() const { return rx_timestamps_; }

  // Sends datagrams d[0..n) in order with one sendmmsg of at most batch_max
  // messages; with GSO, a run of consecutive datagrams to the same peer of
  // the same length (the run's last may be shorter) is one message. Returns
  // how many datagrams left (fewer when the socket buffer is full); errors
  // other than EAGAIN are returned as a negative errno.
  int SendBatch(const OutDatagram* d, size_t n) override;
  // Receives up to batch_max messages without blocking; a coalesced message
  // becomes one InDatagram per original datagram (each with the message's
  // age, from its kernel receive time). The views stay valid until
  // the next RecvBatch. Returns the number of messages (0: nothing waiting,
  // batch_max: more may be waiting), or a negative errno.
  int RecvBatch(std::vector<InDatagram>* out) override;

 private:
  UdpSocket(int fd, const UdpSocketOptions& o);
  int SendMessages(size_t messages);

  int fd_;
  Peer local_;
  size_t batch_max_;
  size_t slot_bytes_;
  size_t datagram_bytes_max_;
  bool gso_;
  bool gro_;
  bool rx_timestamps_;
  std::vector<uint8_t> rx_buf_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iov_;
  std::vector<sockaddr_in> rx_addr_;
  std::vector<uint8_t> rx_control_;  // one cmsg slot per message (UDP_GRO)
  std::vector<mmsghdr> tx_msgs_;
  std::vector<iovec> tx_iov_;  // two per datagram
  std::vector<sockaddr_in> tx_addr_;
  std::vector<uint8_t> tx_control_;  // one cmsg slot per message (UDP_SEGMENT)
  std::vector<uint32_t> tx_count_;   // datagrams in each message
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_UDP_SOCKET_H_
