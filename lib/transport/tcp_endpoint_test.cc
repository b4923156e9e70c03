// TcpEndpoint over loopback: flows arrive exactly and the handle finishes on
// the receiver's STOP; the peer identity is the sender's data port; the
// congestion control asked for is the one the kernel runs; bad streams are
// counted and cut without losing what other connections deliver.
#include "lib/transport/tcp_endpoint.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace transport {
namespace {

constexpr uint32_t kChunkFloats = 4096;

// Reassembles flows by (chunk, offset); refuses flows when told to.
class Sink : public Receiver {
 public:
  explicit Sink(size_t floats) : buf_(floats, std::nanf("")) {}
  DropReason AcceptFlow(const Peer& from, const Header&) override {
    absl::MutexLock lock(&mu_);
    senders_.push_back(from);
    return accept_ ? DropReason::kNone : DropReason::kUnexpected;
  }
  void OnData(const Peer&, const Header& h, const uint8_t* payload) override {
    absl::MutexLock lock(&mu_);
    const size_t at = size_t(h.chunk_id) * kChunkFloats + h.chunk_offset;
    REQUIRE(at + h.payload_bytes / 4 <= buf_.size());
    std::memcpy(buf_.data() + at, payload, h.payload_bytes);
  }
  void OnFlowDone(const Peer&, const FlowResult& r) override {
    absl::MutexLock lock(&mu_);
    results_.push_back(r);
  }
  void set_accept(bool a) {
    absl::MutexLock lock(&mu_);
    accept_ = a;
  }
  std::vector<float> buf() const {
    absl::MutexLock lock(&mu_);
    return buf_;
  }
  std::vector<FlowResult> results() const {
    absl::MutexLock lock(&mu_);
    return results_;
  }
  std::vector<Peer> senders() const {
    absl::MutexLock lock(&mu_);
    return senders_;
  }

 private:
  mutable absl::Mutex mu_;
  bool accept_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<float> buf_ ABSL_GUARDED_BY(mu_);
  std::vector<FlowResult> results_ ABSL_GUARDED_BY(mu_);
  std::vector<Peer> senders_ ABSL_GUARDED_BY(mu_);
};

EndpointConfig Config() {
  EndpointConfig c;
  c.key = testing::TestKey();
  return c;
}

std::vector<PacketSpan> Packets(const std::vector<float>& v, uint32_t first_chunk,
                                const EndpointConfig& c) {
  return testing::ChunkPackets(v, first_chunk, kChunkFloats, c.payload_floats());
}

// Waits until `pred` holds on fresh stats (published every 2 ms).
template <typename Pred>
bool StatsEventually(const Transport& t, Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred(t.GetStats())) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST_CASE("TCP: flows both ways arrive exactly; handles finish on the receiver's STOP", "[tcp]") {
  const size_t n = 1 << 20;  // 4 MB each way, 3 flows into the server
  Sink at_server(3 * n), at_client(n);
  auto server = TcpEndpoint::Create(Config(), &at_server);
  REQUIRE(server.ok());
  auto client = TcpEndpoint::Create(Config(), &at_client);
  REQUIRE(client.ok());
  const EndpointConfig& c = (*client)->config();
  std::vector<std::vector<float>> data;
  std::vector<std::shared_ptr<SendHandle>> handles;
  size_t packets = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    data.push_back(testing::Pattern(n, 10 + i));
    auto p = Packets(data.back(), i * (n / kChunkFloats), c);
    packets = p.size();
    SendOptions o;  // carried whole to the receiver's FlowResult
    o.plan = 5;
    o.samples = 10 + i;
    handles.push_back((*client)->Send((*server)->local(), 7, std::move(p), o));
  }
  const auto back = testing::Pattern(n, 99);
  auto reply = (*server)->Send((*client)->local(), 7, Packets(back, 0, c));
  for (auto& h : handles) {
    REQUIRE(h->Wait(absl::Seconds(30)));
    CHECK(h->close_reason() == CloseReason::kComplete);
    CHECK(h->receiver_packets() == packets);
  }
  REQUIRE(reply->Wait(absl::Seconds(30)));
  // Exact, in place.
  std::vector<float> expect;
  for (auto& d : data) expect.insert(expect.end(), d.begin(), d.end());
  CHECK(at_server.buf() == expect);
  CHECK(at_client.buf() == back);
  const auto results = at_server.results();
  REQUIRE(results.size() == 3);
  for (const FlowResult& r : results) {
    CHECK(r.complete());
    CHECK(r.iteration == 7);
    CHECK(r.plan == 5);
    CHECK((r.samples >= 10 && r.samples <= 12));
    CHECK(r.reason == CloseReason::kComplete);
    // Its frames by when they were read (TCP hides arrivals), each once.
    REQUIRE(r.arrivals.usable());
    uint64_t sum = 0;
    for (uint64_t b : r.arrivals.bytes) sum += b;
    CHECK(sum == r.bytes + uint64_t(r.received) * kHeaderBytes);
    CHECK(r.arrivals.first_bin == r.first_us / ArrivalProfile::kBinUs);
  }
  // The sender is known by its data address (the hello), not the
  // connection's ephemeral port.
  for (const Peer& p : at_server.senders()) CHECK(p == (*client)->local());
  CHECK(StatsEventually(**client, [&](const EndpointStats& s) {
    return s.flows_sent == 3 && s.flows_received == 1 && s.peers.size() == 1;
  }));
  const EndpointStats cs = (*client)->GetStats();
  CHECK(cs.bytes_sent >= 3 * n * sizeof(float));
  CHECK(cs.peers[0].peer == (*server)->local());
  CHECK(cs.peers[0].rtprop_us > 0);
  CHECK(cs.peers[0].cwnd_bytes > 0);
}

TEST_CASE("TCP: the congestion control asked for is the one the kernel runs", "[tcp]") {
  int tried = 0;
  for (const std::string cc : {"cubic", "bbr", "reno"}) {
    if (absl::Status s = CheckTcpCongestion(cc); !s.ok()) {
      WARN("skipping " << cc << ": " << s.message());
      continue;
    }
    ++tried;
    Sink sink(kChunkFloats);
    auto server = TcpEndpoint::Create(Config(), &sink);
    REQUIRE(server.ok());
    EndpointConfig c = Config();
    c.tcp_congestion = cc;
    auto client = TcpEndpoint::Create(c, nullptr);
    REQUIRE(client.ok());
    const auto data = testing::Pattern(kChunkFloats, 1);
    auto h = (*client)->Send((*server)->local(), 0, Packets(data, 0, c));
    REQUIRE(h->Wait(absl::Seconds(10)));
    CHECK((*client)->congestion() == cc);
    // Switching a live connection.
    REQUIRE((*client)->SetCongestion("reno").ok());
    auto h2 = (*client)->Send((*server)->local(), 1, Packets(data, 0, c));
    REQUIRE(h2->Wait(absl::Seconds(10)));
    CHECK((*client)->congestion() == "reno");
  }
  CHECK(tried >= 1);
  // An unknown one is refused with what the kernel offers.
  absl::Status bad = CheckTcpCongestion("no-such-cc");
  CHECK(bad.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(bad.message()).find("available:") != std::string::npos);
  EndpointConfig c = Config();
  c.tcp_congestion = "no-such-cc";
  CHECK(!TcpEndpoint::Create(c, nullptr).ok());
}

// A raw TCP client, for bytes no TcpEndpoint would send.
int RawConnect(const Peer& to) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = to.ToSockaddr();
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// True when the peer closed the connection within a second.
bool ClosedByPeer(int fd) {
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b;
  return recv(fd, &b, 1, 0) == 0;
}

std::vector<uint8_t> Hello(uint16_t port) {
  std::vector<uint8_t> h(kTcpHelloBytes);
  const uint32_t magic = kTcpHelloMagic;
  std::memcpy(h.data(), &magic, 4);  // little-endian host
  h[4] = kTcpHelloVersion;
  h[6] = uint8_t(port);
  h[7] = uint8_t(port >> 8);
  return h;
}

// A DATA frame from 127.0.0.1:port sealed under `key`, its version byte
// set to `version`.
std::vector<uint8_t> DataFrame(const DataKey& key, uint16_t port, uint8_t version) {
  Header h;
  h.flow_id = 1;
  h.total_packets = 2;
  testing::Forger seal(key, 99);
  auto f = seal(h, 16, Peer{htonl(INADDR_LOOPBACK), htons(port)});
  f[2] = version;
  return f;
}

TEST_CASE("TCP: bad hellos, bad frames and forged frames are counted; others still deliver",
          "[tcp]") {
  Sink sink(1 << 16);
  auto server = TcpEndpoint::Create(Config(), &sink);
  REQUIRE(server.ok());
  const Peer at = (*server)->local();
  {
    const int fd = RawConnect(at);
    const char junk[] = "GET / HTTP/1.1\r\n";
    REQUIRE(send(fd, junk, sizeof(junk), 0) > 0);
    CHECK(ClosedByPeer(fd));
    close(fd);
  }
  {
    const int fd = RawConnect(at);
    auto bytes = Hello(4000);
    auto frame = DataFrame(testing::TestKey(), 4000, 9);  // unknown version
    bytes.insert(bytes.end(), frame.begin(), frame.end());
    REQUIRE(send(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
    CHECK(ClosedByPeer(fd));
    close(fd);
  }
  const int forged = RawConnect(at);
  {
    auto bytes = Hello(4001);
    // Sealed under a key that is not the job's: dropped, stream kept.
    auto frame = DataFrame(testing::TestKey(1, 0x11), 4001, kVersion);
    bytes.insert(bytes.end(), frame.begin(), frame.end());
    REQUIRE(send(forged, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
  }
  // A well-behaved sender is unaffected.
  auto client = TcpEndpoint::Create(Config(), nullptr);
  REQUIRE(client.ok());
  const auto data = testing::Pattern(1 << 16, 3);
  auto h = (*client)->Send(at, 0, Packets(data, 0, (*client)->config()));
  REQUIRE(h->Wait(absl::Seconds(10)));
  CHECK(sink.buf() == data);
  CHECK(StatsEventually(**server, [](const EndpointStats& s) {
    return s.drops[size_t(DropReason::kBadMagic)] == 1 &&
           s.drops[size_t(DropReason::kBadVersion)] == 1 &&
           s.drops[size_t(DropReason::kForged)] == 1;
  }));
  CHECK(sink.results().size() == 1);
  // The forged stream's connection was kept (frames are skipped, not the link).
  timeval tv{0, 200000};
  setsockopt(forged, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b;
  CHECK(recv(forged, &b, 1, 0) < 0);
  close(forged);
}

TEST_CASE("TCP: refused flows, unreachable peers and shutdown end with clear errors", "[tcp]") {
  Sink sink(1 << 16);
  sink.set_accept(false);
  auto server = TcpEndpoint::Create(Config(), &sink);
  REQUIRE(server.ok());
  auto client = TcpEndpoint::Create(Config(), nullptr);
  REQUIRE(client.ok());
  const auto data = testing::Pattern(1 << 16, 4);
  const EndpointConfig& c = (*client)->config();
  auto refused = (*client)->Send((*server)->local(), 0, Packets(data, 0, c));
  CHECK(!refused->Wait(absl::Milliseconds(300)));
  CHECK(StatsEventually(**server, [](const EndpointStats& s) {
    return s.drops[size_t(DropReason::kUnexpected)] > 0;
  }));
  (*client)->Cancel(refused);
  REQUIRE(refused->Wait(absl::Seconds(5)) == false);
  CHECK(refused->status().code() == absl::StatusCode::kCancelled);
  // Nothing listens on a port just released.
  Peer nobody;
  {
    auto gone = TcpEndpoint::Create(Config(), nullptr);
    REQUIRE(gone.ok());
    nobody = (*gone)->local();
  }
  auto lost = (*client)->Send(nobody, 0, Packets(data, 0, c));
  lost->Wait(absl::Seconds(5));
  REQUIRE(lost->done());
  CHECK(lost->status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(lost->status().message()).find("connect") != std::string::npos);
  // Bad flows are refused at once.
  auto empty = (*client)->Send((*server)->local(), 0, {});
  CHECK(empty->status().code() == absl::StatusCode::kInvalidArgument);
  // Shutdown cancels what is still waiting for its STOP.
  auto pending = (*client)->Send((*server)->local(), 1, Packets(data, 0, c));
  absl::SleepFor(absl::Milliseconds(50));
  (*client)->Shutdown();
  REQUIRE(pending->done());
  CHECK(pending->status().code() == absl::StatusCode::kCancelled);
  auto after = (*client)->Send((*server)->local(), 2, Packets(data, 0, c));
  CHECK(after->status().code() == absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace transport
}  // namespace hetps
