// incast_bench: batch synchronization time (push + aggregate + pull) of N
// workers and one psd shard server, one process per network namespace of
// the testbed (deploy/testbed/testbed.sh; driver: bench/incast.sh). The
// server is the real ps::ShardServer (aggregation, optimizer, broadcast);
// workers push a gradient of --model_mb per iteration and wait for the
// parameters, exactly the BSP exchange of workerd without the compute.
//
//   incast_bench --role=worker --listen=198.18.0.2:7000 --server=198.18.0.1:7000 ...
//   incast_bench --role=server --listen=198.18.0.1:7000 --workers=198.18.0.2:7000,... ...
//   incast_bench --role=udp_sink --listen=...   /  --role=udp_blast --server=...
//
// Workers print one JSON line per iteration with CLOCK_MONOTONIC times
// (shared by every namespace of one host): push start, push done, pull
// done. The driver computes each iteration's synchronization time as the
// last worker's pull minus the first worker's push start. udp_blast /
// udp_sink measure plain UDP (no congestion control, no retransmission)
// goodput on the same link: the ceiling LTP's push goodput is held to.
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/net_address.h"
#include "lib/ps/plan.h"
#include "lib/ps/shard_server.h"
#include "lib/transport/tcp_endpoint.h"

namespace hetps {
namespace {

// Every process of a run uses this key: a benchmark's, never a job's
// (schedd draws those at random).
transport::DataKey BenchKey() {
  transport::DataKey k;
  k.id = 7;
  k.bytes.fill(0xB5);
  k.set = true;
  return k;
}
constexpr uint32_t kChunkFloats = 16384;  // as the default job

double Mono() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct Flags {
  std::string role, listen, server, workers, transport = "ltp", tcp_cc;
  double model_mb = 21;
  int64_t iterations = 4;
  int64_t slack_ms = 30;
  double min_delivered = 0.8;
  double seconds = 5;           // udp_blast / udp_sink
  bool trace = false;           // worker: controller trace
  int64_t ack_every = -1;       // < 0: the endpoint's default
  int64_t room = -1;            // congestion room_restart: 0 off, 1 on, < 0 default
  int64_t egress_share = -1;    // congestion egress_share: 0 off, 1 on, < 0 default
  int64_t cap_lift = -1;        // congestion cap_lift: 0 off, 1 on, < 0 default
  int64_t share_lift = -1;      // congestion share_lift: 0 off, 1 on, < 0 default
  int64_t weighted_share = -1;  // congestion weighted_share: 0 off, 1 on, < 0 default
  int64_t ack_prefix = -1;      // ACKs carry the prefix: 0 off, 1 on, < 0 default
  int64_t ack_echo = -1;        // ACKs repeat the previous ACK: 0 off, 1 on, < 0 default
  int64_t auth = 1;             // datagrams authenticated: 1 (default), 0 off (A/B of its cost)
  // UDP GSO and GRO: off on the testbed (its shaper and drop filter must
  // see every datagram), on for loopback runs (as the daemons' default).
  int64_t offload = 0;
  int64_t packet_bytes = 1400;
  int64_t local_rings = 0;  // shared-memory rings to peers on this host: 0 off, 1 on
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "incast_bench: %s\n"
               "  --role=server|worker|udp_sink|udp_blast --listen=IP:PORT\n"
               "  server: --workers=IP:PORT,...   worker/udp_blast: --server=IP:PORT\n"
               "  --transport=ltp|reliable|tcp [--tcp_cc=cubic|bbr] --model_mb=21 "
               "--iterations=4\n"
               "  --ltp_slack_ms=30 --ltp_min_delivered=0.8 --seconds=5 --trace=false\n"
               "  --ack_every=16 --room=1 --ack_prefix=1 --ack_echo=1 --auth=1 --egress_share=1\n"
               "  --cap_lift=1 --share_lift=1 --weighted_share=1 (A/B of the endpoint's\n"
               "  delayed ACKs, room restarts, ACK prefix, ACK echo, authentication, egress\n"
               "  fair share, cap lift, share lift, egress share weighted by bytes left)\n"
               "  --offload=0 (UDP GSO/GRO) --packet_bytes=1400 --local_rings=0\n",
               why.c_str());
  std::exit(2);
}

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) Usage("bad argument " + a);
    const std::string k = a.substr(2, eq - 2), v = a.substr(eq + 1);
    bool ok = true;
    if (k == "role") {
      f.role = v;
    } else if (k == "listen") {
      f.listen = v;
    } else if (k == "server") {
      f.server = v;
    } else if (k == "workers") {
      f.workers = v;
    } else if (k == "transport") {
      f.transport = v;
    } else if (k == "tcp_cc") {
      f.tcp_cc = v;
    } else if (k == "model_mb") {
      ok = absl::SimpleAtod(v, &f.model_mb) && f.model_mb > 0;
    } else if (k == "iterations") {
      ok = absl::SimpleAtoi(v, &f.iterations) && f.iterations > 0;
    } else if (k == "ltp_slack_ms") {
      ok = absl::SimpleAtoi(v, &f.slack_ms) && f.slack_ms >= 0;
    } else if (k == "ltp_min_delivered") {
      ok = absl::SimpleAtod(v, &f.min_delivered) && f.min_delivered > 0 && f.min_delivered <= 1;
    } else if (k == "seconds") {
      ok = absl::SimpleAtod(v, &f.seconds) && f.seconds > 0;
    } else if (k == "ack_every") {
      ok = absl::SimpleAtoi(v, &f.ack_every) && f.ack_every >= 1 && f.ack_every <= 257;
    } else if (k == "room") {
      ok = absl::SimpleAtoi(v, &f.room) && (f.room == 0 || f.room == 1);
    } else if (k == "cap_lift") {
      ok = absl::SimpleAtoi(v, &f.cap_lift) && (f.cap_lift == 0 || f.cap_lift == 1);
    } else if (k == "share_lift") {
      ok = absl::SimpleAtoi(v, &f.share_lift) && (f.share_lift == 0 || f.share_lift == 1);
    } else if (k == "weighted_share") {
      ok = absl::SimpleAtoi(v, &f.weighted_share) &&
           (f.weighted_share == 0 || f.weighted_share == 1);
    } else if (k == "egress_share") {
      ok = absl::SimpleAtoi(v, &f.egress_share) && (f.egress_share == 0 || f.egress_share == 1);
    } else if (k == "ack_prefix") {
      ok = absl::SimpleAtoi(v, &f.ack_prefix) && (f.ack_prefix == 0 || f.ack_prefix == 1);
    } else if (k == "ack_echo") {
      ok = absl::SimpleAtoi(v, &f.ack_echo) && (f.ack_echo == 0 || f.ack_echo == 1);
    } else if (k == "auth") {
      ok = absl::SimpleAtoi(v, &f.auth) && (f.auth == 0 || f.auth == 1);
    } else if (k == "offload") {
      ok = absl::SimpleAtoi(v, &f.offload) && (f.offload == 0 || f.offload == 1);
    } else if (k == "packet_bytes") {
      ok = absl::SimpleAtoi(v, &f.packet_bytes) && f.packet_bytes >= 128 && f.packet_bytes <= 65000;
    } else if (k == "local_rings") {
      ok = absl::SimpleAtoi(v, &f.local_rings) && (f.local_rings == 0 || f.local_rings == 1);
    } else if (k == "trace") {
      ok = absl::SimpleAtob(v, &f.trace);
    } else {
      Usage("unknown flag --" + k);
    }
    if (!ok) Usage("bad value for --" + k + ": " + v);
  }
  if (f.transport != "ltp" && f.transport != "reliable" && f.transport != "tcp") {
    Usage("--transport must be ltp, reliable or tcp");
  }
  return f;
}

transport::Peer PeerOf(const std::string& s) {
  auto hp = ParseHostPort(s);
  if (!hp.ok()) Usage(std::string(hp.status().message()));
  auto p = transport::ResolvePeer(*hp);
  if (!p.ok()) Usage(std::string(p.status().message()));
  return *p;
}

// One line in one write(2): the processes of a run append to one log, and
// stdio would cut a long line (the traces) into buffer-sized writes that
// interleave with the others' lines.
void PrintLine(const std::string& line) {
  std::fflush(stdout);
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = write(STDOUT_FILENO, line.data() + at, line.size() - at);
    if (n <= 0) return;
    at += size_t(n);
  }
}

transport::EndpointConfig EndpointFor(const Flags& f) {
  transport::EndpointConfig c;
  auto hp = ParseHostPort(f.listen);
  if (!hp.ok()) Usage("--listen: " + std::string(hp.status().message()));
  c.bind = *hp;
  c.key = BenchKey();
  c.authenticate = f.auth == 1;
  // A shaper and a random-drop filter sit on the link: they must see each
  // datagram as its own packet.
  c.gso = f.offload == 1;
  c.gro = f.offload == 1;
  c.packet_bytes = uint32_t(f.packet_bytes);
  c.congestion.packet_bytes = c.packet_bytes;
  c.local_rings = f.local_rings == 1;
  c.tcp_congestion = f.tcp_cc;
  c.early_close.slack_us = uint32_t(f.slack_ms * 1000);
  c.early_close.min_fraction = f.min_delivered;
  if (f.ack_every >= 1) c.ack_every = uint32_t(f.ack_every);
  if (f.room >= 0) c.congestion.room_restart = f.room == 1;
  if (f.egress_share >= 0) c.congestion.egress_share = f.egress_share == 1;
  if (f.cap_lift >= 0) c.congestion.cap_lift = f.cap_lift == 1;
  if (f.share_lift >= 0) c.congestion.share_lift = f.share_lift == 1;
  if (f.weighted_share >= 0) c.congestion.weighted_share = f.weighted_share == 1;
  if (f.ack_prefix >= 0) c.ack_prefix = f.ack_prefix == 1;
  if (f.ack_echo >= 0) c.ack_echo = f.ack_echo == 1;
  return c;
}

uint64_t ModelFloats(const Flags& f) { return uint64_t(f.model_mb * 1e6 / sizeof(float)); }

// The LT of each receiving link's latest flow, ms (diagnostics).
std::string LtJson(const transport::EndpointStats& es) {
  std::string out;
  for (const transport::LinkEstimate& l : es.links) {
    if (!out.empty()) out += ",";
    out += l.lt_us == UINT64_MAX ? "null" : absl::StrFormat("%.0f", l.lt_us / 1e3);
  }
  return out;
}

// The transport's per-peer estimates, as a JSON array (diagnostics).
std::string PeersJson(const transport::EndpointStats& es) {
  std::string out = "[";
  for (const transport::PeerEstimate& e : es.peers) {
    if (out.size() > 1) out += ",";
    out += absl::StrFormat(
        "{\"peer\":\"%s\",\"btlbw_mbps\":%.1f,\"rtprop_ms\":%.2f,\"cwnd_kb\":%.1f,"
        "\"cap_mbps\":%.1f,\"congestion_rounds\":%llu}",
        e.peer.ToString(), e.btlbw_bps / 1e6, e.rtprop_us / 1e3, e.cwnd_bytes / 1e3,
        e.rate_cap_bps / 1e6, (unsigned long long)e.congestion_rounds);
  }
  return out + "]";
}

int RunServer(const Flags& f) {
  std::vector<transport::Peer> workers;
  for (absl::string_view w : absl::StrSplit(f.workers, ',', absl::SkipEmpty())) {
    workers.push_back(PeerOf(std::string(w)));
  }
  if (workers.empty()) Usage("--workers is required for the server");
  ps::ShardServerConfig c;
  c.num_params = ModelFloats(f);
  c.chunk_floats = kChunkFloats;
  c.optimizer.learning_rate = 1e-6f;
  c.total_iterations = uint32_t(f.iterations);
  c.round_deadline = absl::Seconds(600);
  c.endpoint = EndpointFor(f);
  c.transport = transport::TransportKindFor(f.transport);
  const std::vector<float> init(c.num_params, 0.5f);
  auto server = ps::ShardServer::Create(c, init);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  (*server)->SetWorkers(workers);
  // Ingress trace: psd's received bytes every 100 ms, so the driver can see
  // how full the incast link is while pushes are in flight (not only the
  // span from the first push to the last).
  // Its sent bytes and retransmissions likewise (the pull), and with
  // --trace each pull flow's controller (as the workers' trace).
  std::atomic<bool> tracing{true};
  struct Sample {
    double t;
    uint64_t rx, tx, retx;
  };
  std::vector<Sample> trace;
  std::string peer_trace;
  std::thread tracer([&] {
    while (tracing.load()) {
      const transport::EndpointStats es = (*server)->endpoint().GetStats();
      const double now = Mono();
      trace.push_back({now, es.bytes_received, es.bytes_sent, es.retransmissions});
      if (f.trace) {
        for (const transport::PeerEstimate& e : es.peers) {
          if (e.inflight_bytes == 0 && e.rate_cap_bps == 0) continue;
          peer_trace += absl::StrFormat(
              "%s[%.3f,\"%s\",%.1f,%.1f,%.1f,%.0f,%.0f,%d]", peer_trace.empty() ? "" : ",", now,
              e.peer.ToString(), e.btlbw_bps / 1e6, e.pacing_rate_bps / 1e6, e.rate_cap_bps / 1e6,
              e.cwnd_bytes / 1e3, e.inflight_bytes / 1e3, e.in_startup ? 1 : 0);
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  (*server)->Start();
  const bool done = (*server)->WaitFinished(absl::Seconds(3600));
  tracing.store(false);
  tracer.join();
  std::string tj = "{\"role\":\"trace\",\"t\":[";
  for (size_t i = 0; i < trace.size(); ++i) {
    tj += absl::StrFormat("%s%.3f", i ? "," : "", trace[i].t);
  }
  for (const auto& [name, field] :
       {std::pair{"rx_bytes", &Sample::rx}, std::pair{"tx_bytes", &Sample::tx},
        std::pair{"retransmissions", &Sample::retx}}) {
    tj += absl::StrFormat("],\"%s\":[", name);
    for (size_t i = 0; i < trace.size(); ++i) {
      tj += absl::StrFormat("%s%llu", i ? "," : "", (unsigned long long)(trace[i].*field));
    }
  }
  PrintLine(absl::StrFormat("%s],\"peers\":[%s]}\n", tj.c_str(), peer_trace.c_str()));
  const ps::ShardServerStats s = (*server)->GetStats();
  const transport::EndpointStats es = (*server)->endpoint().GetStats();
  std::printf(
      "{\"role\":\"server\",\"finished\":%s,\"rounds_complete\":%llu,\"rounds_deadline\":%llu,"
      "\"partial_pushes\":%llu,\"bubble_bytes\":%llu,\"bytes_received\":%llu,"
      "\"closes_complete\":%llu,\"closes_fraction\":%llu,\"closes_deadline\":%llu,"
      "\"retransmissions\":%llu,\"losses_timeout\":%llu,\"losses_spurious\":%llu,"
      "\"undone_rounds\":%llu,\"congestion_rounds\":%llu,\"standing_queue_rounds\":%llu,"
      "\"startup_restarts\":%llu,\"send_buffer_waits\":%llu,\"datagrams_received\":%llu,"
      "\"datagrams_sent\":%llu,\"acks_sent\":%llu,\"acks_received\":%llu,"
      "\"ring_datagrams_received\":%llu,\"ring_datagrams_sent\":%llu,"
      "\"ingress_mbps\":%.1f,\"lt_ms\":[%s],\"peers\":%s}\n",
      done ? "true" : "false", (unsigned long long)s.rounds_complete,
      (unsigned long long)s.rounds_by_deadline, (unsigned long long)s.partial_pushes,
      (unsigned long long)s.bubble_bytes, (unsigned long long)es.bytes_received,
      (unsigned long long)es.lossy_closes[0], (unsigned long long)es.lossy_closes[1],
      (unsigned long long)es.lossy_closes[2], (unsigned long long)es.retransmissions,
      (unsigned long long)es.losses_timeout, (unsigned long long)es.losses_spurious,
      (unsigned long long)es.undone_rounds, (unsigned long long)es.congestion_rounds,
      (unsigned long long)es.standing_queue_rounds, (unsigned long long)es.startup_restarts,
      (unsigned long long)es.send_buffer_waits, (unsigned long long)es.datagrams_received,
      (unsigned long long)es.datagrams_sent, (unsigned long long)es.acks_sent,
      (unsigned long long)es.acks_received, (unsigned long long)es.local_rings.datagrams_received,
      (unsigned long long)es.local_rings.datagrams_sent, es.ingress_bps / 1e6, LtJson(es).c_str(),
      PeersJson(es).c_str());
  return done ? 0 : 1;
}

// The worker's receiving side: parameters from the server, by iteration.
class Pulls : public transport::Receiver {
 public:
  Pulls(transport::Peer server, size_t floats) : server_(server), params_(floats) {}
  transport::DropReason AcceptFlow(const transport::Peer& from,
                                   const transport::Header& h) override {
    absl::MutexLock lock(&mu_);
    return from == server_ && int64_t(h.iteration) > complete_ ? transport::DropReason::kNone
                                                               : transport::DropReason::kUnexpected;
  }
  void OnData(const transport::Peer&, const transport::Header& h, const uint8_t* p) override {
    const size_t at = size_t(h.chunk_id) * kChunkFloats + h.chunk_offset;
    if (at + h.payload_bytes / 4 > params_.size()) return;
    std::memcpy(params_.data() + at, p, h.payload_bytes);
  }
  void OnFlowDone(const transport::Peer&, const transport::FlowResult& r) override {
    absl::MutexLock lock(&mu_);
    if (int64_t(r.iteration) > complete_) {
      complete_ = r.iteration;
      at_ = Mono();
    }
  }
  // Waits for the parameters of `iteration`; returns when they were complete.
  bool Wait(int64_t iteration, absl::Duration timeout, double* at) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return complete_ >= iteration; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return false;
    *at = at_;
    return true;
  }

 private:
  const transport::Peer server_;
  std::vector<float> params_;  // endpoint thread only
  absl::Mutex mu_;
  int64_t complete_ ABSL_GUARDED_BY(mu_) = -1;
  double at_ ABSL_GUARDED_BY(mu_) = 0;
};

int RunWorker(const Flags& f) {
  const transport::Peer server = PeerOf(f.server);
  const uint64_t floats = ModelFloats(f);
  Pulls pulls(server, floats);
  transport::EndpointConfig ec = EndpointFor(f);
  auto t = transport::CreateTransport(transport::TransportKindFor(f.transport), ec, &pulls);
  if (!t.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(t.status().message()).c_str());
    return 1;
  }
  std::vector<float> grad(floats);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = float(i % 1000) * 1e-3f;
  std::vector<transport::PacketSpan> packets;
  const uint32_t pf = ec.payload_floats();
  for (uint64_t off = 0, c = 0; off < floats; off += kChunkFloats, ++c) {
    transport::AppendPackets(uint32_t(c), grad.data() + off,
                             uint32_t(std::min<uint64_t>(kChunkFloats, floats - off)), pf, true,
                             &packets);
  }
  transport::SendOptions options;
  options.loss_tolerant = f.transport == "ltp";
  // ShardServer refuses pushes of older plans as stale (docs/plan.md);
  // without a schedd no plan after the first comes.
  options.plan = ps::kFirstPlanVersion;
  double pulled = 0;
  // The server's first broadcast (iteration 0) starts the job.
  if (!pulls.Wait(0, absl::Seconds(600), &pulled)) {
    std::fprintf(stderr, "worker: no parameters from %s\n", f.server.c_str());
    return 1;
  }
  // Trace of the controller towards psd every 50 ms (--trace): time,
  // BtlBw, pacing rate, cap, window and data in flight (kB), startup.
  std::atomic<bool> tracing{f.trace};
  std::string trace;
  std::thread tracer([&] {
    while (tracing.load()) {
      for (const transport::PeerEstimate& e : (*t)->GetStats().peers) {
        if (!(e.peer == server)) continue;
        trace += absl::StrFormat("%s[%.3f,%.1f,%.1f,%.1f,%.0f,%.0f,%d]", trace.empty() ? "" : ",",
                                 Mono(), e.btlbw_bps / 1e6, e.pacing_rate_bps / 1e6,
                                 e.rate_cap_bps / 1e6, e.cwnd_bytes / 1e3, e.inflight_bytes / 1e3,
                                 e.in_startup ? 1 : 0);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  for (int64_t it = 0; it < f.iterations; ++it) {
    const double push_start = Mono();
    auto h = (*t)->Send(server, uint32_t(it), packets, options);
    if (!h->Wait(absl::Seconds(1200))) {
      std::fprintf(stderr, "worker: push %lld failed: %s\n", (long long)it,
                   std::string(h->status().message()).c_str());
      return 1;
    }
    const double push_done = Mono();
    if (!pulls.Wait(it + 1, absl::Seconds(1200), &pulled)) {
      std::fprintf(stderr, "worker: no parameters for iteration %lld\n", (long long)it + 1);
      return 1;
    }
    std::printf(
        "{\"role\":\"worker\",\"listen\":\"%s\",\"iteration\":%lld,\"push_start\":%.6f,"
        "\"push_done\":%.6f,\"pull_done\":%.6f,\"push_bytes\":%llu,\"delivered_packets\":%u,"
        "\"packets\":%zu,\"close_reason\":\"%s\",\"retransmissions\":%u}\n",
        f.listen.c_str(), (long long)it, push_start, push_done, pulled,
        (unsigned long long)(floats * sizeof(float)), h->receiver_packets(), packets.size(),
        transport::CloseReasonName(h->close_reason()), h->retransmissions());
    std::fflush(stdout);
  }
  tracing.store(false);
  tracer.join();
  if (f.trace) {
    PrintLine(absl::StrFormat("{\"role\":\"worker_trace\",\"listen\":\"%s\",\"cc\":[%s]}\n",
                              f.listen.c_str(), trace.c_str()));
  }
  const transport::EndpointStats ws = (*t)->GetStats();
  std::printf(
      "{\"role\":\"worker\",\"listen\":\"%s\",\"startup_restarts\":%llu,"
      "\"standing_queue_rounds\":%llu,\"peers\":%s}\n",
      f.listen.c_str(), (unsigned long long)ws.startup_restarts,
      (unsigned long long)ws.standing_queue_rounds, PeersJson(ws).c_str());
  if (f.transport == "tcp") {
    auto* tcp = static_cast<transport::TcpEndpoint*>(t->get());
    std::printf("{\"role\":\"worker\",\"listen\":\"%s\",\"tcp_congestion\":\"%s\"}\n",
                f.listen.c_str(), tcp->congestion().c_str());
  }
  (*t)->Shutdown();
  return 0;
}

// Plain UDP: 1400-byte datagrams as fast as the local qdisc takes them
// (blocking socket: the tbf on the sender's link pushes back), no
// congestion control, no retransmission.
int RunUdpBlast(const Flags& f) {
  const transport::Peer to = PeerOf(f.server);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a = to.ToSockaddr();
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 1;
  std::vector<char> buf(1400, 'x');
  const double end = Mono() + f.seconds;
  uint64_t sent = 0;
  while (Mono() < end) {
    if (send(fd, buf.data(), buf.size(), 0) > 0) sent += buf.size();
  }
  buf[0] = 'E';  // end marker, repeated in case one is lost
  for (int i = 0; i < 20; ++i) send(fd, buf.data(), 1, 0);
  std::printf("{\"role\":\"udp_blast\",\"sent_bytes\":%llu,\"seconds\":%.3f}\n",
              (unsigned long long)sent, f.seconds);
  close(fd);
  return 0;
}

int RunUdpSink(const Flags& f) {
  auto hp = ParseHostPort(f.listen);
  if (!hp.ok()) Usage("--listen");
  const transport::Peer me = PeerOf(f.listen);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a = me.ToSockaddr();
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 1;
  const int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  std::vector<char> buf(2048);
  uint64_t bytes = 0;
  double first = 0, last = 0;
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n == 1 && buf[0] == 'E') break;
    if (n <= 0) continue;
    last = Mono();
    if (first == 0) first = last;
    bytes += uint64_t(n);
  }
  const double secs = last - first;
  std::printf("{\"role\":\"udp_sink\",\"bytes\":%llu,\"seconds\":%.3f,\"goodput_mbps\":%.2f}\n",
              (unsigned long long)bytes, secs, secs > 0 ? bytes * 8 / secs / 1e6 : 0);
  close(fd);
  return 0;
}

}  // namespace
}  // namespace hetps

int main(int argc, char** argv) {
  const hetps::Flags f = hetps::Parse(argc, argv);
  if (f.role == "server") return hetps::RunServer(f);
  if (f.role == "worker") return hetps::RunWorker(f);
  if (f.role == "udp_blast") return hetps::RunUdpBlast(f);
  if (f.role == "udp_sink") return hetps::RunUdpSink(f);
  hetps::Usage("--role must be server, worker, udp_sink or udp_blast");
}
