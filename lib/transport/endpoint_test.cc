// Endpoint over real loopback sockets: exact delivery with and without the
// impairment layer (loss, delay, reordering), incast, bad datagrams counted
// by reason, bounds and shutdown.
#include "lib/transport/endpoint.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "absl/synchronization/mutex.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace transport {
namespace {

constexpr uint64_t kSession = 0xC0FFEE1234ull;
constexpr uint32_t kChunkFloats = 4096;

// Reassembles flows into one float buffer at chunk_id * kChunkFloats + offset.
class Assembler : public Receiver {
 public:
  explicit Assembler(size_t floats) : buf_(floats, 0.f) {}
  DropReason AcceptFlow(const Peer&, const Header& h) override {
    return h.iteration != 666 ? DropReason::kNone : DropReason::kUnexpected;
  }
  void OnData(const Peer&, const Header& h, const uint8_t* payload) override {
    const size_t at = size_t(h.chunk_id) * kChunkFloats + h.chunk_offset;
    REQUIRE(at + h.payload_bytes / 4 <= buf_.size());
    std::memcpy(buf_.data() + at, payload, h.payload_bytes);
    if (h.flags & kFlagCritical) ++critical_;
  }
  void OnFlowDone(const Peer&, const FlowResult&) override {
    absl::MutexLock lock(&mu_);
    ++done_;
  }
  bool WaitFlows(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  const std::vector<float>& buf() const { return buf_; }
  int critical() const { return critical_; }

 private:
  std::vector<float> buf_;  // written on the endpoint thread only
  int critical_ = 0;
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

using testing::Pattern;

std::vector<PacketSpan> Packets(const std::vector<float>& v, uint32_t first_chunk,
                                uint32_t payload_floats) {
  return testing::ChunkPackets(v, first_chunk, kChunkFloats, payload_floats);
}

EndpointConfig Config() {
  EndpointConfig c;
  c.session = kSession;
  return c;
}

// One 1 MB flow (~750 packets) from a client configured `cc` to a server
// configured `sc`, over loopback: checks it arrived exactly and returns
// both ends' stats.
struct OneFlow {
  EndpointStats server, client;
};
OneFlow SendOneFlow(const EndpointConfig& sc, const EndpointConfig& cc, int pattern) {
  const size_t n = 1 << 18;
  Assembler rx(n);
  auto server = Endpoint::Create(sc, &rx);
  REQUIRE(server.ok());
  auto client = Endpoint::Create(cc, nullptr);
  REQUIRE(client.ok());
  auto data = Pattern(n, pattern);
  auto h = (*client)->Send((*server)->local(), 1, Packets(data, 0, cc.payload_floats()));
  REQUIRE(h->Wait(absl::Seconds(60)));
  REQUIRE(rx.WaitFlows(1, absl::Seconds(5)));
  CHECK(rx.buf() == data);
  OneFlow f{(*server)->GetStats(), (*client)->GetStats()};
  REQUIRE(!f.client.peers.empty());
  return f;
}

// A client whose datagrams take `delay_us` one way, paced at 40 Mbit/s:
// the packets arrive spread out, one per receive batch (on loopback
// unpaced they arrive in bursts that share an ACK anyway).
EndpointConfig PacedClient(uint32_t delay_us) {
  EndpointConfig c = Config();
  c.impairment.delay_us = delay_us;
  c.congestion.rate_bps_max = 40'000'000;
  return c;
}

TEST_CASE("a 4 MB flow arrives exactly over clean loopback", "[endpoint]") {
  const size_t n = 1 << 20;
  Assembler rx(n);
  auto server = Endpoint::Create(Config(), &rx);
  REQUIRE(server.ok());
  auto client = Endpoint::Create(Config(), nullptr);
  REQUIRE(client.ok());
  auto data = Pattern(n, 1);
  auto h = (*client)->Send((*server)->local(), 5, Packets(data, 0, Config().payload_floats()));
  REQUIRE(h->Wait(absl::Seconds(20)));
  REQUIRE(rx.WaitFlows(1, absl::Seconds(5)));
  CHECK(rx.buf() == data);
  CHECK(rx.critical() == 2 * int(n / kChunkFloats));
  auto st = (*server)->GetStats();
  for (int r = 1; r < int(DropReason::kCount); ++r) {
    if (DropReason(r) != DropReason::kReplayed) CHECK(st.drops[r] == 0);
  }
}

TEST_CASE("loss, delay and reordering: still exact, with retransmissions", "[endpoint]") {
  const size_t n = 1 << 18;  // 1 MB
  Assembler rx(n);
  EndpointConfig sc = Config();
  sc.impairment.loss = 0.05;  // ACKs lost too
  sc.impairment.seed = 7;
  auto server = Endpoint::Create(sc, &rx);
  REQUIRE(server.ok());
  EndpointConfig cc = Config();
  cc.impairment.loss = 0.10;
  cc.impairment.delay_us = 2000;
  cc.impairment.jitter_us = 1000;  // reorders
  cc.impairment.seed = 9;
  auto client = Endpoint::Create(cc, nullptr);
  REQUIRE(client.ok());
  auto data = Pattern(n, 2);
  auto h = (*client)->Send((*server)->local(), 1, Packets(data, 0, cc.payload_floats()));
  REQUIRE(h->Wait(absl::Seconds(60)));
  REQUIRE(rx.WaitFlows(1, absl::Seconds(5)));
  CHECK(rx.buf() == data);
  auto cs = (*client)->GetStats();
  INFO("retransmissions " << cs.retransmissions << ", impairment drops " << cs.impairment_dropped);
  CHECK(cs.retransmissions > 0);
  CHECK(h->retransmissions() > 0);
  CHECK(cs.impairment_dropped > 0);
  REQUIRE(!cs.peers.empty());
  CHECK(cs.peers[0].rtprop_us >= 2000);  // sees the emulated delay
}

// Delayed ACKs (EndpointConfig::ack_every, ack_delay_max_us): over a 20 ms
// path at 40 Mbit/s the receiver holds a flow's ACKs up to RTprop / 8 (2.5
// ms, under a 4 ms ceiling) or 16 packets,
// several times fewer ACK datagrams than one per receive batch, and the
// sender's RTprop still reads the path (the last packet of each batch is
// acknowledged undelayed).
TEST_CASE("delayed ACKs: fewer ACK datagrams, same data, same RTprop", "[endpoint]") {
  uint64_t acks[2] = {0, 0};
  for (int delayed = 0; delayed < 2; ++delayed) {
    EndpointConfig sc = Config();
    sc.ack_delay_max_us = 4000;
    if (!delayed) sc.ack_every = 1;
    const OneFlow f = SendOneFlow(sc, PacedClient(20'000), 5);
    acks[delayed] = f.server.acks_sent;
    const EndpointStats& cs = f.client;
    INFO("delayed " << delayed << ": " << acks[delayed] << " ACK datagrams for "
                    << cs.data_packets_sent << " data packets, RTprop " << cs.peers[0].rtprop_us);
    CHECK(cs.peers[0].rtprop_us >= 20'000);
    CHECK(cs.peers[0].rtprop_us < 22'000);
    if (delayed) CHECK(acks[1] * 4 < cs.data_packets_sent);
  }
  INFO("ACK datagrams: immediate " << acks[0] << ", delayed " << acks[1]);
  CHECK(acks[1] * 2 < acks[0]);
}

// ACKs are not resent: a lost ACK datagram (with delayed ACKs it names up
// to 17 packets) used to read as that many lost packets, resent for
// nothing and counted as a congestion round. Each ACK now also carries
// the flow's prefix (everything below it arrived), so the next ACK covers
// the lost one's packets. The receiver's impairment drops 30% of what it
// sends: its ACKs only.
TEST_CASE("lost ACKs: the ACK prefix keeps them from reading as lost data", "[endpoint]") {
  uint64_t retx[2] = {0, 0};
  for (int prefix = 0; prefix < 2; ++prefix) {
    EndpointConfig sc = Config();
    sc.ack_prefix = prefix == 1;
    sc.impairment.loss = 0.3;
    sc.impairment.seed = 11;
    const OneFlow f = SendOneFlow(sc, PacedClient(10'000), 6);
    const EndpointStats& ss = f.server;
    const EndpointStats& cs = f.client;
    retx[prefix] = cs.retransmissions;
    INFO("prefix " << prefix << ": " << ss.impairment_dropped << " of " << ss.acks_sent
                   << " ACK datagrams lost, " << cs.retransmissions << " retransmissions of "
                   << cs.data_packets_sent << " data packets, " << cs.peers[0].congestion_rounds
                   << " congestion rounds");
    CHECK(ss.impairment_dropped > 10);
    if (prefix) {
      // Only lost ACKs of the flow's last packets still cost resends (the
      // retransmission timer) and a congestion round or two.
      CHECK(cs.retransmissions <= 50);
      CHECK(cs.peers[0].congestion_rounds <= 3);
    }
  }
  INFO("retransmissions: without the prefix " << retx[0] << ", with it " << retx[1]);
  CHECK(retx[0] > 4 * retx[1] + 40);
}

// Lost ACKs behind a hole: with data lost too, the prefix stops at the
// first missing packet until its resend arrives (a loss-tolerant flow's
// until the end), so the prefix does not cover the packets a lost ACK
// named; they read as lost, were resent for nothing and counted against
// the window. Each ACK now repeats its predecessor's seqs. The client
// loses 2% of its data, the server 10% of its ACKs.
TEST_CASE("lost ACKs behind a hole: the next ACK repeats the lost one's seqs", "[endpoint]") {
  uint64_t spurious[2] = {0, 0};
  for (int echo = 0; echo < 2; ++echo) {
    EndpointConfig sc = Config();
    sc.ack_echo = echo == 1;
    sc.impairment.loss = 0.1;
    sc.impairment.seed = 17;
    EndpointConfig cc = PacedClient(10'000);
    cc.impairment.loss = 0.02;
    cc.impairment.seed = 19;
    const OneFlow f = SendOneFlow(sc, cc, 8);
    const EndpointStats& cs = f.client;
    spurious[echo] = cs.losses_spurious;
    INFO("echo " << echo << ": " << f.server.impairment_dropped << " of " << f.server.acks_sent
                 << " ACK datagrams lost, " << cs.impairment_dropped << " of "
                 << cs.data_packets_sent << " data packets lost, " << cs.retransmissions
                 << " retransmissions, " << cs.losses_spurious << " spurious, "
                 << cs.peers[0].congestion_rounds << " congestion rounds");
    CHECK(f.server.impairment_dropped > 10);
    CHECK(cs.impairment_dropped > 5);
  }
  INFO("spurious losses: without the echo " << spurious[0] << ", with it " << spurious[1]);
  CHECK(spurious[0] > 20);
  CHECK(spurious[0] > 4 * spurious[1]);
}

// ACKs that come late, not lost: the receiver's impairment holds each of
// its ACK datagrams 0-60 ms (reordering them), so the sender's timer and
// the three-later-ACKs rule declare packets lost that were delivered.
// Their ACKs then arrive before the resend or too soon after it to be for
// it: counted as spurious, and the congestion rounds they caused undone.
TEST_CASE("late ACKs: losses that prove spurious are counted and undone", "[endpoint]") {
  EndpointConfig sc = Config();
  sc.impairment.jitter_us = 60'000;
  sc.impairment.seed = 13;
  const EndpointStats cs = SendOneFlow(sc, PacedClient(10'000), 7).client;
  INFO(cs.losses_timeout << " timer losses, " << cs.losses_spurious << " spurious, "
                         << cs.retransmissions << " retransmissions, " << cs.congestion_rounds
                         << " congestion rounds, " << cs.undone_rounds << " undone");
  CHECK(cs.losses_spurious > 0);
  if (cs.congestion_rounds > 0) CHECK(cs.undone_rounds > 0);
}

TEST_CASE("ack_every and ack_delay_max_us are validated", "[endpoint]") {
  Assembler rx(16);
  EndpointConfig c = Config();
  c.ack_every = 0;
  auto e = Endpoint::Create(c, &rx);
  REQUIRE(!e.ok());
  CHECK(std::string(e.status().message()).find("ack_every") != std::string::npos);
  c = Config();
  c.ack_delay_max_us = 1'000'000;
  e = Endpoint::Create(c, &rx);
  REQUIRE(!e.ok());
  CHECK(std::string(e.status().message()).find("ack_delay_max_us") != std::string::npos);
}

TEST_CASE("two senders into one receiver (incast)", "[endpoint]") {
  const size_t n = 1 << 19;
  Assembler rx(2 * n);
  auto server = Endpoint::Create(Config(), &rx);
  REQUIRE(server.ok());
  auto a = Endpoint::Create(Config(), nullptr);
  auto b = Endpoint::Create(Config(), nullptr);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto da = Pattern(n, 3), db = Pattern(n, 4);
  const uint32_t pf = Config().payload_floats();
  auto ha = (*a)->Send((*server)->local(), 1, Packets(da, 0, pf));
  auto hb = (*b)->Send((*server)->local(), 1, Packets(db, n / kChunkFloats, pf));
  REQUIRE(ha->Wait(absl::Seconds(30)));
  REQUIRE(hb->Wait(absl::Seconds(30)));
  REQUIRE(rx.WaitFlows(2, absl::Seconds(5)));
  CHECK(std::equal(da.begin(), da.end(), rx.buf().begin()));
  CHECK(std::equal(db.begin(), db.end(), rx.buf().begin() + n));
}

// Sends raw bytes from one plain socket (one source address, so a repeated
// datagram is a replay of the same sender's flow).
class RawSender {
 public:
  RawSender() : fd_(socket(AF_INET, SOCK_DGRAM, 0)) { REQUIRE(fd_ >= 0); }
  ~RawSender() { close(fd_); }
  void operator()(const Peer& to, const std::vector<uint8_t>& bytes) {
    sockaddr_in a = to.ToSockaddr();
    CHECK(sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a)) ==
          ssize_t(bytes.size()));
  }

 private:
  int fd_;
};

std::vector<uint8_t> Datagram(Header h, size_t payload) {
  h.payload_bytes = static_cast<uint16_t>(payload);
  std::vector<uint8_t> d(kHeaderBytes + payload, 0);
  EncodeHeader(h, d.data());
  return d;
}

// The receiver's max-min share of its ingress travels in its ACKs
// (btlbw_kbps) and caps each sender's pacing (congestion.h SetRateCap).
// Two senders at 30 Mbit/s each: once a 500 ms ingress bin is measured,
// each hears a share near 30 Mbit/s. (A sender with one peer has no
// egress share of its own, so its cap is the receiver's word.)
TEST_CASE("the receiver's fair share reaches its senders' caps", "[endpoint]") {
  const size_t n = 1 << 20;  // 4 MB each: ~1.1 s at 30 Mbit/s
  Assembler rx(2 * n);
  auto server = Endpoint::Create(Config(), &rx);
  REQUIRE(server.ok());
  EndpointConfig cc = Config();
  cc.congestion.rate_bps_max = 30'000'000;
  auto a = Endpoint::Create(cc, nullptr);
  auto b = Endpoint::Create(cc, nullptr);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto da = Pattern(n, 3), db = Pattern(n, 4);
  const uint32_t pf = cc.payload_floats();
  auto ha = (*a)->Send((*server)->local(), 1, Packets(da, 0, pf));
  auto hb = (*b)->Send((*server)->local(), 1, Packets(db, n / kChunkFloats, pf));
  uint64_t cap_max = 0;
  while (!ha->done() || !hb->done()) {
    for (auto* e : {&*a, &*b}) {
      for (const PeerEstimate& p : (*e)->GetStats().peers)
        cap_max = std::max(cap_max, p.rate_cap_bps);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  REQUIRE(ha->Wait(absl::Seconds(30)));
  REQUIRE(hb->Wait(absl::Seconds(30)));
  REQUIRE(rx.WaitFlows(2, absl::Seconds(5)));
  CHECK(std::equal(da.begin(), da.end(), rx.buf().begin()));
  const uint64_t bytes = (*a)->GetStats().bytes_sent;
  INFO("largest cap a sender heard: "
       << cap_max / 1e6 << " Mbit/s; flows took " << absl::ToDoubleSeconds(ha->elapsed())
       << " s and " << absl::ToDoubleSeconds(hb->elapsed()) << " s for " << bytes << " bytes each");
  CHECK(cap_max >= 15'000'000);
  CHECK(cap_max <= 60'000'000);
  // Pacing holds the rate: no flow ends sooner than its bytes at 30 Mbit/s
  // allow (a 32-bit overflow once paced 1400-byte packets 4.3x too fast).
  const double floor_s = 0.9 * double(bytes) * 8 / 30e6;
  CHECK(absl::ToDoubleSeconds(ha->elapsed()) >= floor_s);
  CHECK(absl::ToDoubleSeconds(hb->elapsed()) >= floor_s);
}

TEST_CASE("truncated, oversized, forged, replayed and unexpected datagrams are counted",
          "[endpoint]") {
  Assembler rx(kChunkFloats);
  auto server = Endpoint::Create(Config(), &rx);
  REQUIRE(server.ok());
  const Peer to = (*server)->local();
  RawSender Raw;
  Header h;
  h.session = kSession;
  h.flow_id = 77;
  h.total_packets = 2;
  h.iteration = 3;
  auto good = Datagram(h, 16);
  Raw(to, std::vector<uint8_t>(good.begin(), good.begin() + 20));  // truncated
  Raw(to, std::vector<uint8_t>(kDatagramBytesMax + 100, 1));       // oversized
  auto magic = good;
  magic[0] = 'X';
  Raw(to, magic);  // bad magic
  Header forged = h;
  forged.session = kSession + 1;
  Raw(to, Datagram(forged, 16));  // forged
  Header refused = h;
  refused.flow_id = 78;
  refused.iteration = 666;  // the receiver refuses this flow
  Raw(to, Datagram(refused, 16));
  Raw(to, good);  // delivered
  Raw(to, good);  // replayed
  Header odd = h;
  odd.flow_id = 79;
  Raw(to, Datagram(odd, 6));  // misaligned
  // Counters are published within a few milliseconds.
  EndpointStats st;
  for (int i = 0; i < 200; ++i) {
    st = (*server)->GetStats();
    if (st.datagrams_received >= 8) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto count = [&](DropReason r) { return st.drops[size_t(r)]; };
  CHECK(st.datagrams_received == 8);
  CHECK(count(DropReason::kTruncated) == 1);
  CHECK(count(DropReason::kOversized) == 1);
  CHECK(count(DropReason::kBadMagic) == 1);
  CHECK(count(DropReason::kForged) == 1);
  CHECK(count(DropReason::kUnexpected) == 1);
  CHECK(count(DropReason::kReplayed) == 1);
  CHECK(count(DropReason::kMisaligned) == 1);

  // Still serving: a real flow completes afterwards.
  auto client = Endpoint::Create(Config(), nullptr);
  REQUIRE(client.ok());
  auto data = Pattern(kChunkFloats, 5);
  auto hs = (*client)->Send(to, 4, Packets(data, 0, Config().payload_floats()));
  CHECK(hs->Wait(absl::Seconds(10)));
}

TEST_CASE("bounds and shutdown: clear errors, no hang", "[endpoint]") {
  EndpointConfig c = Config();
  c.send_flows_max = 1;
  auto client = Endpoint::Create(c, nullptr);
  REQUIRE(client.ok());
  auto data = Pattern(1000, 6);
  // Nobody listens on this port: the flow can never finish.
  Peer nowhere = *ResolvePeer(HostPort{"127.0.0.1", 9});
  auto stuck = (*client)->Send(nowhere, 1, Packets(data, 0, c.payload_floats()));
  auto second = (*client)->Send(nowhere, 1, Packets(data, 0, c.payload_floats()));
  CHECK(second->done());
  CHECK(second->status().code() == absl::StatusCode::kResourceExhausted);
  auto empty = (*client)->Send(nowhere, 1, {});
  CHECK(empty->status().code() == absl::StatusCode::kInvalidArgument);
  PacketSpan too_big{0, 0, data.data(), c.payload_floats() + 1, false};
  CHECK((*client)->Send(nowhere, 1, {too_big})->status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(!stuck->Wait(absl::Milliseconds(50)));
  (*client)->Cancel(stuck);
  for (int i = 0; i < 100 && !stuck->done(); ++i) absl::SleepFor(absl::Milliseconds(2));
  CHECK(stuck->status().code() == absl::StatusCode::kCancelled);
  auto later = (*client)->Send(nowhere, 1, Packets(data, 0, c.payload_floats()));
  (*client)->Shutdown();
  CHECK(later->done());
  CHECK(later->status().code() == absl::StatusCode::kCancelled);
  CHECK(!Endpoint::Create(
             [] {
               EndpointConfig bad;
               bad.packet_bytes = 10;
               return bad;
             }(),
             nullptr)
             .ok());
}

}  // namespace
}  // namespace transport
}  // namespace hetps
