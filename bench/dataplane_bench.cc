// Data-plane goodput on loopback against a raw UDP baseline measured in the
// same run: a 100 MB transfer, 1-to-1 and 2-to-1 (each sender sends its share
// of the 100 MB), all with the same datagram size.
//
//   raw:   sendmmsg blast of the bytes in datagrams of packet_bytes, receiver
//          recvmmsg counting what arrives (no ACKs, no pacing, losses ignored)
//   hetps: Endpoint flows (every byte delivered, per-packet ACKs)
//
// Goodput = payload bytes delivered / time from first send to last delivery.
// Prints a table and the ratio hetps / raw, the median over back-to-back
// pairs (goal: >= 0.6). Loopback on a shared VM is noisy: use --repeats >= 5.
//
// usage: dataplane_bench [--mb 100] [--packet-bytes 1400] [--repeats 3] [--verbose]
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
double RawGoodputGbps(size_t bytes_each, int senders, uint32_t packet_bytes) {
  auto rx = UdpSocket::Create(HostPort{"127.0.0.1", 0}, 32u << 20, 64, kDatagramBytesMax);
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
      for (int i = 0; i < n; ++i) got += in[i].len - kHeaderBytes;
      if (n > 0) last_rx = Clock::now();
    }
    received = got;
  });
  std::vector<uint8_t> payload(packet_bytes, 0x5A);
  const auto start = Clock::now();
  std::vector<std::thread> tx;
  for (int s = 0; s < senders; ++s) {
    tx.emplace_back([&] {
      auto sock = UdpSocket::Create(HostPort{"127.0.0.1", 0}, 8u << 20, 64, kDatagramBytesMax);
      if (!sock.ok()) return;
      const size_t packets = bytes_each / (packet_bytes - kHeaderBytes);
      std::vector<OutDatagram> batch(64, OutDatagram{to, payload.data(), packet_bytes, nullptr, 0});
      size_t sent = 0;
      while (sent < packets) {
        int n = (*sock)->SendBatch(batch.data(), std::min<size_t>(64, packets - sent));
        if (n > 0) sent += n;
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
  bool AcceptFlow(const Peer&, const Header&) override { return true; }
  void OnData(const Peer&, const Header& h, const uint8_t* p) override {
    const size_t at = (size_t(h.chunk_id) * kChunk + h.chunk_offset) % (buf_.size() - 20000);
    std::memcpy(buf_.data() + at, p, h.payload_bytes);
  }
  void OnFlowDone(const Peer&, uint32_t, uint32_t) override {
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

HetpsResult HetpsGoodputGbps(size_t bytes_each, int senders, uint32_t packet_bytes, bool verbose) {
  EndpointConfig c;
  c.session = 42;
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
  bool verbose = false;  // per-peer estimates and CPU use on stderr
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--verbose") verbose = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") absl::SimpleAtoi(argv[i + 1], &mb);
    if (a == "--packet-bytes") absl::SimpleAtoi(argv[i + 1], &packet_bytes);
    if (a == "--repeats") absl::SimpleAtoi(argv[i + 1], &repeats);
  }
  std::printf("data-plane goodput, loopback, %zu MB total, %u-byte datagrams, median of %d\n", mb,
              packet_bytes, repeats);
  std::printf("%-8s %12s %12s %8s %10s\n", "shape", "raw Gbit/s", "hetps Gbit/s", "ratio", "retx");
  for (int senders : {1, 2}) {
    const size_t each = (mb << 20) / senders;
    std::vector<double> raw, ours, ratios;
    uint64_t retx = 0;
    for (int r = 0; r < repeats; ++r) {
      raw.push_back(RawGoodputGbps(each, senders, packet_bytes));
      HetpsResult h = HetpsGoodputGbps(each, senders, packet_bytes, verbose);
      ours.push_back(h.gbps);
      ratios.push_back(raw.back() > 0 ? h.gbps / raw.back() : 0);
      retx += h.retransmissions;
    }
    const double rm = Median(raw), hm = Median(ours);
    // Ratio: median over back-to-back (raw, hetps) pairs, robust to drift.
    std::printf("%d-to-1   %12.2f %12.2f %8.2f %10llu\n", senders, rm, hm, Median(ratios),
                static_cast<unsigned long long>(retx / repeats));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace transport
}  // namespace hetps

int main(int argc, char** argv) { return hetps::transport::Main(argc, argv); }
