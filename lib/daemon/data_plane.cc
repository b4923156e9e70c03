#include "lib/daemon/data_plane.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "lib/base/escape.h"
#include "lib/base/status_macros.h"

namespace hetps {

void DeclareDataPlaneConfig(ConfigSchema* schema, DataPlaneConfig* c) {
  schema->Address("data_listen", &c->data_listen,
                  "UDP data-plane address (host:port, port 0 = any); IPv4.");
  schema->Int("data_packet_bytes", &c->data_packet_bytes,
              "Data-plane datagram size, header included (every node of a job must agree). "
              "Above the path MTU the IP layer fragments each datagram, and losing one "
              "fragment loses the datagram: only for loopback or a lossless LAN.",
              transport::kHeaderBytes + 4, transport::kDatagramBytesMax);
  schema->Int("data_socket_buffer_bytes", &c->data_socket_buffer_bytes,
              "UDP socket send and receive buffer size.", 64 << 10, 1 << 30);
  schema->Bool("data_gso", &c->data_gso,
               "Send runs of equal-sized datagrams with UDP GSO (off where a shaper or filter on "
               "this host must see each datagram before the device segments it).");
  schema->Bool("data_gro", &c->data_gro, "Receive coalesced runs of datagrams with UDP GRO.");
  schema->Bool("data_local_rings", &c->data_local_rings,
               "Send to peers on this host (in 127/8, or at the IP data_listen binds) through "
               "shared-memory rings in /dev/shm, UDP for the rest (docs/local-rings.md).");
  schema->Int("data_local_ring_bytes", &c->data_local_ring_bytes,
              "Each local ring's size (a power of two), reserved in /dev/shm per peer this "
              "node sends to; what does not fit goes by UDP.",
              64 << 10, 1 << 30);
  schema->Int("data_recv_peer_bytes_max", &c->data_recv_peer_bytes_max,
              "Receive state (open flows, TCP buffers) one peer can make this node hold; past it "
              "its datagrams are dropped as over_budget.",
              1 << 20, int64_t(1) << 40);
  schema->Int("data_recv_bytes_max", &c->data_recv_bytes_max,
              "Receive state all peers together can make this node hold (at least "
              "data_recv_peer_bytes_max); past it datagrams are dropped as over_budget.",
              1 << 20, int64_t(1) << 40);
  schema->Bool("data_egress_share", &c->data_egress_share,
               "Cap each peer's flows at the max-min share of this node's measured egress, as "
               "receivers do with their ingress (docs/congestion.md, \"Fair shares\").");
  schema->Bool("data_share_lift", &c->data_share_lift,
               "Raise the capacity a fair share divides while some flow across the shared link "
               "sees no queue and no loss (docs/congestion.md, \"Fair shares\").");
  schema->Bool("data_weighted_share", &c->data_weighted_share,
               "Weight each peer's share of this node's egress by the bytes it has left, so that "
               "what the node sends several peers at once ends together (docs/congestion.md, "
               "\"Fair shares\").");
  schema->Bool("data_ack_tx", &c->data_ack_tx,
               "Each ACK names the transmission that delivered its first packet, so a resent "
               "packet's ACK is an RTT sample and says which copy arrived (docs/congestion.md, "
               "\"Named copies\"); every node of a job must agree.");
  schema->Int("data_peer_forget_ms", &c->data_peer_forget_ms,
              "Forget a peer's path estimates, link state and metric series after this long "
              "without a flow to or from it.",
              100, 86'400'000);
  schema->String("trace_dir", &c->trace_dir,
                 "Round traces: one JSON-lines file per job, <trace_dir>/<job>-<node>.jsonl, with "
                 "the timeline of every round (docs/tracing.md); empty: off.");
  schema->Int("trace_bytes_max", &c->trace_bytes_max,
              "Size at which a job's round trace stops growing (further lines are dropped).",
              1 << 20, int64_t(1) << 40);
  schema->Bool("data_tcp", &c->data_tcp,
               "Also accept kernel-TCP data flows (jobs with transport: tcp) on the data port.");
}

absl::StatusOr<std::unique_ptr<TraceLog>> OpenJobTrace(const DataPlaneConfig& config,
                                                       const v1::JobAssignment& job,
                                                       const std::string& node_id) {
  if (config.trace_dir.empty()) return std::unique_ptr<TraceLog>();
  // Both come from schedd and its members' config: never a path of their own.
  for (const std::string* part : {&job.job_id(), &node_id}) {
    if (part->empty() || part->find('/') != std::string::npos || *part == "." || *part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace file name from \"", EscapeUntrusted(*part), "\" is not a plain name"));
    }
  }
  const std::string epoch =
      job.recovery_epoch() > 0 ? absl::StrCat("-recovery", job.recovery_epoch()) : "";
  return TraceLog::Open(
      absl::StrCat(config.trace_dir, "/", job.job_id(), "-", node_id, epoch, ".jsonl"),
      uint64_t(config.trace_bytes_max));
}

absl::StatusOr<std::unique_ptr<transport::Endpoint>> CreateDataEndpoint(
    const DataPlaneConfig& c, const std::string& advertise_host, transport::Receiver* receiver,
    std::string* data_address) {
  ASSIGN_OR_RETURN(HostPort bind, ParseHostPort(c.data_listen));
  transport::EndpointConfig ec;
  ec.bind = bind;
  ec.packet_bytes = static_cast<uint32_t>(c.data_packet_bytes);
  ec.congestion.packet_bytes = ec.packet_bytes;
  ec.socket_buffer_bytes = static_cast<size_t>(c.data_socket_buffer_bytes);
  ec.gso = c.data_gso;
  ec.gro = c.data_gro;
  ec.local_rings = c.data_local_rings;
  ec.local_ring_bytes = uint64_t(c.data_local_ring_bytes);
  if ((ec.local_ring_bytes & (ec.local_ring_bytes - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_local_ring_bytes (", c.data_local_ring_bytes, ") is not a power of two"));
  }
  ec.recv_peer_bytes_max = uint64_t(c.data_recv_peer_bytes_max);
  ec.recv_bytes_max = uint64_t(c.data_recv_bytes_max);
  ec.peer_forget_ms = uint32_t(c.data_peer_forget_ms);
  ec.congestion.egress_share = c.data_egress_share;
  ec.congestion.share_lift = c.data_share_lift;
  ec.congestion.weighted_share = c.data_weighted_share;
  ec.ack_tx = c.data_ack_tx;
  if (ec.recv_bytes_max < ec.recv_peer_bytes_max) {
    return absl::InvalidArgumentError(absl::StrCat("data_recv_bytes_max (", c.data_recv_bytes_max,
                                                   ") is below data_recv_peer_bytes_max (",
                                                   c.data_recv_peer_bytes_max, ")"));
  }
  HostPort advertised = bind;
  if (bind.IsWildcard()) {
    // Peers need a numeric IPv4 address: resolve advertise_host, or this
    // host's name when it is not set.
    std::string host = advertise_host;
    if (host.empty()) {
      char name[256] = {0};
      if (gethostname(name, sizeof(name) - 1) != 0) {
        return absl::InvalidArgumentError("data_listen is a wildcard and gethostname failed");
      }
      host = name;
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("data_listen ", c.data_listen, " is a wildcard address and ", host,
                       " does not resolve to an IPv4 address (", gai_strerror(rc),
                       "): set advertise_host to the address peers reach this node at"));
    }
    char ip[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof(ip));
    freeaddrinfo(res);
    advertised.host = ip;
  }
  // Our datagrams' tags cover the address peers know us by.
  ASSIGN_OR_RETURN(transport::Peer self, transport::ResolvePeer(HostPort{advertised.host, 0}));
  ec.advertise_ip = self.ip;
  absl::StatusOr<std::unique_ptr<transport::Endpoint>> ep =
      transport::Endpoint::Create(ec, receiver);
  if (!ep.ok()) {
    return absl::Status(ep.status().code(),
                        absl::StrCat("data_listen ", c.data_listen, ": ", ep.status().message()));
  }
  advertised.port = ntohs((*ep)->local().port);
  *data_address = advertised.ToString();
  return ep;
}

absl::StatusOr<std::unique_ptr<transport::TcpEndpoint>> CreateTcpDataEndpoint(
    const DataPlaneConfig& c, const transport::Endpoint& udp, transport::Receiver* receiver) {
  if (!c.data_tcp) return std::unique_ptr<transport::TcpEndpoint>();
  transport::EndpointConfig ec = udp.config();
  ec.bind.port = ntohs(udp.local().port);
  absl::StatusOr<std::unique_ptr<transport::TcpEndpoint>> tcp =
      transport::TcpEndpoint::Create(ec, receiver);
  if (!tcp.ok()) {
    return absl::Status(
        tcp.status().code(),
        absl::StrCat("data_listen ", c.data_listen, " (TCP): ", tcp.status().message(),
                     "; set data_tcp: false to run without the TCP transport"));
  }
  return tcp;
}

absl::Status CreateDataEndpoints(const DataPlaneConfig& c, const std::string& advertise_host,
                                 transport::Receiver* receiver,
                                 std::unique_ptr<transport::Endpoint>* udp,
                                 std::unique_ptr<transport::TcpEndpoint>* tcp,
                                 std::string* data_address) {
  ASSIGN_OR_RETURN(HostPort bind, ParseHostPort(c.data_listen));
  constexpr int kTries = 16;
  for (int attempt = 1;; ++attempt) {
    ASSIGN_OR_RETURN(*udp, CreateDataEndpoint(c, advertise_host, receiver, data_address));
    absl::StatusOr<std::unique_ptr<transport::TcpEndpoint>> t =
        CreateTcpDataEndpoint(c, **udp, receiver);
    if (t.ok()) {
      *tcp = std::move(*t);
      return absl::OkStatus();
    }
    (*udp)->Shutdown();
    udp->reset();
    if (bind.port != 0 || attempt == kTries || !absl::IsUnavailable(t.status())) return t.status();
  }
}

absl::StatusOr<transport::Transport*> SelectJobTransport(const JobSpec& spec,
                                                         const transport::DataKey& key,
                                                         transport::Endpoint* udp,
                                                         transport::TcpEndpoint* tcp) {
  udp->SetKey(key);
  if (tcp != nullptr) tcp->SetKey(key);
  if (transport::TransportKindFor(spec.transport) == transport::TransportKind::kUdp) return udp;
  if (tcp == nullptr) {
    return absl::FailedPreconditionError(
        "the job's transport is tcp but this node runs with data_tcp: false");
  }
  RETURN_IF_ERROR(tcp->SetCongestion(spec.tcp_congestion_name()));
  return tcp;
}

absl::flat_hash_map<std::string, std::string> PeerNamesOf(const v1::JobAssignment& a) {
  absl::flat_hash_map<std::string, std::string> names;
  for (const auto* members : {&a.servers(), &a.workers()}) {
    for (const v1::JobMember& m : *members) names[m.data_address()] = m.node_id();
  }
  return names;
}

uint32_t DataIpOf(const v1::JobAssignment& a, const std::string& node_id) {
  for (const auto* members : {&a.servers(), &a.workers()}) {
    for (const v1::JobMember& m : *members) {
      if (m.node_id() != node_id) continue;
      absl::StatusOr<HostPort> hp = ParseHostPort(m.data_address());
      if (!hp.ok()) return 0;
      absl::StatusOr<transport::Peer> p = transport::ResolvePeer(*hp);
      return p.ok() ? p->ip : 0;
    }
  }
  return 0;
}

absl::StatusOr<std::vector<transport::Peer>> DataPeersOf(
    const google::protobuf::RepeatedPtrField<v1::JobMember>& members, bool live_only) {
  std::vector<transport::Peer> out;
  for (const v1::JobMember& m : members) {
    if (live_only && !m.alive()) continue;
    ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(m.data_address()));
    ASSIGN_OR_RETURN(transport::Peer p, transport::ResolvePeer(hp));
    out.push_back(p);
  }
  return out;
}

transport::EndpointStats CombinedStats(const transport::Endpoint& udp,
                                       const transport::TcpEndpoint* tcp) {
  transport::EndpointStats s = udp.GetStats();
  if (tcp == nullptr) return s;
  const transport::EndpointStats t = tcp->GetStats();
  s.bytes_sent += t.bytes_sent;
  s.bytes_received += t.bytes_received;
  s.data_packets_sent += t.data_packets_sent;
  s.retransmissions += t.retransmissions;
  s.flows_sent += t.flows_sent;
  s.flows_received += t.flows_received;
  for (size_t i = 0; i < s.drops.size(); ++i) s.drops[i] += t.drops[i];
  s.recv_state_bytes += t.recv_state_bytes;
  s.peers.insert(s.peers.end(), t.peers.begin(), t.peers.end());
  return s;
}

TransportMetrics::TransportMetrics(prometheus::Registry& r, const std::string& p) {
  auto& datagrams = prometheus::BuildCounter()
                        .Name(p + "_data_datagrams_total")
                        .Help("Data-plane datagrams (DATA, ACK, STOP) by direction.")
                        .Register(r);
  datagrams_sent_ = &datagrams.Add({{"direction", "sent"}});
  datagrams_received_ = &datagrams.Add({{"direction", "received"}});
  auto& bytes = prometheus::BuildCounter()
                    .Name(p + "_data_bytes_total")
                    .Help("Data-plane bytes on the wire (headers included) by direction.")
                    .Register(r);
  bytes_sent_ = &bytes.Add({{"direction", "sent"}});
  bytes_received_ = &bytes.Add({{"direction", "received"}});
  auto& flows = prometheus::BuildCounter()
                    .Name(p + "_data_flows_total")
                    .Help("Data-plane flows (one push or pull each) by direction.")
                    .Register(r);
  flows_sent_ = &flows.Add({{"direction", "sent"}});
  flows_received_ = &flows.Add({{"direction", "received"}});
  auto& ring = prometheus::BuildCounter()
                   .Name(p + "_data_local_ring_datagrams_total")
                   .Help(
                       "Datagrams through shared-memory rings to peers on this host, by "
                       "direction (included in _data_datagrams_total).")
                   .Register(r);
  ring_sent_ = &ring.Add({{"direction", "sent"}});
  ring_received_ = &ring.Add({{"direction", "received"}});
  auto& rings = prometheus::BuildCounter()
                    .Name(p + "_data_local_rings_total")
                    .Help(
                        "Shared-memory rings: created (to a peer), attached (from a peer), "
                        "refused (an offer that failed a check), broken (an attached ring "
                        "that broke its layout), full (a datagram sent by UDP for want of "
                        "room).")
                    .Register(r);
  rings_created_ = &rings.Add({{"event", "created"}});
  rings_attached_ = &rings.Add({{"event", "attached"}});
  rings_refused_ = &rings.Add({{"event", "refused"}});
  rings_broken_ = &rings.Add({{"event", "broken"}});
  ring_full_ = &rings.Add({{"event", "full"}});
  retransmissions_ = &prometheus::BuildCounter()
                          .Name(p + "_data_retransmissions_total")
                          .Help("DATA packets sent again after being declared lost.")
                          .Register(r)
                          .Add({});
  recv_state_ = &prometheus::BuildGauge()
                     .Name(p + "_data_recv_state_bytes")
                     .Help(
                         "Receive state peers make this node hold now (open flows, TCP "
                         "buffers), bounded by data_recv_bytes_max.")
                     .Register(r)
                     .Add({});
  auto& drops = prometheus::BuildCounter()
                    .Name(p + "_data_drops_total")
                    .Help("Received datagrams dropped, by reason (docs/wire-format.md).")
                    .Register(r);
  for (size_t i = 1; i < size_t(transport::DropReason::kCount); ++i) {
    drops_.push_back(
        &drops.Add({{"reason", transport::DropReasonName(static_cast<transport::DropReason>(i))}}));
  }
  deferred_retransmissions_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_deferred_retransmissions_total")
           .Help(
               "LTP: lost normal packets resent from the retransmission queue, after every "
               "new packet (included in _data_retransmissions_total).")
           .Register(r)
           .Add({});
  congestion_rounds_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_congestion_rounds_total")
           .Help(
               "Send rounds that lost more than loss_threshold of their packets (queue "
               "overflow, not random loss), or any packet while a queue stood; each lowered "
               "the cap on data in flight.")
           .Register(r)
           .Add({});
  undone_rounds_ = &prometheus::BuildCounter()
                        .Name(p + "_data_undone_rounds_total")
                        .Help(
                            "Of the congestion rounds, those undone: their losses proved "
                            "spurious (late or lost ACKs).")
                        .Register(r)
                        .Add({});
  losses_timeout_ = &prometheus::BuildCounter()
                         .Name(p + "_data_losses_timeout_total")
                         .Help(
                             "Packets declared lost by the retransmission timer (not by "
                             "three later ACKs).")
                         .Register(r)
                         .Add({});
  losses_spurious_ = &prometheus::BuildCounter()
                          .Name(p + "_data_losses_spurious_total")
                          .Help(
                              "Packets declared lost that were delivered after all (their "
                              "ACK came before the resend, or too soon after it).")
                          .Register(r)
                          .Add({});
  standing_queue_rounds_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_standing_queue_rounds_total")
           .Help(
               "Of the congestion rounds, those that counted only because a queue stood all "
               "round (a loss-based competitor keeps the bottleneck queue full).")
           .Register(r)
           .Add({});
  cap_lift_rounds_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_cap_lift_rounds_total")
           .Help(
               "Rounds in which a flow held below its rate by a receiver's fair share, with no "
               "queue and no loss on its path, raised the share's ceiling (the share was made "
               "from an ingress measured too low).")
           .Register(r)
           .Add({});
  share_lift_steps_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_share_lift_steps_total")
           .Help(
               "Raises of the capacity this node's ingress or egress fair share divides, by "
               "1.25 each: a flow across that link saw no queue and no loss.")
           .Register(r)
           .Add({});
  startup_restarts_ =
      &prometheus::BuildCounter()
           .Name(p + "_data_startup_restarts_total")
           .Help(
               "Returns to startup because the receiver's or the egress fair share rose well "
               "above a flow's bandwidth estimate (the others finished: room to fill).")
           .Register(r)
           .Add({});
  auto& closes = prometheus::BuildCounter()
                     .Name(p + "_data_ltp_closes_total")
                     .Help(
                         "Loss-tolerant flows received, by how they closed: complete, "
                         "fraction (Early Close after LT), deadline.")
                     .Register(r);
  for (size_t i = 0; i < size_t(transport::CloseReason::kCount); ++i) {
    lossy_closes_.push_back(&closes.Add(
        {{"reason", transport::CloseReasonName(static_cast<transport::CloseReason>(i))}}));
  }
  packets_missing_ = &prometheus::BuildCounter()
                          .Name(p + "_data_ltp_packets_missing_total")
                          .Help(
                              "Packets of loss-tolerant flows never delivered (closed early): "
                              "bubbles the receiver zero-fills.")
                          .Register(r)
                          .Add({});
  lt_ = &prometheus::BuildGauge()
             .Name(p + "_data_link_lt_seconds")
             .Help(
                 "LTP: loss-tolerant threshold of each receiving link (latest flow; "
                 "+Inf until the link has estimates).")
             .Register(r);
  link_fraction_ = &prometheus::BuildGauge()
                        .Name(p + "_data_link_delivered_ratio")
                        .Help(
                            "LTP: delivered fraction of the latest loss-tolerant flow per "
                            "receiving link.")
                        .Register(r);
  btlbw_ = &prometheus::BuildGauge()
                .Name(p + "_data_peer_btlbw_bytes_per_second")
                .Help("Bottleneck bandwidth estimated towards each peer (windowed max).")
                .Register(r);
  rtprop_ = &prometheus::BuildGauge()
                 .Name(p + "_data_peer_rtprop_seconds")
                 .Help("Round-trip propagation time estimated towards each peer (windowed min).")
                 .Register(r);
  ingress_ = &prometheus::BuildGauge()
                  .Name(p + "_data_ingress_bytes_per_second")
                  .Help(
                      "Data received per second, windowed max (LTP: the shared-link bound "
                      "on LT).")
                  .Register(r)
                  .Add({});
  cwnd_ = &prometheus::BuildGauge()
               .Name(p + "_data_peer_cwnd_bytes")
               .Help("Congestion window towards each peer (bytes allowed in flight).")
               .Register(r);
  rate_cap_ = &prometheus::BuildGauge()
                   .Name(p + "_data_peer_rate_cap_bytes_per_second")
                   .Help(
                       "Fair-share cap on the pacing rate towards each peer (0: none): the "
                       "receiver's share of its ingress, or this node's share of its egress.")
                   .Register(r);
}

void TransportMetrics::Update(const transport::EndpointStats& s) {
  AdvanceCounter(datagrams_sent_, s.datagrams_sent, &last_.datagrams_sent);
  AdvanceCounter(datagrams_received_, s.datagrams_received, &last_.datagrams_received);
  AdvanceCounter(bytes_sent_, s.bytes_sent, &last_.bytes_sent);
  AdvanceCounter(bytes_received_, s.bytes_received, &last_.bytes_received);
  AdvanceCounter(flows_sent_, s.flows_sent, &last_.flows_sent);
  AdvanceCounter(flows_received_, s.flows_received, &last_.flows_received);
  AdvanceCounter(retransmissions_, s.retransmissions, &last_.retransmissions);
  const transport::LocalRingStats& lr = s.local_rings;
  transport::LocalRingStats& was = last_.local_rings;
  AdvanceCounter(ring_sent_, lr.datagrams_sent, &was.datagrams_sent);
  AdvanceCounter(ring_received_, lr.datagrams_received, &was.datagrams_received);
  AdvanceCounter(ring_full_, lr.ring_full, &was.ring_full);
  AdvanceCounter(rings_created_, lr.rings_created, &was.rings_created);
  AdvanceCounter(rings_attached_, lr.rings_attached, &was.rings_attached);
  AdvanceCounter(rings_refused_, lr.rings_refused, &was.rings_refused);
  AdvanceCounter(rings_broken_, lr.rings_broken, &was.rings_broken);
  recv_state_->Set(static_cast<double>(s.recv_state_bytes));
  for (size_t i = 1; i < size_t(transport::DropReason::kCount); ++i) {
    AdvanceCounter(drops_[i - 1], s.drops[i], &last_.drops[i]);
  }
  AdvanceCounter(deferred_retransmissions_, s.deferred_retransmissions,
                 &last_.deferred_retransmissions);
  AdvanceCounter(packets_missing_, s.packets_missing, &last_.packets_missing);
  AdvanceCounter(congestion_rounds_, s.congestion_rounds, &last_.congestion_rounds);
  AdvanceCounter(standing_queue_rounds_, s.standing_queue_rounds, &last_.standing_queue_rounds);
  AdvanceCounter(undone_rounds_, s.undone_rounds, &last_.undone_rounds);
  AdvanceCounter(losses_timeout_, s.losses_timeout, &last_.losses_timeout);
  AdvanceCounter(losses_spurious_, s.losses_spurious, &last_.losses_spurious);
  AdvanceCounter(startup_restarts_, s.startup_restarts, &last_.startup_restarts);
  AdvanceCounter(cap_lift_rounds_, s.cap_lift_rounds, &last_.cap_lift_rounds);
  AdvanceCounter(share_lift_steps_, s.share_lift_steps, &last_.share_lift_steps);
  ingress_->Set(static_cast<double>(s.ingress_bps) / 8);
  for (size_t i = 0; i < size_t(transport::CloseReason::kCount); ++i) {
    AdvanceCounter(lossy_closes_[i], s.lossy_closes[i], &last_.lossy_closes[i]);
  }
  absl::flat_hash_map<std::string, std::string> names;
  {
    absl::MutexLock lock(&names_mu_);
    names = names_;
  }
  auto label = [&](const transport::Peer& p) {
    const std::string addr = p.ToString();
    auto it = names.find(addr);
    return it == names.end() ? addr : it->second;
  };
  decltype(series_) now;
  auto set = [&](prometheus::Family<prometheus::Gauge>* family, const std::string& peer, double v) {
    auto key = std::make_pair(family, peer);
    auto it = series_.find(key);
    prometheus::Gauge* g = it != series_.end() ? it->second : &family->Add({{"peer", peer}});
    g->Set(v);
    now[key] = g;
  };
  for (const transport::LinkEstimate& l : s.links) {
    const std::string peer = label(l.peer);
    set(lt_, peer, l.lt_us == UINT64_MAX ? std::numeric_limits<double>::infinity() : l.lt_us / 1e6);
    set(link_fraction_, peer, l.last_fraction);
  }
  for (const transport::PeerEstimate& e : s.peers) {
    const std::string peer = label(e.peer);
    set(btlbw_, peer, static_cast<double>(e.btlbw_bps) / 8);
    set(rtprop_, peer, e.rtprop_us / 1e6);
    set(cwnd_, peer, static_cast<double>(e.cwnd_bytes));
    set(rate_cap_, peer, static_cast<double>(e.rate_cap_bps) / 8);
  }
  // A peer gone from the stats (left, or forgotten after going quiet): its
  // series go too.
  for (const auto& [key, gauge] : series_) {
    if (!now.contains(key)) key.first->Remove(gauge);
  }
  series_ = std::move(now);
}

void TransportMetrics::SetPeerNames(absl::flat_hash_map<std::string, std::string> names) {
  absl::MutexLock lock(&names_mu_);
  names_ = std::move(names);
}

}  // namespace hetps
