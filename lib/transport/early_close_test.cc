#include "lib/transport/early_close.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace transport {
namespace {

TEST_CASE("Early Close: wait before LT, fraction between LT and deadline, close at deadline",
          "[early_close]") {
  const uint64_t lt = 100'000, deadline = 130'000;
  const uint32_t total = 1000;
  // Before LT: never close, whatever arrived (except everything: the
  // endpoint closes complete flows itself).
  CHECK(DecideEarlyClose(0, lt, deadline, 999, total, true, true, 0.8) ==
        EarlyCloseDecision::kWait);
  CHECK(DecideEarlyClose(lt - 1, lt, deadline, 999, total, true, true, 0.8) ==
        EarlyCloseDecision::kWait);
  // Between: the fraction and every critical packet.
  CHECK(DecideEarlyClose(lt, lt, deadline, 800, total, true, true, 0.8) ==
        EarlyCloseDecision::kCloseFraction);
  CHECK(DecideEarlyClose(lt, lt, deadline, 799, total, true, true, 0.8) ==
        EarlyCloseDecision::kWait);
  CHECK(DecideEarlyClose(lt + 5, lt, deadline, 999, total, false, true, 0.8) ==
        EarlyCloseDecision::kWait);
  CHECK(DecideEarlyClose(deadline - 1, lt, deadline, 500, total, true, true, 0.8) ==
        EarlyCloseDecision::kWait);
  // The sender's first pass still going: no fraction close (the deadline bounds it).
  CHECK(DecideEarlyClose(lt + 5, lt, deadline, 999, total, true, false, 0.8) ==
        EarlyCloseDecision::kWait);
  // At the deadline: regardless.
  CHECK(DecideEarlyClose(deadline, lt, deadline, 0, total, false, true, 0.8) ==
        EarlyCloseDecision::kCloseDeadline);
  CHECK(DecideEarlyClose(deadline + 1, lt, deadline, 999, total, true, true, 0.8) ==
        EarlyCloseDecision::kCloseDeadline);
  // Infinite thresholds (first flow of a link): wait for everything.
  CHECK(DecideEarlyClose(1'000'000'000, UINT64_MAX, UINT64_MAX, 999, total, true, true, 0.8) ==
        EarlyCloseDecision::kWait);
}

TEST_CASE("packets needed for a fraction round up", "[early_close]") {
  CHECK(PacketsForFraction(10, 0.8) == 8);
  CHECK(PacketsForFraction(11, 0.8) == 9);  // 8.8 -> 9
  CHECK(PacketsForFraction(1, 0.01) == 1);
  CHECK(PacketsForFraction(1000, 1.0) == 1000);
  CHECK(PacketsForFraction(3, 0.5) == 2);
}

TEST_CASE("LT: the model until a full delivery, then the window's shortest", "[early_close]") {
  EarlyCloseConfig c;
  c.window_flows = 3;
  LinkThreshold link;
  const uint64_t bytes = 1'250'000;  // 10 Mbit
  // No estimate yet: wait for everything.
  CHECK(link.LtUs(c, bytes, 0, 0) == UINT64_MAX);
  // 1.5 x 20 ms + 10 Mbit / 100 Mbit/s = 30 ms + 100 ms.
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 130'000);
  link.OnFlowClosed(c, false, 90'000);  // closed early: no sample
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 130'000);
  link.OnFlowClosed(c, true, 120'000);
  link.OnFlowClosed(c, true, 110'000);
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 110'000);
  // The window slides: after 3 more early closes the samples are gone and
  // the model is back.
  link.OnFlowClosed(c, true, 140'000);
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 110'000);
  for (int i = 0; i < 3; ++i) link.OnFlowClosed(c, false, 1);
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 130'000);
  // A fixed LT overrides everything.
  c.lt_fixed_us = 7'000;
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == 7'000);
  // Never below lt_min (a flow that arrived in one receive batch measures ~0).
  c.lt_fixed_us = 0;
  link.OnFlowClosed(c, true, 0);
  CHECK(link.LtUs(c, bytes, 20'000, 100'000'000) == c.lt_min_us);
}

TEST_CASE("bad Early Close settings are refused with the field named", "[early_close]") {
  EarlyCloseConfig c;
  CHECK(ValidateEarlyCloseConfig(c).ok());
  c.min_fraction = 0;
  CHECK(ValidateEarlyCloseConfig(c).message().find("min_fraction") != std::string::npos);
  c = EarlyCloseConfig();
  c.window_flows = 0;
  CHECK(ValidateEarlyCloseConfig(c).message().find("window_flows") != std::string::npos);
  c = EarlyCloseConfig();
  c.lt_rtprop_factor = -1;
  CHECK(!ValidateEarlyCloseConfig(c).ok());
}

TEST_CASE("ingress rate: windowed max of full bins, forgets after the window", "[early_close]") {
  IngressRate in(100'000, 10);  // 100 ms bins, 1 s window
  CHECK(in.rate_bps(0) == 0);
  // 100 Mbit/s for 0.5 s: 1250 bytes every 100 us.
  uint64_t t = 1'000'000;
  for (int i = 0; i < 5000; ++i, t += 100) in.OnBytes(t, 1250);
  CHECK(in.rate_bps(t) == 100'000'000);
  // A slower second phase does not lower the max...
  for (int i = 0; i < 2000; ++i, t += 100) in.OnBytes(t, 125);
  CHECK(in.rate_bps(t) == 100'000'000);
  // ...until the fast bins are older than the window.
  for (int i = 0; i < 12000; ++i, t += 100) in.OnBytes(t, 125);
  CHECK(in.rate_bps(t) == 10'000'000);
  // Idle longer than the window: unknown again.
  CHECK(in.rate_bps(t + 5'000'000) == 0);
}

TEST_CASE("shared-link LT: all open bytes over the ingress rate", "[early_close]") {
  EarlyCloseConfig c;
  // 8 flows of 21 MB into a 100 Mbit/s link, RTprop 20 ms: 1.5 x 20 ms +
  // 168 MB x 8 / 100 Mbit/s = 13.47 s.
  CHECK(SharedLtUs(c, 20'000, 8 * 21'000'000ull, 100'000'000) == 13'470'000);
  CHECK(SharedLtUs(c, 20'000, 8 * 21'000'000ull, 0) == 0);  // rate unknown: no bound
  c.lt_fixed_us = 5000;                                     // an operator's fixed LT wins
  CHECK(SharedLtUs(c, 20'000, 8 * 21'000'000ull, 100'000'000) == 0);
}

// The link rate counts busy bins only: bursts (a 1 MB push in 2 ms every
// 200 ms, as training over loopback) give no capacity at all rather than
// their 40 Mbit/s average, and a link busy all the time reads its rate.
TEST_CASE("link rate: bursts give no capacity, a busy link its rate", "[early_close]") {
  IngressRate bursts, busy;
  for (uint64_t t = 1; t < 3'000'000; t += 200'000) {
    for (uint64_t k = 0; k < 700; ++k) bursts.OnBytes(t + k * 3, 1400);  // 2.1 ms
  }
  CHECK(bursts.rate_bps(3'000'000) > 10'000'000);
  CHECK(bursts.link_rate_bps(3'000'000) == 0);
  for (uint64_t t = 1; t < 3'000'000; t += 112) busy.OnBytes(t, 1400);  // 100 Mbit/s
  const uint64_t r = busy.link_rate_bps(3'000'000);
  CHECK(r > 95'000'000);
  CHECK(r < 105'000'000);
}

// A 100 Mbit/s link whose packets reach the receiver in bunches: every
// second, 60 ms of packets wait (a descheduled reader) and arrive in 1 ms.
// The bins holding a catch-up read 112 Mbit/s and the max takes that for
// the link; a busy span holds the stall and its catch-up and reads the
// link. Before any busy span the rate is unknown (0), and it is forgotten
// after the window.
TEST_CASE("link rate: busy spans, not bunched arrivals", "[early_close]") {
  IngressRate in;  // 500 ms bins, 60 s window
  CHECK(in.link_rate_bps(1) == 0);
  uint64_t t = 1'000'000;
  for (int push = 0; push < 3; ++push) {
    const uint64_t end = t + 10'000'000;  // a 10 s push...
    uint64_t next_stall = t + 700'000;
    while (t < end) {
      if (t >= next_stall) {
        // 60 ms of packets (536 x 1400 B at 112 us) arrive within 1 ms.
        for (int k = 0; k < 536; ++k) in.OnBytes(t + 60'000 + k, 1400);
        t += 60'000 + 536;
        next_stall += 1'000'000;
        continue;
      }
      in.OnBytes(t, 1400);
      t += 112;
    }
    t += 4'250'000;  // ...then 4.25 s of compute
  }
  CHECK(in.rate_bps(t) > 108'000'000);  // the max reads the bunches
  const uint64_t r = in.link_rate_bps(t);
  CHECK(r > 97'000'000);
  CHECK(r < 103'000'000);
  CHECK(in.link_rate_bps(t + 61'000'000) == 0);  // forgotten after the window
}

}  // namespace
TEST_CASE("the deadline's slack is C or a fraction of a long LT", "[early_close]") {
  EarlyCloseConfig c;                              // C = 30 ms, 5%
  CHECK(DeadlineUs(c, 100'000) == 130'000);        // short LT: C
  CHECK(DeadlineUs(c, 10'000'000) == 10'500'000);  // 10 s: 5% = 500 ms
  CHECK(DeadlineUs(c, UINT64_MAX) == UINT64_MAX);  // unknown stays unknown
  CHECK(DeadlineUs(c, UINT64_MAX - 10) == UINT64_MAX);
  c.slack_fraction = 0;
  CHECK(DeadlineUs(c, 10'000'000) == 10'030'000);  // the paper's max(LT) + C
  c.slack_fraction = 1.5;
  CHECK_FALSE(ValidateEarlyCloseConfig(c).ok());
}

}  // namespace transport
}  // namespace hetps
