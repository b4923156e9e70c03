// SimNetwork: a seeded, simulated datagram network in place of kernel
// sockets, for transport tests, the endpoint fuzzer and replaying a failure.
// Each directional link between two addresses has its own impairment
// (loss, duplication, one-way delay, jitter that reorders, a bottleneck
// rate with a drop-tail queue) and its own random stream, derived from the
// network's seed and the two addresses: the same datagrams sent on a link
// meet the same fate in every run.
//
// Time is the injected Clock's. With a FakeClock and threadless endpoints
// (Endpoint::Create with EndpointEnv::threaded = false, driven by
// testing::SimRun) a whole run is a pure function of the seed. With
// RealClock and threaded endpoints it stands in for the kernel under
// real-time tests; each link's pattern is still seeded.
//
// Thread-safe: sockets may be used from different threads (one owner each).
// Each socket's queue has its own lock and each link's state belongs to its
// sending socket, so threads on different sockets rarely wait on each
// other.
#ifndef HETPS_LIB_TRANSPORT_SIM_NETWORK_H_
#define HETPS_LIB_TRANSPORT_SIM_NETWORK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/transport/datagram_socket.h"

namespace hetps {
namespace transport {

struct LinkImpairment {
  double loss = 0;                     // probability a datagram is dropped
  double duplicate = 0;                // probability it is delivered twice
  uint32_t delay_us = 20;              // one-way propagation (loopback-like by default)
  uint32_t jitter_us = 0;              // extra uniform delay in [0, jitter_us): reorders
  uint64_t rate_bps = 0;               // bottleneck rate; 0: unlimited
  uint64_t queue_bytes_max = 1 << 20;  // waiting at the bottleneck, then drop-tail
};

struct SimStats {
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t lost = 0;              // by the loss probability
  uint64_t queue_dropped = 0;     // drop-tail at a rate-limited link, an uplink or a downlink
  uint64_t uplink_dropped = 0;    // of those, at SetUplink's bottlenecks
  uint64_t downlink_dropped = 0;  // of those, at SetDownlink's
  uint64_t duplicated = 0;
  uint64_t unroutable = 0;  // no socket at the destination
};

class SimNetwork;

class SimSocket final : public DatagramSocket {
 public:
  ~SimSocket() override;
  Peer local() const override { return local_; }
  int SendBatch(const OutDatagram* d, size_t n) override;
  int RecvBatch(std::vector<InDatagram>* out) override;
  // An eventfd written when datagrams are queued for this socket (created
  // on first use: threadless runs never make the syscalls).
  int fd() const override;
  uint64_t next_arrival_us() const override;

 private:
  friend class SimNetwork;
  struct Inbox;
  SimSocket(SimNetwork* net, Peer local, size_t batch_max);
  SimNetwork* const net_;
  const Peer local_;
  const size_t batch_max_;
  std::shared_ptr<Inbox> inbox_;  // shared with the network's address table
  // This socket's outgoing links (only its owner thread sends on them).
  struct LinkState {
    uint64_t rng = 0;            // SplitMix64 state
    uint64_t busy_until_us = 0;  // the bottleneck is sending until then
  };
  absl::flat_hash_map<Peer, LinkState> links_;
  uint64_t uplink_busy_until_us_ = 0;       // SimNetwork::SetUplink's bottleneck
  std::vector<std::vector<uint8_t>> held_;  // the last RecvBatch's datagrams
  std::vector<Peer> held_from_;
  std::vector<uint64_t> held_age_;  // how long each waited to be read
};

class SimNetwork {
 public:
  SimNetwork(const Clock* clock, uint64_t seed, LinkImpairment defaults = {});
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // A socket at `addr` (port 0: the next free port on that IP); an error
  // when the address is taken. The socket must not outlive the network.
  absl::StatusOr<std::unique_ptr<SimSocket>> Open(Peer addr, size_t batch_max = 64);
  // The link from -> to; SetEgress: every link from `from` that has no
  // link of its own. Set them before traffic flows.
  void SetLink(const Peer& from, const Peer& to, const LinkImpairment& imp);
  void SetEgress(const Peer& from, const LinkImpairment& imp);
  // A bottleneck every datagram to `to` (an open socket) crosses after its
  // link, in the order their links deliver them (a host's access
  // downlink, shared by all its senders): `rate_bps` (0: none), drop-tail
  // past `queue_bytes_max` waiting.
  void SetDownlink(const Peer& to, uint64_t rate_bps, uint64_t queue_bytes_max);
  // A bottleneck every datagram from `from` (an open socket) crosses
  // before its link, in the order sent (a host's access uplink, shared
  // by all its peers): `rate_bps` (0: none), drop-tail past
  // `queue_bytes_max` waiting.
  void SetUplink(const Peer& from, uint64_t rate_bps, uint64_t queue_bytes_max);
  // A datagram from any address (it need not hold a socket): hostile or
  // replayed traffic in tests. Goes through the from -> to link like any.
  void Inject(const Peer& from, const Peer& to, const uint8_t* data, size_t len);
  // The earliest arrival still queued anywhere (UINT64_MAX: none).
  uint64_t next_arrival_us() const;
  SimStats stats() const;

 private:
  friend class SimSocket;
  using Inbox = SimSocket::Inbox;
  using LinkState = SimSocket::LinkState;

  LinkImpairment ImpairmentFor(const Peer& from, const Peer& to) const;
  LinkState NewLink(const Peer& from, const Peer& to) const;
  // Decides a datagram's fate on `link` and queues it (or not) at `to`;
  // eventfds to write once no lock is held go to *wake.
  // `uplink_busy_us`: the sending socket's uplink (null: none).
  void Route(const Peer& from, const Peer& to, LinkState& link, std::vector<uint8_t> bytes,
             std::vector<int>* wake, uint64_t* uplink_busy_us = nullptr);
  static void Wake(std::vector<int>* fds);
  void Close(const Peer& addr);

  const Clock* const clock_;
  const uint64_t seed_;
  std::atomic<uint64_t> order_{0};  // FIFO among equal arrival times
  struct Counters {
    std::atomic<uint64_t> sent{0}, delivered{0}, lost{0}, queue_dropped{0}, uplink_dropped{0},
        downlink_dropped{0}, duplicated{0}, unroutable{0};
  } counters_;
  // The address table and link settings: read by every send, written by
  // Open, Close and Set*.
  mutable absl::Mutex mu_;
  LinkImpairment defaults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Peer, std::shared_ptr<Inbox>> inboxes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<Peer, Peer>, LinkImpairment> links_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Peer, LinkImpairment> egress_ ABSL_GUARDED_BY(mu_);
  struct Uplink {
    uint64_t rate_bps = 0;
    uint64_t queue_bytes_max = 0;
  };
  absl::flat_hash_map<Peer, Uplink> uplinks_ ABSL_GUARDED_BY(mu_);
  uint16_t next_port_ ABSL_GUARDED_BY(mu_) = 20000;
  // Links of injected traffic (no socket owns them).
  absl::Mutex inject_mu_;
  absl::flat_hash_map<std::pair<Peer, Peer>, LinkState> inject_links_ ABSL_GUARDED_BY(inject_mu_);
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_SIM_NETWORK_H_
