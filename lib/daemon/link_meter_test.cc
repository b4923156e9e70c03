#include "lib/daemon/link_meter.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "lib/transport/test_flows.h"

namespace hetps {
namespace {

// (Tests below shadow it with a Spaced of their own.)
constexpr auto Flow = &transport::testing::ReceivedFlow;

// The one link's estimate (none yet: samples 0).
LinkSample Only(LinkMeter& m) {
  std::vector<LinkSample> all = m.All();
  REQUIRE(all.size() <= 1);
  return all.empty() ? LinkSample{} : all[0];
}

// Flows a second apart: each one a span of its own (times relative to its
// start).
struct Spaced {
  uint64_t at = 0;
  transport::FlowResult operator()(uint64_t bytes, uint32_t packets, uint64_t first_us,
                                   uint64_t last_us) {
    at += 1'000'000;
    return Flow(bytes, packets, at + first_us, at + last_us);
  }
};

TEST_CASE("a link's rate: bytes after the first packet over the time to the last", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({/*probe_bytes=*/100'000, /*probe_num=*/3, /*report_rate=*/0.1}, &clock);
  clock.Advance(absl::Seconds(1000));  // every flow below is over
  const transport::Peer a{1, 1}, b{2, 2};
  Spaced Flow;
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
  // Three equal rates: the first gave it, and how old it is goes along
  // (schedd counts a rate by when it was probed).
  CHECK(changed[0].sampled_us == 1'081'000);
  CHECK(changed[0].age_us == clock.MonotonicMicros() - 1'081'000);
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
  const uint64_t fast_end = Flow.at + 20'000;
  m.OnFlow(a, Flow(1'100'000, 11, 0, 160'000));
  CHECK(m.All()[0].flow_bytes == 440'000);   // still the largest rate
  CHECK(m.All()[0].sampled_us == fast_end);  // and older than the newest
  CHECK(m.All()[0].updated_us == Flow.at + 160'000);
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
  r.first_us += 1'000'000;  // a flow of its own
  r.mid_us += 1'000'000;
  r.last_us += 1'000'000;
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
  clock.Advance(absl::Seconds(1000));  // every flow below is over
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

// schedd reads a link at its fastest probe since the moment it reads
// from: a report carries the samples the estimate is the largest of, so
// that a link whose fast probe is older than that still counts at its
// newer ones.
TEST_CASE("a report carries the link's recent probes with their ages", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({/*probe_bytes=*/100'000, /*probe_num=*/4, /*report_rate=*/0.1,
               /*window_us=*/2'000'000},
              &clock);
  clock.Advance(absl::Seconds(1000));
  const uint64_t now_us = clock.MonotonicMicros();
  const transport::Peer a{1, 1};
  const double fast = 10 * (100'000 + kPacketOverheadBytes) / 0.08;
  uint64_t at = 1'000'000;
  for (int i = 0; i < 4; ++i, at += 1'000'000) m.OnFlow(a, Flow(1'100'000, 11, at, at + 80'000));
  m.OnFlow(a, Flow(1'100'000, 11, at, at + 320'000));  // 5.32 s: a quarter as fast
  const std::vector<LinkSample> changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  const LinkSample& s = changed[0];
  CHECK(s.bytes_per_s == Approx(fast));
  CHECK(s.age_us == now_us - 4'080'000);
  // The samples within the window of the newest (ended 3.32 s or later),
  // oldest first.
  REQUIRE(s.probes.size() == 2);
  CHECK(s.probes[0].bytes_per_s == Approx(fast));
  CHECK(s.probes[0].age_us == now_us - 4'080'000);
  CHECK(s.probes[1].bytes_per_s == Approx(fast / 4));
  CHECK(s.probes[1].age_us == now_us - 5'320'000);

  // At most kProbesReported, the newest.
  LinkMeter many({/*probe_bytes=*/100'000, /*probe_num=*/12, /*report_rate=*/0.1,
                  /*window_us=*/60'000'000},
                 &clock);
  at = 1'000'000;
  for (int i = 0; i < 12; ++i, at += 1'000'000) {
    many.OnFlow(a, Flow(1'100'000, 11, at, at + 80'000 + 10'000 * i));
  }
  const LinkSample all = Only(many);
  REQUIRE(all.probes.size() == LinkMeter::kProbesReported);
  CHECK(all.probes.back().age_us == now_us - 12'190'000);
  CHECK(all.probes.front().age_us == now_us - 5'120'000);
  CHECK(all.bytes_per_s == Approx(fast));  // the estimate still takes all 12
}

// A train of 64 KiB segments paced at twice a 10 Mbit/s link through a
// 32 KiB bucket: the first segment after a pause passes at the sender's
// pace, second half too (a bucket x pace / (pace - link) = 64 KiB), and
// the rest at the link. The flows follow one another, so the train is
// timed as one probe, counted once it is over.
TEST_CASE("back-to-back flows are timed as one span, past a shaper's burst", "[links]") {
  FakeClock clock;  // flows are timed from 10 s on its monotonic clock
  const LinkMeterConfig config{/*probe_bytes=*/65'536, /*probe_num=*/4, /*report_rate=*/0.1,
                               /*window_us=*/2'000'000};
  LinkMeter m(config, &clock);
  const transport::Peer a{1, 1};
  const uint32_t packets = 47, payload = 1400;
  const double wire = payload + kPacketOverheadBytes;
  const double link = 1.25e6;                // bytes/s
  const double slot_us = wire * 1e6 / link;  // a packet's time at the link
  uint64_t at = 10'000'000;
  auto segment = [&](double spacing_us) {
    transport::FlowResult r = Flow(uint64_t(packets) * payload, packets, at, 0);
    r.mid_us = at + uint64_t(23 * spacing_us);
    r.last_us = at + uint64_t(46 * spacing_us);
    at = r.last_us + uint64_t(slot_us);  // the next one follows at once
    return r;
  };
  // Alone, the first segment reads twice the link.
  LinkMeter alone(config);
  alone.OnFlow(a, segment(slot_us / 2));
  CHECK(Only(alone).bytes_per_s == Approx(2 * link).epsilon(0.02));
  // Three rounds of a 3-segment train (a share of 12 chunks), 0.5 s apart.
  for (int round = 0; round < 3; ++round) {
    at += 500'000;
    m.OnFlow(a, segment(slot_us / 2));          // at the sender's pace
    CHECK(Only(m).samples == uint64_t(round));  // the span is open
    m.OnFlow(a, segment(slot_us));
    m.OnFlow(a, segment(slot_us));
  }
  CHECK(Only(m).samples == 2);
  // Over once no flow can continue it any more.
  clock.Advance(absl::Microseconds(at - clock.MonotonicMicros()));
  CHECK(Only(m).samples == 2);
  clock.Advance(absl::Milliseconds(200));
  const LinkSample read = Only(m);
  CHECK(read.samples == 3);
  // Each span: 23 packets at the sender's pace and 94 at the link after
  // the first segment's middle, 1.109x the link.
  CHECK(read.bytes_per_s == Approx(link * 117 / (23 * 0.5 + 94)).epsilon(0.02));
  CHECK(read.bytes_per_s < 1.12 * link);
  CHECK(read.flow_bytes == 3 * packets * payload);
  CHECK(m.TakeChanged().empty());  // 3 probes of 4: no estimate yet
  at += 500'000;
  m.OnFlow(a, segment(slot_us / 2));
  m.OnFlow(a, segment(slot_us));
  m.OnFlow(a, segment(slot_us));
  clock.Advance(absl::Seconds(1));
  auto changed = m.TakeChanged();
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].bytes_per_s < 1.12 * link);
}

// A token-bucket shaper (tbf without a peak rate): each packet leaves
// when the bucket holds its bytes, in order.
struct Bucket {
  double rate, burst, tokens, last_us = 0, free_us = 0;
  Bucket(double rate_bytes_per_s, double burst_bytes)
      : rate(rate_bytes_per_s), burst(burst_bytes), tokens(burst_bytes) {}
  double Pass(double bytes, double at_us) {
    const double t = std::max(at_us, free_us);
    tokens = std::min(burst, tokens + (t - last_us) * rate / 1e6);
    last_us = t;
    double leave = t;
    if (tokens < bytes) {
      leave = t + (bytes - tokens) * 1e6 / rate;
      tokens = 0;
      last_us = leave;
    } else {
      tokens -= bytes;
    }
    free_us = leave;
    return leave;
  }
};

// The segments of a broadcast, each sent at 1.25x a 10 Mbit/s link as soon
// as it is ready, one every 60 ms (the pushes it waits for come slower):
// the bucket refills in each gap and the next segment passes partly at
// the sender's pace, its second half too. Timed alone each reads above
// the link; the span of them reads the link, less its idle share.
TEST_CASE("a span takes flows after short gaps, and reads the link through a bucket", "[links]") {
  const uint32_t packets = 47, payload = 1400;
  const double wire = payload + kPacketOverheadBytes;
  const double link = 1.25e6;  // bytes/s
  Bucket tbf(link, 32768);
  std::vector<transport::FlowResult> segments;
  for (int k = 0; k < 12; ++k) {
    const double sent_us = 1e6 + k * 60'000.0;
    transport::FlowResult r = Flow(uint64_t(packets) * payload, packets, 0, 0);
    for (uint32_t i = 0; i < packets; ++i) {
      const uint64_t at = uint64_t(tbf.Pass(wire, sent_us + i * wire * 1e6 / (1.25 * link)));
      if (i == 0) r.first_us = at;
      if (i == 23) r.mid_us = at;
      r.last_us = at;
    }
    segments.push_back(r);
  }
  const LinkMeterConfig config{/*probe_bytes=*/65'536, /*probe_num=*/4, /*report_rate=*/0.1};
  const transport::Peer a{1, 1};
  double alone_max = 0;
  for (const transport::FlowResult& r : segments) {
    LinkMeter alone(config);
    alone.OnFlow(a, r);
    alone_max = std::max(alone_max, Only(alone).bytes_per_s);
  }
  CHECK(alone_max > 1.15 * link);
  LinkMeter m(config);
  for (const transport::FlowResult& r : segments) m.OnFlow(a, r);
  const LinkSample span = Only(m);
  CHECK(span.samples == 2);  // 8 x 64 KiB, then the other 4
  CHECK(span.bytes_per_s <= 1.02 * link);
  CHECK(span.bytes_per_s >= 0.85 * link);
}

TEST_CASE("interleaved flows of one sender are one span at the link's rate", "[links]") {
  const LinkMeterConfig config{/*probe_bytes=*/65'536, /*probe_num=*/1, /*report_rate=*/0.1};
  const transport::Peer a{1, 1};
  // Two 100-packet flows sent round robin over 200 packet slots of 1 ms:
  // each alone reads half the link.
  transport::FlowResult x = Flow(100 * 1000, 100, 0, 198'000);
  x.mid_us = 98'000;  // its 50th packet, in slot 98
  transport::FlowResult y = Flow(100 * 1000, 100, 1000, 199'000);
  y.mid_us = 99'000;
  const double wire = 1000 + kPacketOverheadBytes;
  LinkMeter alone(config);
  alone.OnFlow(a, x);
  CHECK(Only(alone).bytes_per_s == Approx(50 * wire / 0.1));
  LinkMeter m(config);
  m.OnFlow(a, x);
  m.OnFlow(a, y);
  // From x's middle: x's last 50 and y's 50.5 that arrived after it, in
  // 101 ms: the link's rate (1000 packets a second).
  CHECK(Only(m).bytes_per_s == Approx(100.5 * wire / 0.101).epsilon(0.01));
  CHECK(Only(m).samples == 1);
}

TEST_CASE("a span ends at a pause, and after kSpanProbes probes' bytes", "[links]") {
  FakeClock clock;  // flows from 10 s on its monotonic clock: spans stay open
  LinkMeter m({/*probe_bytes=*/10'000, /*probe_num=*/1, /*report_rate=*/0.1}, &clock);
  const transport::Peer a{1, 1};
  const double wire = 1000 + kPacketOverheadBytes;
  uint64_t at = 10'000'000;
  // 10-packet flows of 1000 bytes, back to back or after a gap.
  auto flow = [&](uint64_t spacing_us, uint64_t gap_us) {
    at += gap_us;
    transport::FlowResult r = Flow(10'000, 10, at, at + 9 * spacing_us);
    r.mid_us = at + 4 * spacing_us;
    at = r.last_us + spacing_us;
    return r;
  };
  for (uint64_t i = 0; i < LinkMeter::kSpanProbes; ++i) m.OnFlow(a, flow(1000, 0));
  // Full: over at its last flow.
  CHECK(Only(m).samples == 1);
  CHECK(Only(m).bytes_per_s == Approx(75 * wire / 0.075));
  // The next flow, still back to back but at half the rate, starts a new
  // span, and one more joins it; the pause after them ends it.
  m.OnFlow(a, flow(2000, 0));
  m.OnFlow(a, flow(2000, 0));
  CHECK(Only(m).samples == 1);
  m.OnFlow(a, flow(1000, 20'000));
  CHECK(Only(m).samples == 2);
  CHECK(Only(m).bytes_per_s == Approx(15 * wire / 0.030));
  // The next round's flow, after a gap within its flows' length, is
  // timed anew.
  m.OnFlow(a, flow(1000, 0));
  transport::FlowResult next = flow(1000, 5000);
  next.iteration = 1;
  m.OnFlow(a, next);
  CHECK(Only(m).samples == 3);
  // A flow that ended before the open span's timing began adds nothing.
  m.OnFlow(a, Flow(10'000, 10, at - 30'000, at - 20'000));
  clock.Advance(absl::Microseconds(at + 100'000 - clock.MonotonicMicros()));
  CHECK(Only(m).samples == 4);
  CHECK(Only(m).bytes_per_s == Approx(5 * wire / 0.005));
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

// Two flows shared a host's link for 150 ms: one came in its first 50 ms
// and last 50 ms, waiting on the other between. Spread evenly over their
// times they add up to half as much again as the link carried in the
// middle bin; by their arrival profiles, to what it carried.
TEST_CASE("a node's traffic: a flow's bytes where its arrivals say", "[links]") {
  FakeClock clock(absl::FromUnixMillis(1'700'000'000'000));
  LinkMeter m({}, &clock);
  const uint64_t bin = LinkMeter::kTrafficBinUs;
  transport::FlowResult gapped = Flow(20'000, 20, 20 * bin, 23 * bin - 1);
  transport::FlowResult middle = Flow(10'000, 10, 21 * bin, 22 * bin - 1);
  const uint64_t datagram = 1000 + transport::kHeaderBytes;
  gapped.arrivals.first_bin = 20;
  gapped.arrivals.bytes = {10 * datagram, 0, 10 * datagram};
  middle.arrivals.first_bin = 21;
  middle.arrivals.bytes = {10 * datagram};
  m.OnFlow({1, 1}, gapped);
  m.OnFlow({2, 2}, middle);
  clock.Advance(absl::Microseconds(23 * bin - clock.MonotonicMicros()));  // bin 23
  NodeTraffic t;
  REQUIRE(m.TakeTraffic(4, &t));
  const double wire = 1000 + kPacketOverheadBytes;  // a packet on the wire
  REQUIRE(t.in_bytes.size() == 4);
  CHECK(t.in_bytes[0] == uint64_t(10 * wire + 0.5));
  CHECK(t.in_bytes[1] == uint64_t(10 * wire + 0.5));
  CHECK(t.in_bytes[2] == uint64_t(10 * wire + 0.5));
  CHECK(t.in_bytes[3] == 0);
  // Without profiles, the even spread the profile corrects.
  LinkMeter even({}, &clock);
  gapped.arrivals = {};
  middle.arrivals = {};
  even.OnFlow({1, 1}, gapped);
  even.OnFlow({2, 2}, middle);
  REQUIRE(even.TakeTraffic(4, &t));
  CHECK(t.in_bytes[1] > uint64_t(16 * wire));
}

}  // namespace
}  // namespace hetps
