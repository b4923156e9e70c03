// Loss-tolerant (LTP) flows on the seeded simulated network (threadless
// endpoints, simulated time): critical packets always arrive, Early Close
// fires at each threshold, STOP reaches the sender (even when STOPs are
// lost), and what arrived is exact.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "lib/transport/endpoint.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace transport {
namespace {

constexpr uint32_t kChunkFloats = 4096;

// Places packets at chunk_id * kChunkFloats + offset in a NaN-filled buffer
// and remembers which packets and flows arrived, and when (the clock's
// time). Callbacks run inside Step() on the test's thread.
class Recorder : public Receiver {
 public:
  Recorder(size_t floats, const Clock* clock) : clock_(clock), buf_(floats, std::nanf("")) {}
  DropReason AcceptFlow(const Peer&, const Header&) override { return DropReason::kNone; }
  void OnData(const Peer&, const Header& h, const uint8_t* payload) override {
    const size_t at = size_t(h.chunk_id) * kChunkFloats + h.chunk_offset;
    REQUIRE(at + h.payload_bytes / 4 <= buf_.size());
    std::memcpy(buf_.data() + at, payload, h.payload_bytes);
    if (h.flags & kFlagCritical) critical_.push_back(at);
  }
  void OnFlowDone(const Peer&, const FlowResult& r) override {
    results_.push_back(r);
    done_at_ = clock_->Now();
  }
  const std::vector<float>& buf() const { return buf_; }
  std::vector<size_t> critical() const { return critical_; }
  const std::vector<FlowResult>& results() const { return results_; }
  absl::Time done_at() const { return done_at_; }

 private:
  const Clock* const clock_;
  std::vector<float> buf_;
  std::vector<size_t> critical_;
  std::vector<FlowResult> results_;
  absl::Time done_at_;
};

using testing::Pattern;
using testing::SimRun;

LinkImpairment Loss(double loss) {
  LinkImpairment l;
  l.loss = loss;
  return l;
}

std::vector<PacketSpan> Packets(const std::vector<float>& v, uint32_t payload_floats) {
  return testing::ChunkPackets(v, 0, kChunkFloats, payload_floats);
}

// Chunk-relative starts of every critical packet (first and last of each chunk).
std::vector<size_t> CriticalStarts(size_t n, uint32_t payload_floats) {
  std::vector<size_t> out;
  for (size_t off = 0; off < n; off += kChunkFloats) {
    const size_t len = std::min<size_t>(kChunkFloats, n - off);
    out.push_back(off);
    if (len > payload_floats) out.push_back(off + (len - 1) / payload_floats * payload_floats);
  }
  return out;
}

EndpointConfig Config() {
  EndpointConfig c;
  c.key = testing::TestKey();
  return c;
}

SendOptions Lossy() {
  SendOptions o;
  o.loss_tolerant = true;
  return o;
}

// What arrived is exact; what did not is untouched (NaN): never a value
// half-written, never a packet delivered twice.
void CheckDeliveredExact(const std::vector<float>& got, const std::vector<float>& sent,
                         size_t* missing) {
  *missing = 0;
  size_t wrong = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    if (std::isnan(got[i])) {
      ++*missing;
    } else if (got[i] != sent[i]) {
      ++wrong;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("LTP: critical packets always arrive under 30% loss; the flow closes at the fraction",
          "[ltp]") {
  const size_t n = 1 << 18;  // 1 MB, 64 chunks, 128 critical packets
  SimRun run(3);
  Recorder rx(n, &run.clock());
  EndpointConfig sc = Config();
  sc.early_close.lt_fixed_us = 1000;     // LT passes almost at once ...
  sc.early_close.slack_us = 20'000'000;  // ... the deadline never
  sc.early_close.min_fraction = 0.8;
  Endpoint* server = run.Add(sc, &rx);
  run.net().SetEgress(server->local(), Loss(0.3));  // ACKs and STOPs lost too
  EndpointConfig cc = Config();
  // At 20 Mbit/s the first pass takes ~0.4 s: lost critical packets (the
  // first 128 sent) are resent, perhaps more than once at an RTO each, long
  // before the deferred retransmissions could complete the flow. Unpaced on
  // loopback, RQ could drain before the last critical resend and the flow
  // would close complete instead of at the fraction.
  cc.congestion.initial_rate_bps = 20'000'000;
  cc.congestion.rate_bps_max = 20'000'000;
  Endpoint* client = run.Add(cc, nullptr);
  run.net().SetEgress(client->local(), Loss(0.3));
  const auto data = Pattern(n, 5);
  auto h = client->Send(server->local(), 0, Packets(data, cc.payload_floats()), Lossy());
  REQUIRE(run.RunUntil([&] { return h->done() && rx.results().size() == 1; }, absl::Seconds(30)));
  const FlowResult r = rx.results()[0];
  INFO("received " << r.received << " of " << r.total_packets);
  CHECK(r.reason == CloseReason::kEarlyFraction);
  CHECK(r.received >= PacketsForFraction(r.total_packets, 0.8));
  CHECK(r.received < r.total_packets);
  // Every critical packet is in.
  auto crit = rx.critical();
  std::sort(crit.begin(), crit.end());
  crit.erase(std::unique(crit.begin(), crit.end()), crit.end());
  CHECK(crit == CriticalStarts(n, cc.payload_floats()));
  size_t missing = 0;
  CheckDeliveredExact(rx.buf(), data, &missing);
  CHECK(missing > 0);
  // The sender learned how the flow closed (from a STOP, resent if lost).
  CHECK(h->close_reason() == CloseReason::kEarlyFraction);
  CHECK(h->receiver_packets() == r.received);
  const EndpointStats ss2 = server->GetStats();
  CHECK(ss2.lossy_closes[size_t(CloseReason::kEarlyFraction)] == 1);
  CHECK(ss2.packets_missing == r.total_packets - r.received);
}

TEST_CASE("LTP: before the LT threshold the receiver waits for every packet", "[ltp]") {
  const size_t n = 1 << 17;
  SimRun run(11);
  Recorder rx(n, &run.clock());
  EndpointConfig sc = Config();
  sc.early_close.lt_fixed_us = 30'000'000;  // LT never passes: lost packets come from RQ
  sc.early_close.slack_us = 0;
  Endpoint* server = run.Add(sc, &rx);
  EndpointConfig cc = Config();
  Endpoint* client = run.Add(cc, nullptr);
  run.net().SetEgress(client->local(), Loss(0.2));
  const auto data = Pattern(n, 6);
  auto h = client->Send(server->local(), 0, Packets(data, cc.payload_floats()), Lossy());
  REQUIRE(run.RunUntil([&] { return h->done() && rx.results().size() == 1; }, absl::Seconds(30)));
  CHECK(rx.results()[0].reason == CloseReason::kComplete);
  CHECK(rx.buf() == data);
  // Lost normal packets were resent from RQ, after the new ones.
  CHECK(client->GetStats().deferred_retransmissions > 0);
  CHECK(h->close_reason() == CloseReason::kComplete);
}

TEST_CASE("LTP: at the deadline the flow closes with what arrived, and the sender stops", "[ltp]") {
  const size_t n = 1 << 20;  // 4 MB at 20 Mbit/s: 1.7 s to send in full
  SimRun run(8);
  Recorder rx(n, &run.clock());
  EndpointConfig sc = Config();
  sc.early_close.lt_fixed_us = 1000;
  sc.early_close.slack_us = 50'000;  // deadline 51 ms after the first packet
  sc.early_close.min_fraction = 0.99;
  Endpoint* server = run.Add(sc, &rx);
  EndpointConfig cc = Config();
  cc.congestion.initial_rate_bps = 20'000'000;
  cc.congestion.rate_bps_max = 20'000'000;
  Endpoint* client = run.Add(cc, nullptr);
  const auto data = Pattern(n, 8);
  const absl::Time start = run.clock().Now();
  auto h = client->Send(server->local(), 0, Packets(data, cc.payload_floats()), Lossy());
  REQUIRE(run.RunUntil([&] { return h->done() && rx.results().size() == 1; }, absl::Seconds(10)));
  const absl::Duration took = rx.done_at() - start;
  INFO("closed after " << absl::FormatDuration(took));
  CHECK(took >= absl::Milliseconds(50));
  CHECK(took < absl::Milliseconds(900));  // far sooner than the full 1.7 s
  const FlowResult r = rx.results()[0];
  CHECK(r.reason == CloseReason::kDeadline);
  CHECK(r.received < r.total_packets / 2);
  CHECK(h->close_reason() == CloseReason::kDeadline);
  CHECK(h->elapsed() < absl::Seconds(1));
  size_t missing = 0;
  CheckDeliveredExact(rx.buf(), data, &missing);
  CHECK(missing > n / 2);
  CHECK(server->GetStats().lossy_closes[size_t(CloseReason::kDeadline)] == 1);
}

TEST_CASE("LTP: the deadline is the largest LT of the open links plus C", "[ltp]") {
  // Two senders into one receiver; LT comes from the model (no fixed LT):
  // the first flow of each link has no estimate yet and so waits for
  // everything (complete). Later flows carry RTprop/BtlBw; a clean link
  // still delivers everything, so every close is "complete" and the links
  // report a finite LT.
  const size_t n = 1 << 16;
  SimRun run(9);
  Recorder rx(2 * n, &run.clock());
  EndpointConfig sc = Config();
  Endpoint* server = run.Add(sc, &rx);
  Endpoint* a = run.Add(Config(), nullptr);
  Endpoint* b = run.Add(Config(), nullptr);
  const auto data = Pattern(n, 9);
  for (uint32_t it = 0; it < 4; ++it) {
    auto ha = a->Send(server->local(), it, Packets(data, Config().payload_floats()), Lossy());
    auto hb = b->Send(server->local(), it, Packets(data, Config().payload_floats()), Lossy());
    REQUIRE(run.RunUntil([&] { return ha->done() && hb->done(); }, absl::Seconds(10)));
  }
  REQUIRE(run.RunUntil([&] { return rx.results().size() == 8; }, absl::Seconds(5)));
  const EndpointStats st = server->GetStats();
  CHECK(st.lossy_closes[size_t(CloseReason::kComplete)] == 8);
  REQUIRE(st.links.size() == 2);
  for (const LinkEstimate& l : st.links) {
    CHECK(l.lossy_flows == 4);
    CHECK(l.lt_us > 0);
    CHECK(l.lt_us < 10'000'000);  // a real estimate by now
  }
}

TEST_CASE("reliable flows stay exact under 30% loss next to LTP ones (pull)", "[ltp]") {
  const size_t n = 1 << 17;
  SimRun run(21);
  Recorder rx(2 * n, &run.clock());
  EndpointConfig sc = Config();
  sc.early_close.lt_fixed_us = 1000;
  sc.early_close.slack_us = 1000;
  Endpoint* server = run.Add(sc, &rx);
  run.net().SetEgress(server->local(), Loss(0.3));
  EndpointConfig cc = Config();
  Endpoint* client = run.Add(cc, nullptr);
  run.net().SetEgress(client->local(), Loss(0.3));
  const auto data = Pattern(2 * n, 10);
  // The reliable flow (no SendOptions) ignores Early Close entirely.
  auto h = client->Send(server->local(), 0, Packets(data, cc.payload_floats()));
  REQUIRE(run.RunUntil([&] { return h->done() && rx.results().size() == 1; }, absl::Seconds(60)));
  CHECK(rx.results()[0].reason == CloseReason::kComplete);
  CHECK(rx.buf() == data);
}

}  // namespace
}  // namespace transport
}  // namespace hetps
