// The data plane of a psd or workerd: its configuration, its long-lived
// UDP endpoint (one per daemon, serving job after job), and the endpoint's
// counters as Prometheus metrics.
#ifndef HETPS_LIB_DAEMON_DATA_PLANE_H_
#define HETPS_LIB_DAEMON_DATA_PLANE_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/trace_log.h"
#include "lib/config/config.h"
#include "lib/job/job_spec.h"
#include "lib/transport/tcp_endpoint.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {

struct DataPlaneConfig {
  std::string data_listen = "127.0.0.1:0";
  int64_t data_packet_bytes = 1400;
  int64_t data_socket_buffer_bytes = 8 << 20;
  bool data_gso = true;  // UDP_SEGMENT on send (udp_socket.h)
  bool data_gro = true;  // UDP_GRO on receive
  // Shared-memory rings to peers on this host (local_ring.h).
  bool data_local_rings = true;
  int64_t data_local_ring_bytes = 16 << 20;
  bool data_tcp = true;  // also listen for kernel-TCP flows (transport: tcp) on the same port
  // Receive memory senders can make the node hold (recv_budget.h).
  int64_t data_recv_peer_bytes_max = 64ll << 20;
  int64_t data_recv_bytes_max = 256ll << 20;
  int64_t data_peer_forget_ms = 60'000;  // EndpointConfig::peer_forget_ms
  bool data_egress_share = true;         // CongestionConfig::egress_share
  bool data_share_lift = true;           // CongestionConfig::share_lift
  bool data_weighted_share = true;       // CongestionConfig::weighted_share
  bool data_ack_tx = false;              // EndpointConfig::ack_tx
  // Round traces (docs/tracing.md): one JSON-lines file per job in this
  // directory; empty: none.
  std::string trace_dir;
  int64_t trace_bytes_max = 256ll << 20;
};

// The job's round trace file, <trace_dir>/<job_id>-<node_id>.jsonl (in a
// recovery epoch E: <job_id>-<node_id>-recovery<E>.jsonl, so the history
// before it stays), or null when trace_dir is empty.
absl::StatusOr<std::unique_ptr<TraceLog>> OpenJobTrace(const DataPlaneConfig& config,
                                                       const v1::JobAssignment& job,
                                                       const std::string& node_id);

void DeclareDataPlaneConfig(ConfigSchema* schema, DataPlaneConfig* config);

// Binds the endpoint and sets *data_address to what peers should use: the
// bind address, or for a wildcard bind `advertise_host` (else this host's
// name) resolved to a numeric IPv4 address.
absl::StatusOr<std::unique_ptr<transport::Endpoint>> CreateDataEndpoint(
    const DataPlaneConfig& config, const std::string& advertise_host, transport::Receiver* receiver,
    std::string* data_address);

// The kernel-TCP data plane beside the UDP one, on the same address and
// port (TCP and UDP ports are separate), for jobs with transport: tcp. Null
// when data_tcp is off.
absl::StatusOr<std::unique_ptr<transport::TcpEndpoint>> CreateTcpDataEndpoint(
    const DataPlaneConfig& config, const transport::Endpoint& udp, transport::Receiver* receiver);

// Both: the UDP endpoint, then TCP on the same port. With port 0 the UDP
// port is the kernel's pick and the same TCP port may be taken: then both
// are tried again on another (a few times).
absl::Status CreateDataEndpoints(const DataPlaneConfig& config, const std::string& advertise_host,
                                 transport::Receiver* receiver,
                                 std::unique_ptr<transport::Endpoint>* udp,
                                 std::unique_ptr<transport::TcpEndpoint>* tcp,
                                 std::string* data_address);

// The transport a job runs over (UDP for reliable and ltp, TCP for tcp),
// with the job's data key set on both and its congestion control on TCP.
// An error when the job wants TCP and this node has it off.
absl::StatusOr<transport::Transport*> SelectJobTransport(const JobSpec& spec,
                                                         const transport::DataKey& key,
                                                         transport::Endpoint* udp,
                                                         transport::TcpEndpoint* tcp);

// A job's members by data address: the peer labels of TransportMetrics.
absl::flat_hash_map<std::string, std::string> PeerNamesOf(const v1::JobAssignment& a);
// The IPv4 address (network byte order) of `node_id`'s data address in
// the job; 0 when it is not a member or not numeric.
uint32_t DataIpOf(const v1::JobAssignment& a, const std::string& node_id);

// The data-plane peers of `members` in their order (servers: by index);
// with `live_only`, those the assignment marks alive.
absl::StatusOr<std::vector<transport::Peer>> DataPeersOf(
    const google::protobuf::RepeatedPtrField<v1::JobMember>& members, bool live_only);

// Both transports' counters summed: one set of <prefix>_data_* metrics.
transport::EndpointStats CombinedStats(const transport::Endpoint& udp,
                                       const transport::TcpEndpoint* tcp);

// Advances a Prometheus counter to a cumulative value kept elsewhere:
// increments by now - *last (nothing when the source went backwards, e.g. a
// new job) and remembers now. For uint64_t or double totals.
template <typename T>
void AdvanceCounter(prometheus::Counter* c, T now, T* last) {
  if (now > *last) c->Increment(static_cast<double>(now - *last));
  *last = now;
}

// A data-plane Endpoint's counters as Prometheus metrics (<prefix>_data_*;
// docs/metrics.md). Update() is called periodically with a fresh
// EndpointStats and advances each counter by what changed since the last
// call. Per-peer series are labelled with the peer's node id (SetPeerNames:
// the job's roster; a peer not in it keeps its data address) and removed
// when the peer is gone from the stats (the endpoint forgets quiet peers).
// Update has one caller (the scheduler agent's thread); SetPeerNames may
// be called from any thread.

class TransportMetrics {
 public:
  TransportMetrics(prometheus::Registry& registry, const std::string& prefix);
  void Update(const transport::EndpointStats& stats);
  // data address ("ip:port") -> node id, for the series' peer label.
  void SetPeerNames(absl::flat_hash_map<std::string, std::string> names);

 private:
  prometheus::Counter *datagrams_sent_, *datagrams_received_, *bytes_sent_, *bytes_received_,
      *retransmissions_, *flows_sent_, *flows_received_, *deferred_retransmissions_,
      *packets_missing_, *congestion_rounds_, *standing_queue_rounds_, *startup_restarts_,
      *cap_lift_rounds_, *share_lift_steps_, *undone_rounds_, *losses_timeout_, *losses_spurious_;
  std::vector<prometheus::Counter*> lossy_closes_;  // by CloseReason
  std::vector<prometheus::Counter*> drops_;         // by DropReason
  prometheus::Counter *ring_sent_, *ring_received_, *ring_full_, *rings_created_, *rings_attached_,
      *rings_refused_, *rings_broken_;
  prometheus::Family<prometheus::Gauge>* btlbw_;
  prometheus::Family<prometheus::Gauge>* rtprop_;
  prometheus::Family<prometheus::Gauge>* cwnd_;
  prometheus::Family<prometheus::Gauge>* rate_cap_;
  prometheus::Gauge* ingress_;
  prometheus::Gauge* recv_state_;
  prometheus::Family<prometheus::Gauge>* lt_;
  prometheus::Family<prometheus::Gauge>* link_fraction_;
  transport::EndpointStats last_;
  // The per-peer gauges set by the last Update, by (family, label).
  absl::flat_hash_map<std::pair<prometheus::Family<prometheus::Gauge>*, std::string>,
                      prometheus::Gauge*>
      series_;
  absl::Mutex names_mu_;
  absl::flat_hash_map<std::string, std::string> names_ ABSL_GUARDED_BY(names_mu_);
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_DATA_PLANE_H_
