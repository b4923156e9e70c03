// Endpoint: one UDP socket and the thread that owns it, carrying reliable
// flows of float32 packets in both directions (data plane v1; wire format in
// docs/wire-format.md).
//
// Sending: Send() queues a flow (a list of float spans, each one packet) to
// a peer and returns a SendHandle to Wait() on; the spans must stay valid and
// unchanged until the handle is done. Every packet is acknowledged
// individually; a packet is lost when three packets sent after it were
// acknowledged, or when its retransmission timeout expires, and is then
// retransmitted ahead of new data. A per-peer BBR-style controller
// (congestion.h) paces packets and caps bytes in flight at ~2 BDP.
//
// Loss-tolerant (LTP) flows, SendOptions::loss_tolerant: critical packets
// (the caller marks them; the first packet of a flow always is) are sent
// first and a lost one is resent at once (the paper's CQ); normal packets go
// once (NQ), and a lost one waits in a retransmission queue (RQ) served only
// when nothing new is left to send. The receiver closes the flow early
// (early_close.h) and says so with a STOP carrying the reason; the sender
// then stops, with whatever was delivered.
//
// Receiving: the Receiver's callbacks run on the endpoint thread, in arrival
// order, once per distinct packet (duplicates are dropped and re-ACKed).
// Every datagram is authenticated under the job's key (packet_auth.h)
// before anything else looks at it. Datagrams that fail to decode, name
// another key, fail the tag, repeat a datagram (replay window) or a
// delivered packet, or belong to a flow nobody accepted are dropped and
// counted by reason (Stats::drops).
//
// Bounds: send_flows_max, recv_flows_max, the receive budgets,
// closed_flows_remembered, batch_max and the socket buffers; nothing a
// sender controls grows without limit. Thread-safe: Send, GetStats and
// Shutdown may be called from any thread.
//
// Socket, clock and randomness come from EndpointEnv: production uses a
// kernel UdpSocket, the real clock and the OS's entropy on its own thread;
// tests and the fuzzer use a SimNetwork socket and a FakeClock with no
// thread, calling Step() themselves, so a run replays from its seed.
#ifndef HETPS_LIB_TRANSPORT_ENDPOINT_H_
#define HETPS_LIB_TRANSPORT_ENDPOINT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"
#include "lib/base/json_writer.h"
#include "lib/base/net_address.h"
#include "lib/transport/congestion.h"
#include "lib/transport/datagram_socket.h"
#include "lib/transport/early_close.h"
#include "lib/transport/packet_auth.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {

struct EndpointConfig {
  HostPort bind{"127.0.0.1", 0};
  // The IPv4 address (network order) peers know this endpoint by, which
  // its datagrams' tags cover; 0: the bind address (which must then not
  // be a wildcard).
  uint32_t advertise_ip = 0;
  // The job's data key (also SetKey). Without one nothing is sent or
  // accepted.
  DataKey key;
  // false: tags are zero and never checked (benchmarks' baseline only).
  bool authenticate = true;
  uint32_t packet_bytes = 1400;  // datagram size, header included
  size_t socket_buffer_bytes = 8u << 20;
  uint32_t batch_max = 64;  // messages per sendmmsg / recvmmsg
  // UDP segmentation offloads (udp_socket.h): several times fewer kernel
  // cycles per datagram. Turn gso off where a shaper or filter must see
  // every datagram as its own packet before the device segments it.
  bool gso = true;
  bool gro = true;
  // Datagrams to peers on this host through shared-memory rings
  // (local_ring.h) of this many bytes each, UDP for the rest. Rings
  // engage only where both ends have it on; an end without it counts each
  // offer as a bad datagram and is sent to by UDP.
  bool local_rings = false;
  uint64_t local_ring_bytes = 16ull << 20;
  uint32_t send_flows_max = 4096;
  uint32_t recv_flows_max = 4096;
  // Memory senders can make this endpoint hold (open receive flows; TCP:
  // connection buffers too), per sending peer and in total (recv_budget.h).
  // A flow or frame past either is dropped and counted as over_budget.
  uint64_t recv_peer_bytes_max = 64ull << 20;
  uint64_t recv_bytes_max = 256ull << 20;
  uint32_t closed_flows_remembered = 16384;
  uint32_t rto_min_us = 20000;  // below this, scheduling hiccups fire spurious RTOs
  // Before the first RTT sample of a peer. Too short and every packet of the
  // first window is resent before its ACK can come back (on a 20 ms WAN
  // path, all of them), and those ACKs then read as bogus RTTs and rates.
  uint32_t rto_initial_us = 250'000;
  uint32_t rto_max_us = 2'000'000;
  uint32_t recv_flow_idle_ms = 60'000;  // forget half-received flows after this
  // Forget a peer's estimates and link state after this long without a
  // flow to or from it (a peer that left, an old job's).
  uint32_t peer_forget_ms = 60'000;
  // Delayed ACKs: a flow's ACKs wait until ack_every packets are pending or
  // the first has waited min(ack_delay_max_us, the sender's RTprop / 8); a
  // flow's last packet is acknowledged at once. An ACK datagram costs both
  // hosts and the network about what a data packet does, so one per packet
  // halves what a busy receiver can take; the delay is short because a
  // window-limited sender loses the delay's share of its rate. The last
  // packet of a batch still gives an undelayed RTT sample, and the
  // delivery rate allows for bunched ACKs (congestion.cc). ack_every 1 or
  // ack_delay_max_us 0: one ACK per receive batch, at once.
  uint32_t ack_every = 16;
  uint32_t ack_delay_max_us = 1000;
  // Every ACK also says up to where the flow arrived without a gap
  // (wire.h kFlagAckPrefix), so a lost ACK datagram costs nothing: without
  // it each lost ACK reads as up to ack_every lost packets, and ACKs that
  // cross a queue full of the next pushes are lost often.
  bool ack_prefix = true;
  // Every ACK also repeats the seqs of the flow's previous ACK (up to 64)
  // that its prefix does not cover. The prefix stops at the flow's first
  // hole, and a loss-tolerant flow's holes stay open until its
  // retransmission queue runs at the end (a reliable one's for an RTT or
  // more): behind a hole a lost ACK would read as lost data again, and at a
  // percent of loss such false losses outnumber the real ones and cut the
  // window. An echoed seq whose first ACK was lost gives an RTT sample one
  // ACK interval long.
  bool ack_echo = true;
  // Each ACK names the transmission that delivered its first seq
  // (wire.h kFlagAckTx), so a resent packet's ACK gives its sender an RTT
  // sample and tells it which copy arrived: where a queue grew the round
  // trip past the timer, the first copies' ACKs raise the timer at once,
  // and a loss they prove spurious is undone without a guess. Off: live
  // runs with it met fewer of the permutation's changes
  // (docs/congestion.md, "Named copies"). A sender takes named ACKs
  // whatever this says; the receiver's setting decides.
  bool ack_tx = false;
  CongestionConfig congestion;
  EarlyCloseConfig early_close;  // for loss-tolerant flows this endpoint receives
  // TcpEndpoint only: congestion control set on each connection with
  // TCP_CONGESTION ("cubic", "bbr", ...); empty: the kernel's default.
  std::string tcp_congestion;

  // Floats per packet for this packet size.
  uint32_t payload_floats() const {
    return static_cast<uint32_t>((packet_bytes - kHeaderBytes) / sizeof(float));
  }
};

// One packet's worth of floats, from chunk `chunk_id` at `chunk_offset`.
struct PacketSpan {
  uint32_t chunk_id = 0;
  uint32_t chunk_offset = 0;  // floats
  const float* data = nullptr;
  uint32_t floats = 0;
  bool critical = false;
};

// Cuts `floats` floats of a chunk into packets of at most `payload_floats`;
// the first and last packet of the chunk are marked critical when asked.
void AppendPackets(uint32_t chunk_id, const float* data, uint32_t floats, uint32_t payload_floats,
                   bool mark_ends_critical, std::vector<PacketSpan>* out);

// OK when a flow has 1 to 2^24 packets, each of 1 to payload_floats
// floats; otherwise why not (every transport's Send checks this).
absl::Status ValidateFlow(const std::vector<PacketSpan>& packets, uint32_t payload_floats);

struct SendOptions {
  // LTP: the receiver may close the flow once enough has arrived; lost
  // normal packets are resent only after everything new went out.
  bool loss_tolerant = false;
  // The plan version every data packet carries (Header::plan).
  uint32_t plan = 0;
  // The samples a push averages over (Header::samples; 0: not said).
  uint32_t samples = 0;
};

// Where a sent flow's time went, on the endpoint's clock
// (CLOCK_MONOTONIC microseconds in production, so traces of the processes
// of one host line up): round traces (docs/tracing.md). 0: not reached.
struct FlowTiming {
  uint64_t submitted_us = 0;   // Send() called
  uint64_t taken_us = 0;       // the endpoint thread took it
  uint64_t first_sent_us = 0;  // its first datagram went to the socket
  uint64_t last_sent_us = 0;   // its last one (new or resent)
  uint64_t done_us = 0;        // finished: last ACK, STOP or cancel
  // Turns of the send loop that left the flow's peer with packets to send,
  // held by the pacing rate or by the congestion window.
  uint32_t pacing_holds = 0;
  uint32_t window_holds = 0;
  // The peer's controller when the flow finished.
  uint64_t pacing_rate_bps = 0;
  uint64_t cwnd_bytes = 0;
  uint64_t rate_cap_bps = 0;
  uint64_t btlbw_bps = 0;
  uint32_t rtprop_us = 0;
  bool in_startup = false;
  // Round trips of its packets acknowledged on their first send, or by
  // an ACK that names the copy (a delayed ACK's wait included): the
  // smallest, mean and largest (0: none). Beside the peer's RTprop they
  // show the queues on both directions of the path while it ran.
  uint32_t rtt_min_us = 0;
  uint32_t rtt_mean_us = 0;
  uint32_t rtt_max_us = 0;
};

// As one JSON object (times in microseconds, rates in bit/s).
void AppendJson(const FlowTiming& t, JsonWriter* w);
struct FlowResult;
// A received flow's times as [first packet, last packet, close].
void AppendJson(const FlowResult& r, JsonWriter* w);

class SendHandle {
 public:
  explicit SendHandle(const Clock* clock = RealClock::Get()) : clock_(clock) {}
  // True when every packet was acknowledged (or the receiver sent STOP).
  bool Wait(absl::Duration timeout);
  bool done() const;
  absl::Status status() const;  // OK, or why the flow was abandoned
  uint32_t flow_id() const { return flow_id_; }
  uint32_t retransmissions() const { return retransmissions_.load(); }
  absl::Duration elapsed() const;
  // How the receiver closed the flow (kComplete unless it said otherwise in
  // its STOP) and how many packets it had then (0 when it did not say).
  CloseReason close_reason() const;
  uint32_t receiver_packets() const;
  FlowTiming timing() const;

 private:
  friend class Endpoint;
  friend class TcpEndpoint;
  void Finish(absl::Status s);
  const Clock* const clock_;  // elapsed() (the endpoint's: simulated in tests)
  uint32_t flow_id_ = 0;
  absl::Time started_;
  std::atomic<uint32_t> retransmissions_{0};
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time finished_ ABSL_GUARDED_BY(mu_);
  CloseReason close_reason_ ABSL_GUARDED_BY(mu_) = CloseReason::kComplete;
  uint32_t receiver_packets_ ABSL_GUARDED_BY(mu_) = 0;
  FlowTiming timing_ ABSL_GUARDED_BY(mu_);
};

// Where in time a flow's bytes arrived: datagram bytes (header and
// payload) per kBinUs of the endpoint's clock, bin i being
// [first_bin + i, first_bin + i + 1) x kBinUs. What a receiver adding
// flows up moment by moment needs (a host's link carries its flows
// together; link_meter.h): a flow slowed by others for a while did not
// arrive evenly over its time. A flow longer than kBinsMax bins has none
// (overflowed), so a profile costs at most kBinsMax words; an arrival
// stamped before the first counts in the first bin.
struct ArrivalProfile {
  static constexpr uint64_t kBinUs = 50'000;
  static constexpr size_t kBinsMax = 200;  // 10 s
  uint64_t first_bin = 0;
  std::vector<uint64_t> bytes;
  bool overflowed = false;
  bool usable() const { return !overflowed && !bytes.empty(); }
  void Add(uint64_t at_us, uint64_t n) {
    if (overflowed) return;
    const uint64_t b = at_us / kBinUs;
    if (bytes.empty()) first_bin = b;
    const uint64_t i = b > first_bin ? b - first_bin : 0;
    if (i >= kBinsMax) {
      overflowed = true;
      bytes = std::vector<uint64_t>();
      return;
    }
    if (i >= bytes.size()) bytes.resize(size_t(i) + 1, 0);
    bytes[size_t(i)] += n;
  }
};

// How a received flow ended.
struct FlowResult {
  uint32_t flow_id = 0;
  uint32_t iteration = 0;
  uint32_t plan = 0;     // the flow's Header::plan
  uint32_t samples = 0;  // and Header::samples
  uint32_t total_packets = 0;
  uint32_t received = 0;  // distinct packets delivered by OnData
  uint64_t bytes = 0;     // their payload bytes
  CloseReason reason = CloseReason::kComplete;
  // The endpoint's clock (FlowTiming): first and last packet's arrival,
  // and the close (0 where the transport does not say). mid_us: the
  // arrival that made (total_packets + 1) / 2 packets received. Arrivals
  // are the socket's receive times where it gives them (the kernel's for
  // UDP), not when the endpoint thread got to the packets.
  uint64_t first_us = 0;
  uint64_t mid_us = 0;
  uint64_t last_us = 0;
  uint64_t closed_us = 0;
  ArrivalProfile arrivals;  // empty where the transport does not say
  bool complete() const { return received == total_packets; }
};

class Receiver {
 public:
  virtual ~Receiver() = default;
  // First packet of an unknown flow: DropReason::kNone accepts it; any
  // other reason refuses it and is what the drop is counted as (kUnexpected:
  // not wanted from this peer now; kBadFlowSize: not the number or size of
  // packets this peer's flows have). Later packets of a refused flow are
  // asked about again. The header is decoded and bounded (wire.h) but
  // otherwise the sender's word: check every field the receiver relies on.
  virtual DropReason AcceptFlow(const Peer& from, const Header& first) = 0;
  // A packet's payload: header.payload_bytes of little-endian floats, not
  // necessarily aligned (copy with memcpy).
  virtual void OnData(const Peer& from, const Header& header, const uint8_t* payload) = 0;
  // The flow ended: every packet arrived, or (loss-tolerant flows) it was
  // closed early; no OnData for it follows. Packets that never came are the
  // receiver's to fill (bubble-filling: zeros of the exact packet length).
  virtual void OnFlowDone(const Peer& from, const FlowResult& result) = 0;
};

struct PeerEstimate {
  Peer peer;
  uint64_t btlbw_bps = 0;
  uint32_t rtprop_us = 0;
  uint64_t pacing_rate_bps = 0;
  uint64_t cwnd_bytes = 0;
  // Rounds that lost more than loss_threshold (congestion.h): each one
  // lowered the cap on data in flight.
  uint64_t congestion_rounds = 0;
  // Fair-share cap on the pacing rate (congestion.h SetRateCap): the
  // receiver's advertised share of its ingress or this endpoint's egress
  // share, whichever is smaller; 0: none (one flow alone, where no other
  // shared the receiver's ingress lately).
  uint64_t rate_cap_bps = 0;
  bool in_startup = false;
  uint64_t inflight_bytes = 0;
};

// A receiving link's Early Close state (loss-tolerant flows only).
struct LinkEstimate {
  Peer peer;
  uint64_t lt_us = 0;            // LT of its latest flow (UINT64_MAX: waits for all)
  double last_fraction = 1;      // delivered fraction of its latest flow
  uint64_t lossy_flows = 0;      // loss-tolerant flows received from it
  uint64_t packets_missing = 0;  // packets never delivered (closed early)
};

struct EndpointStats {
  uint64_t datagrams_sent = 0;
  uint64_t datagrams_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t data_packets_sent = 0;
  uint64_t retransmissions = 0;
  uint64_t acks_sent = 0;
  uint64_t acks_received = 0;
  uint64_t flows_sent = 0;
  uint64_t flows_received = 0;
  // Loss-tolerant flows received, by how they closed (CloseReason), and the
  // packets early closes left out (bubbles the application fills).
  std::array<uint64_t, static_cast<size_t>(CloseReason::kCount)> lossy_closes{};
  uint64_t packets_missing = 0;
  uint64_t deferred_retransmissions = 0;  // RQ: lost normal packets resent after the rest
  uint64_t congestion_rounds = 0;         // sum of PeerEstimate::congestion_rounds
  uint64_t standing_queue_rounds = 0;     // of those, by loss with a standing queue
  uint64_t undone_rounds = 0;             // of those, undone: the losses proved spurious
  uint64_t losses_timeout = 0;            // packets declared lost by the retransmission timer
  uint64_t losses_spurious = 0;           // packets declared lost and delivered after all
  uint64_t startup_restarts = 0;          // returns to startup: the fair-share cap rose
  uint64_t cap_lift_rounds = 0;           // rounds a cap with room raised its ceiling
  uint64_t share_lift_steps = 0;          // raises of a share's capacity: a clean path said room
  uint64_t send_buffer_waits = 0;         // sends that found the socket buffer full
  uint64_t ingress_bps = 0;               // measured receive rate (shared-link LT)
  uint64_t recv_state_bytes = 0;          // charged to the receive budget now
  LocalRingStats local_rings;             // EndpointConfig::local_rings
  uint64_t datagrams_sent_untagged = 0;   // through a private channel (a ring), no tag
  uint64_t datagrams_tagged_late = 0;     // meant for a ring without room: tagged, sent again
  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> drops{};
  std::vector<PeerEstimate> peers;
  std::vector<LinkEstimate> links;
};

// What psd and workerd send and receive flows through: the UDP Endpoint
// below (reliable and loss-tolerant flows, the project's own protocol) or
// TcpEndpoint (tcp_endpoint.h, kernel TCP, the baseline). Same flows, same
// Receiver callbacks, same handles; thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual Peer local() const = 0;
  virtual const EndpointConfig& config() const = 0;
  // Queues a flow. Fails (handle done with an error) when send_flows_max
  // flows are already active or the flow is empty or too long.
  virtual std::shared_ptr<SendHandle> Send(const Peer& to, uint32_t iteration,
                                           std::vector<PacketSpan> packets,
                                           SendOptions options = {}) = 0;
  // Abandons a flow (its handle finishes with CANCELLED).
  virtual void Cancel(const std::shared_ptr<SendHandle>& handle) = 0;
  virtual EndpointStats GetStats() const = 0;
  // Installs the job's data key for datagrams sent and accepted from now
  // on (a daemon's transport outlives jobs; each job has its own key).
  virtual void SetKey(const DataKey& key) = 0;
  // Replaces the Early Close settings for loss-tolerant flows received from
  // now on (a job's settings); a transport without early close accepts and
  // ignores them.
  virtual absl::Status SetEarlyClose(const EarlyCloseConfig& config) = 0;
  // Stops the transport's thread; unfinished flows finish with CANCELLED.
  // Idempotent.
  virtual void Shutdown() = 0;
};

// What an Endpoint runs on. The defaults are production's.
struct EndpointEnv {
  std::unique_ptr<DatagramSocket> socket;  // null: a UdpSocket bound to config.bind
  const Clock* clock = nullptr;            // null: RealClock
  uint64_t seed = 0;                       // first flow id; 0: from the OS
  // false: no thread; the owner calls Step() (simulation, fuzzing). Receiver
  // callbacks then run inside Step().
  bool threaded = true;
};

class Endpoint final : public Transport {
 public:
  // Binds the socket (or takes env.socket) and, when env.threaded, starts
  // the endpoint thread. `receiver` may be null (send-only); it must
  // outlive the endpoint.
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(const EndpointConfig& config,
                                                          Receiver* receiver, EndpointEnv env = {});
  ~Endpoint() override;  // Shutdown()
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Peer local() const override { return local_; }
  const EndpointConfig& config() const override { return config_; }

  // A loss-tolerant flow's packets are sent critical ones first (their
  // order among themselves and among the others is kept).
  std::shared_ptr<SendHandle> Send(const Peer& to, uint32_t iteration,
                                   std::vector<PacketSpan> packets,
                                   SendOptions options = {}) override;
  void Cancel(const std::shared_ptr<SendHandle>& handle) override;

  EndpointStats GetStats() const override;
  void SetKey(const DataKey& key) override;
  absl::Status SetEarlyClose(const EarlyCloseConfig& config) override;
  void Shutdown() override;

  // Threadless endpoints only: one turn of the loop at the clock's time
  // (take Sends, receive what has arrived, send what pacing allows, fire
  // due timers). Returns the next time (Clock::MonotonicMicros) it needs a
  // turn if nothing arrives and nothing is sent before.
  uint64_t Step();

  struct Impl;  // internal: endpoint_internal.h

 private:
  Endpoint(const EndpointConfig& config, Receiver* receiver, const Clock* clock, uint64_t seed);
  EndpointConfig config_;
  Peer local_;
  bool threaded_ = true;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_ENDPOINT_H_
