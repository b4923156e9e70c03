#include "lib/daemon/link_meter.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace {

transport::FlowResult Flow(uint64_t bytes, uint32_t packets, uint64_t first_us, uint64_t last_us) {
  transport::FlowResult r;
  r.total_packets = r.received = packets;
  r.bytes = bytes;
  r.first_us = first_us;
  r.last_us = last_us;
  return r;
}

TEST_CASE("a link's rate: bytes after the first packet over the time to the last", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({/*probe_bytes=*/100'000, /*probe_num=*/3, /*report_rate=*/0.1}, &clock);
  const transport::Peer a{1, 1}, b{2, 2};
  // 11 packets of 100 kB (and 108 bytes of headers each): 10 after the
  // first, in 80 ms.
  for (int i = 0; i < 2; ++i) m.OnFlow(a, Flow(1'100'000, 11, 1000, 81'000));
  CHECK(m.TakeChanged().empty());  // not a full window yet
  m.OnFlow(a, Flow(1'100'000, 11, 1000, 81'000));
  m.OnFlow(b, Flow(50'000, 50, 0, 1000));      // below probe_bytes: ignored
  m.OnFlow(b, Flow(200'000, 1, 0, 1000));      // one packet: no dispersion
  m.OnFlow(b, Flow(200'000, 20, 5000, 5000));  // no time between: ignored
  auto changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].from == a);
  const double per_packet = 100'000 + kPacketOverheadBytes;
  CHECK(changed[0].bytes_per_s == Approx(10 * per_packet / 0.08));
  CHECK(changed[0].flow_bytes == 1'100'000);
  CHECK(changed[0].samples == 3);
  CHECK(m.TakeChanged().empty());  // reported

  // The largest of the window: a slower flow (sharing the link) moves
  // nothing; a lasting drop shows once the window holds only slower ones.
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));  // half the rate
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  CHECK(m.TakeChanged().empty());
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].bytes_per_s == Approx(10 * per_packet / 0.16));
  // The size of the flow that gave the estimate goes with it.
  m.OnFlow(a, Flow(440'000, 11, 0, 20'000));
  CHECK(m.All()[0].flow_bytes == 440'000);
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  CHECK(m.All()[0].flow_bytes == 440'000);  // still the largest rate
  for (int i = 0; i < 3; ++i) m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  CHECK(m.All()[0].flow_bytes == 1'100'000);
  // Within report_rate of what was reported: not again...
  m.OnFlow(a, Flow(1'100'000, 11, 0, 150'000));
  CHECK(m.TakeChanged().empty());
  // ...until kRefreshUs passed with new probes: the link still carries
  // flows, and schedd hears it.
  clock.Advance(absl::Microseconds(LinkMeter::kRefreshUs - 1));
  CHECK(m.TakeChanged().empty());
  clock.Advance(absl::Microseconds(1));
  changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].bytes_per_s == Approx(10 * per_packet / 0.15));
  // No probe since: nothing to say, however long it has been.
  clock.Advance(absl::Seconds(5));
  CHECK(m.TakeChanged().empty());
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  CHECK(m.TakeChanged().size() == 1);
  m.Reset();
  CHECK(m.All().empty());
}

// A token-bucket shaper (tbf's burst) passes a flow's first packets at
// line rate after a pause: only the second half times the link.
TEST_CASE("a link's rate leaves out a flow's first half, where a shaper's burst goes", "[links]") {
  LinkMeter m({/*probe_bytes=*/10'000, /*probe_num=*/1, /*report_rate=*/0.1});
  const transport::Peer a{1, 1};
  // 20 packets of 1000 bytes: 10 in the burst within 1 ms, then one every
  // 8 ms; the 10th (half) at 1 ms, the last at 81 ms.
  transport::FlowResult r = Flow(20'000, 20, 0, 81'000);
  r.mid_us = 1000;
  m.OnFlow(a, r);
  const double per_packet = 1000 + kPacketOverheadBytes;
  auto changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].bytes_per_s == Approx(10 * per_packet / 0.08));
  // From the first packet, as without a middle arrival: about twice that.
  CHECK(19 * per_packet / 0.081 > 1.8 * changed[0].bytes_per_s);
  // A lossy flow that ended with 15 of 20: the 5 after the tenth.
  r.received = 15;
  r.bytes = 15'000;
  r.last_us = 41'000;
  m.OnFlow(a, r);
  CHECK(m.All()[0].bytes_per_s == Approx(5 * per_packet / 0.04));
}

// A link that carries one flow a round (a worker's push) would hold a
// rate from before a drop for probe_num rounds: samples older than the
// window (the job's update period) leave the estimate.
TEST_CASE("a link's estimate forgets samples older than the window", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({/*probe_bytes=*/100'000, /*probe_num=*/4, /*report_rate=*/0.1,
               /*window_us=*/2'000'000},
              &clock);
  const transport::Peer a{1, 1};
  const double per_packet = 100'000 + kPacketOverheadBytes;
  // One flow a second, 10 packets after the first in 80 ms.
  uint64_t at = 1'000'000;
  for (int i = 0; i < 4; ++i, at += 1'000'000) m.OnFlow(a, Flow(1'100'000, 11, at, at + 80'000));
  auto changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  const double fast = 10 * per_packet / 0.08;
  CHECK(changed[0].bytes_per_s == Approx(fast));
  // The link drops to a quarter: the fast sample of the last 2 s still
  // holds the estimate...
  m.OnFlow(a, Flow(1'100'000, 11, at, at + 320'000));
  at += 1'000'000;
  CHECK(m.All()[0].bytes_per_s == Approx(fast));
  CHECK(m.TakeChanged().empty());
  // ...until it is older than the window: two slow probes, not four.
  m.OnFlow(a, Flow(1'100'000, 11, at, at + 320'000));
  changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].bytes_per_s == Approx(fast / 4));
  CHECK(changed[0].samples == 6);
  // The newest sample always counts, however long the link was quiet.
  at += 60'000'000;
  m.OnFlow(a, Flow(1'100'000, 11, at, at + 160'000));
  CHECK(m.All()[0].bytes_per_s == Approx(fast / 2));
}

TEST_CASE("link meter settings are checked", "[links]") {
  CHECK(ValidateLinkMeterConfig({}).ok());
  CHECK(!ValidateLinkMeterConfig({100, 4, 0.1}).ok());
  CHECK(!ValidateLinkMeterConfig({65536, 0, 0.1}).ok());
  CHECK(!ValidateLinkMeterConfig({65536, 4, 1.5}).ok());
  CHECK(!ValidateLinkMeterConfig({65536, 4, 0.1, 1000}).ok());
}

TEST_CASE("a node's traffic: every flow's bytes over the bins it spanned", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({/*probe_bytes=*/100'000, /*probe_num=*/3, /*report_rate=*/0.1}, &clock);
  NodeTraffic t;
  CHECK(!m.TakeTraffic(10, &t));  // nothing received yet
  const transport::Peer a{1, 1}, b{2, 2}, self{3, 3};
  m.SetLocalIp(self.ip);
  // The clock's MonotonicMicros starts at 1 s: bin 20 is [1 s, 1.05 s).
  // 10 packets over 100 ms from bin 20's middle, and a flow too small
  // to probe a link but counted here, both from other hosts; one from
  // this node's own host, which never crosses its access link.
  m.OnFlow(a, Flow(10'000, 10, 1'025'000, 1'125'000));
  m.OnFlow(b, Flow(500, 1, 1'130'000, 1'130'000));
  m.OnFlow(self, Flow(1'000'000, 100, 1'000'000, 1'100'000));
  clock.Advance(absl::Milliseconds(140));  // now 1.14 s: bin 22 is the current one
  REQUIRE(m.TakeTraffic(4, &t));
  CHECK(t.bin_ms == 50);
  // Bins 19..22; bin 19 starts 1.05 s before now on the calendar.
  CHECK(t.first_bin_unix_ms == 1'700'000'000'000 + 140 - 1140 + 950);
  const double wire = 10'000 + 10 * kPacketOverheadBytes;
  REQUIRE(t.in_bytes.size() == 4);
  CHECK(t.in_bytes[0] == 0);
  CHECK(t.in_bytes[1] == uint64_t(wire / 4 + 0.5));  // 25 of its 100 ms
  CHECK(t.in_bytes[2] == uint64_t(wire / 2 + 0.5));
  CHECK(t.in_bytes[3] == uint64_t(wire / 4 + 500 + kPacketOverheadBytes + 0.5));
  CHECK(!m.TakeTraffic(4, &t));  // nothing new since
  // A flow much later slides the window: the old bins are gone.
  m.OnFlow(a, Flow(1000, 1, 30'000'000, 30'000'000));
  clock.Advance(absl::Seconds(29));
  REQUIRE(m.TakeTraffic(LinkMeter::kTrafficBins + 5, &t));
  REQUIRE(t.in_bytes.size() == LinkMeter::kTrafficBins);
  uint64_t total = 0;
  for (uint64_t v : t.in_bytes) total += v;
  CHECK(total == 1000 + kPacketOverheadBytes);
  m.Reset();
  CHECK(!m.TakeTraffic(4, &t));
}

TEST_CASE("a node's traffic: each half of a flow over its own time", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({}, &clock);
  // Half the packets in the first 10 ms, the rest over the next 90 ms
  // (others took the link meanwhile): bin 20 [1 s, 1.05 s) holds the
  // first half and 40/90 of the second, bin 21 the other 50/90.
  transport::FlowResult r = Flow(10'000, 10, 1'000'000, 1'100'000);
  r.mid_us = 1'010'000;
  m.OnFlow({1, 1}, r);
  clock.Advance(absl::Milliseconds(60));  // now 1.06 s: bin 21
  NodeTraffic t;
  REQUIRE(m.TakeTraffic(2, &t));
  const double wire = 10'000 + 10 * kPacketOverheadBytes;
  REQUIRE(t.in_bytes.size() == 2);
  CHECK(t.in_bytes[0] == uint64_t(wire / 2 + wire / 2 * 40 / 90 + 0.5));
  CHECK(t.in_bytes[1] == uint64_t(wire / 2 * 50 / 90 + 0.5));
}

}  // namespace
}  // namespace hetps
