// Data-plane goodput on loopback against a raw UDP baseline measured in the
// same run: a 100 MB transfer, 1-to-1 and 2-to-1 (each sender sends its share
// of the 100 MB), all with the same datagram size.
//
//   raw:   sendmmsg blast of the bytes (head + body from the sender's buffer,
//          as hetps sends them) in datagrams of packet_bytes, receiver
//          recvmmsg counting what arrives (no ACKs, no pacing, losses ignored)
//   hetps: Endpoint flows (every byte delivered, per-packet ACKs), every
//          datagram authenticated (AES-256-GCM tag, replay window)
//   hetps-noauth: the same with authentication off (tags zero, unchecked):
//          the MAC's cost is the ratio hetps / hetps-noauth (goal >= 0.85)
//
//   both also with UDP GSO/GRO (udp_socket.h), hetps's default
//
// Goodput = payload bytes delivered / time from first send to last delivery,
// in Gbit/s. Prints a table and the ratio hetps / raw, the median over
// back-to-back runs (goal: >= 0.6). Loopback on a shared VM is noisy: use
// --repeats >= 5.
//
// usage: dataplane_bench [--mb 100] [--packet-bytes 1400] [--repeats 3] [--verbose]
//                        [--only-hetps]
#include <arpa/inet.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/udp_socket.h"

namespace hetps {
namespace transport {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Raw baseline: `senders` threads blast `bytes_each` to one receiver.
double RawGoodputGbps(size_t bytes_each, int senders, uint32_t packet_bytes, bool offload) {
  UdpSocketOptions ro;
  ro.buffer_bytes = 32u << 20;
  ro.gso = ro.gro = offload;
  auto rx = UdpSocket::Create(HostPort{"127.0.0.1", 0}, ro);
  if (!rx.ok()) return 0;
  const Peer to = (*rx)->local();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> received{0};
  Clock::time_point last_rx;
  std::thread receiver([&] {
    std::vector<InDatagram> in;
    pollfd pfd{(*rx)->fd(), POLLIN, 0};
    uint64_t got = 0;
    while (!done.load()) {
      if (poll(&pfd, 1, 20) <= 0) continue;
      int n = (*rx)->RecvBatch(&in);
      for (const InDatagram& d : in) got += d.len - kHeaderBytes;
      if (n > 0) last_rx = Clock::now();
    }
    received = got;
  });
  // Like hetps, each sender sends its own bytes_each bytes from memory (not
  // one cache-hot datagram over and over), a 48-byte head then the body.
  const size_t body = packet_bytes - kHeaderBytes;
  const size_t packets = bytes_each / body;
  std::vector<std::vector<uint8_t>> data(senders, std::vector<uint8_t>(packets * body, 0x5A));
  std::vector<uint8_t> head(kHeaderBytes, 0xA5);
  const auto start = Clock::now();
  std::vector<std::thread> tx;
  for (int s = 0; s < senders; ++s) {
    tx.emplace_back([&, s] {
      UdpSocketOptions so;
      so.gso = so.gro = offload;
      auto sock = UdpSocket::Create(HostPort{"127.0.0.1", 0}, so);
      if (!sock.ok()) return;
      const size_t batch_max = offload ? 64 * kGsoSegmentsMax : 64;
      std::vector<OutDatagram> batch(batch_max);
      size_t sent = 0;
      while (sent < packets) {
        const size_t n = std::min<size_t>(batch_max, packets - sent);
        for (size_t i = 0; i < n; ++i) {
          batch[i] =
              OutDatagram{to, head.data(), head.size(), data[s].data() + (sent + i) * body, body};
        }
        const int done = (*sock)->SendBatch(batch.data(), n);
        if (done > 0) sent += done;
      }
    });
  }
  for (auto& t : tx) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // drain
  done = true;
  receiver.join();
  const double secs = Seconds(start, last_rx);
  return secs > 0 ? double(received) * 8 / secs / 1e9 : 0;
}

class Sink : public Receiver {
 public:
  explicit Sink(size_t floats) : buf_(floats) {}
  DropReason AcceptFlow(const Peer&, const Header&) override { return DropReason::kNone; }
  void OnData(const Peer&, const Header& h, const uint8_t* p) override {
    const size_t at = (size_t(h.chunk_id) * kChunk + h.chunk_offset) % (buf_.size() - 20000);
    std::memcpy(buf_.data() + at, p, h.payload_bytes);
  }
  void OnFlowDone(const Peer&, const FlowResult&) override {
    absl::MutexLock l(&mu_);
    ++flows_;
    last_ = Clock::now();
  }
  Clock::time_point WaitFlows(int n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return flows_ >= n; };
    mu_.Await(absl::Condition(&enough));
    return last_;
  }
  static constexpr uint32_t kChunk = 1 << 20;

 private:
  std::vector<float> buf_;
  absl::Mutex mu_;
  int flows_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_ ABSL_GUARDED_BY(mu_);
};

struct HetpsResult {
  double gbps = 0;
  uint64_t retransmissions = 0;
};

HetpsResult HetpsGoodputGbps(size_t bytes_each, int senders, uint32_t packet_bytes, bool offload,
                             bool authenticate, bool verbose) {
  EndpointConfig c;
  c.gso = c.gro = offload;
  c.authenticate = authenticate;
  auto key = RandomKeyBytes();
  if (!key.ok()) return {};
  c.key = *DataKeyFromBytes(1, *key);
  c.packet_bytes = packet_bytes;
  c.socket_buffer_bytes = 32u << 20;
  Sink sink(16u << 20);
  auto server = Endpoint::Create(c, &sink);
  if (!server.ok()) return {};
  std::vector<std::unique_ptr<Endpoint>> clients;
  const size_t floats = bytes_each / sizeof(float);
  std::vector<float> data(floats, 1.5f);
  std::vector<std::vector<PacketSpan>> flows(senders);
  for (int s = 0; s < senders; ++s) {
    clients.push_back(std::move(*Endpoint::Create(c, nullptr)));
    for (size_t off = 0, chunk = 0; off < floats; off += Sink::kChunk, ++chunk) {
      AppendPackets(static_cast<uint32_t>(chunk), data.data() + off,
                    static_cast<uint32_t>(std::min<size_t>(Sink::kChunk, floats - off)),
                    c.payload_floats(), true, &flows[s]);
    }
  }
  auto cpu = [] {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  const double cpu0 = cpu();
  const auto start = Clock::now();
  std::vector<std::shared_ptr<SendHandle>> handles;
  for (int s = 0; s < senders; ++s) {
    handles.push_back(clients[s]->Send(server->get()->local(), 1, std::move(flows[s])));
  }
  for (auto& h : handles) h->Wait(absl::Seconds(120));
  const auto end = sink.WaitFlows(senders);
  HetpsResult r;
  for (auto& h : handles) r.retransmissions += h->retransmissions();
  if (verbose) {
    for (auto& cl : clients) {
      for (const auto& pe : cl->GetStats().peers) {
        std::fprintf(stderr,
                     "  peer btlbw %.2f Gbit/s rtprop %u us cwnd %llu B pacing %.2f Gbit/s\n",
                     pe.btlbw_bps / 1e9, pe.rtprop_us, (unsigned long long)pe.cwnd_bytes,
                     pe.pacing_rate_bps / 1e9);
      }
    }
  }
  const double secs = Seconds(start, end);
  if (verbose) std::fprintf(stderr, "  cpu %.2f cores busy\n", (cpu() - cpu0) / secs);
  r.gbps = double(bytes_each) * senders * 8 / secs / 1e9;
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  size_t mb = 100;
  uint32_t packet_bytes = 1400;
  int repeats = 3;
  bool verbose = false;     // per-peer estimates and CPU use on stderr
  bool only_hetps = false;  // skip the baselines (for profiling)
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--verbose") verbose = true;
    if (std::string(argv[i]) == "--only-hetps") only_hetps = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") absl::SimpleAtoi(argv[i + 1], &mb);
    if (a == "--packet-bytes") absl::SimpleAtoi(argv[i + 1], &packet_bytes);
    if (a == "--repeats") absl::SimpleAtoi(argv[i + 1], &repeats);
  }
  std::printf("data-plane goodput, loopback, %zu MB total, %u-byte datagrams, median of %d\n", mb,
              packet_bytes, repeats);
  std::printf(
      "raw: sendmmsg blast; raw+off: the same with UDP GSO/GRO; hetps: Endpoint flows with\n"
      "offloads (default) and authentication; hetps-plain: without offloads; noauth: offloads,\n"
      "no authentication. Ratios are medians of each run's ratio over back-to-back runs.\n");
  std::printf("%-7s %8s %8s %8s %11s %8s %12s %13s %11s %6s\n", "shape", "raw", "raw+off", "hetps",
              "hetps-plain", "noauth", "hetps/raw", "hetps/raw+off", "auth/noauth", "retx");
  for (int senders : {1, 2}) {
    const size_t each = (mb << 20) / senders;
    std::vector<double> raw, raw_off, ours, plain, noauth, ratio, ratio_off, ratio_auth;
    uint64_t retx = 0;
    for (int r = 0; r < repeats; ++r) {
      raw.push_back(only_hetps ? 0 : RawGoodputGbps(each, senders, packet_bytes, false));
      raw_off.push_back(only_hetps ? 0 : RawGoodputGbps(each, senders, packet_bytes, true));
      HetpsResult h = HetpsGoodputGbps(each, senders, packet_bytes, true, true, verbose);
      HetpsResult n = HetpsGoodputGbps(each, senders, packet_bytes, true, false, verbose);
      HetpsResult p = only_hetps
                          ? HetpsResult{}
                          : HetpsGoodputGbps(each, senders, packet_bytes, false, true, verbose);
      ours.push_back(h.gbps);
      plain.push_back(p.gbps);
      noauth.push_back(n.gbps);
      ratio_auth.push_back(n.gbps > 0 ? h.gbps / n.gbps : 0);
      ratio.push_back(raw.back() > 0 ? h.gbps / raw.back() : 0);
      ratio_off.push_back(raw_off.back() > 0 ? h.gbps / raw_off.back() : 0);
      retx += h.retransmissions;
    }
    std::printf("%d-to-1  %8.2f %8.2f %8.2f %11.2f %8.2f %12.2f %13.2f %11.2f %6llu\n", senders,
                Median(raw), Median(raw_off), Median(ours), Median(plain), Median(noauth),
                Median(ratio), Median(ratio_off), Median(ratio_auth),
                static_cast<unsigned long long>(retx / repeats));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace transport
}  // namespace hetps

int main(int argc, char** argv) { return hetps::transport::Main(argc, argv); }
