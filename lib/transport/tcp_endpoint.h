// TcpEndpoint: the same flows as Endpoint, carried over kernel TCP: the
// baseline LTP is measured against (docs/ltp.md), and a fallback where UDP
// is blocked. Behind the Transport interface, so the same job runs over
// either (job key `transport: tcp`).
//
// One listening socket on the data address (a daemon binds it on its UDP
// data port: TCP and UDP ports are separate, so a peer's identity is the
// same host:port over either), one outgoing connection per peer, made on
// the first Send to it and kept. A connection opens with an 8-byte hello
// carrying the sender's data port; then each packet is one frame: the
// 48-byte v1 header (wire.h) and its payload, exactly as a datagram. When
// every packet of a flow has arrived the receiver answers with a STOP frame
// (reason complete) on the same connection; the sender's handle finishes
// on that STOP, not when its bytes were handed to the kernel, so a flow's
// time is its delivery time. Flows to one peer go in order (one stream).
//
// Congestion control is the kernel's, chosen per socket with
// TCP_CONGESTION (config.tcp_congestion or SetCongestion); congestion()
// says what the kernel reports it really runs. Loss-tolerant flows are sent
// reliably (TCP has no early close). Frames that fail to decode close the
// connection (a byte stream cannot resynchronise) and are counted by reason
// like datagrams. Every frame carries the same tag as a datagram
// (packet_auth.h) over the sender's data address (its IP as the kernel
// reports it, its data port from the hello): a frame that names another
// key, fails its tag or repeats a frame is skipped and counted.
//
// Threads: one thread runs every socket (epoll); Receiver callbacks run on
// it. Send, Cancel, GetStats, SetKey, SetCongestion and Shutdown may be
// called from any thread.
#ifndef HETPS_LIB_TRANSPORT_TCP_ENDPOINT_H_
#define HETPS_LIB_TRANSPORT_TCP_ENDPOINT_H_

#include <memory>
#include <string>
#include <thread>

#include "lib/transport/endpoint.h"
#include "lib/transport/tcp_frames.h"

namespace hetps {
namespace transport {

// The hello a connection opens with: u32 magic, u16 version, u16 the
// sender's data port (little-endian).

class TcpEndpoint final : public Transport {
 public:
  // Listens on config.bind and starts the thread. Fails when the port is
  // taken or the kernel refuses config.tcp_congestion. `receiver` may be
  // null (send-only); it must outlive the endpoint.
  static absl::StatusOr<std::unique_ptr<TcpEndpoint>> Create(const EndpointConfig& config,
                                                             Receiver* receiver);
  ~TcpEndpoint() override;
  TcpEndpoint(const TcpEndpoint&) = delete;
  TcpEndpoint& operator=(const TcpEndpoint&) = delete;

  Peer local() const override { return local_; }
  const EndpointConfig& config() const override { return config_; }
  std::shared_ptr<SendHandle> Send(const Peer& to, uint32_t iteration,
                                   std::vector<PacketSpan> packets,
                                   SendOptions options = {}) override;
  void Cancel(const std::shared_ptr<SendHandle>& handle) override;
  // retransmissions, peers (BtlBw = delivery rate, RTprop = min RTT, pacing
  // rate, cwnd) come from the kernel's TCP_INFO of each outgoing connection.
  EndpointStats GetStats() const override;
  void SetKey(const DataKey& key) override;
  absl::Status SetEarlyClose(const EarlyCloseConfig& config) override;
  void Shutdown() override;

  // Congestion control for connections from now on and the live ones
  // (empty: the kernel default). Fails, changing nothing, when the kernel
  // does not have it or does not allow it.
  absl::Status SetCongestion(const std::string& name);
  // What getsockopt(TCP_CONGESTION) reported on the latest outgoing
  // connection ("" before the first).
  std::string congestion() const;

  struct Impl;  // internal, defined in tcp_endpoint.cc

 private:
  TcpEndpoint(const EndpointConfig& config, Receiver* receiver);
  EndpointConfig config_;
  Peer local_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

// Checks that this kernel lets a socket run congestion control `name`.
absl::Status CheckTcpCongestion(const std::string& name);

enum class TransportKind { kUdp, kTcp };
// "reliable" and "ltp" run over UDP (Endpoint), "tcp" over TcpEndpoint.
TransportKind TransportKindFor(const std::string& job_transport);
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(TransportKind kind,
                                                           const EndpointConfig& config,
                                                           Receiver* receiver);

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_TCP_ENDPOINT_H_
