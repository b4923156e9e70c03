#include "lib/transport/congestion.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <queue>
#include <random>
#include <vector>

#include "lib/transport/early_close.h"

namespace hetps {
namespace transport {
namespace {

// A simulated path: a bottleneck of `rate_bps` and a fixed RTT. Packets are
// ACKed in order when the bottleneck has serialized them, plus the RTT.
struct Path {
  uint64_t rate_bps;
  uint64_t rtt_us;
  uint64_t link_free_us = 0;
  uint64_t AckTime(uint64_t send_us, uint32_t bytes) {
    const uint64_t start = std::max(send_us, link_free_us);
    link_free_us = start + uint64_t(bytes) * 8 * 1'000'000 / rate_bps;
    return link_free_us + rtt_us;
  }
};

// One sender on a Path, paced by its controller and bounded by its window.
struct Sender {
  CongestionControl& cc;
  Path path;
  uint64_t now = 0;
  uint64_t inflight = 0;
  // Packets it may still send (a flow of that many); unlimited by default.
  uint64_t packets_left = UINT64_MAX;
  struct InFlight {
    uint64_t ack_us;
    SendSample s;
  };
  std::vector<InFlight> q;
  static constexpr uint32_t kBytes = 1400;

  void RunUntil(uint64_t end_us) {
    while (now < end_us) {
      // Deliver ACKs due by now.
      for (size_t i = 0; i < q.size();) {
        if (q[i].ack_us <= now) {
          cc.OnAck(q[i].ack_us, kBytes, q[i].s);
          inflight -= kBytes;
          q.erase(q.begin() + i);
        } else {
          ++i;
        }
      }
      if (packets_left > 0 && inflight + kBytes <= cc.cwnd_bytes()) {
        if (packets_left != UINT64_MAX) --packets_left;
        SendSample s = cc.OnSend(now, false);
        q.push_back({path.AckTime(now, kBytes), s});
        inflight += kBytes;
        now += std::max<uint64_t>(1, uint64_t(kBytes) * 8 * 1'000'000 / cc.pacing_rate_bps());
      } else {
        now += 50;
      }
    }
  }

  // Runs until BtlBw reads `bps` or `limit_us` passed; returns the time it took.
  uint64_t RunUntilBtlBw(uint64_t bps, uint64_t limit_us) {
    const uint64_t from = now;
    while (cc.btlbw_bps() < bps && now < from + limit_us) RunUntil(now + 1000);
    return now - from;
  }
};

TEST_CASE("estimates converge to the path's bandwidth and RTT", "[congestion]") {
  CongestionConfig c;
  c.initial_rate_bps = 10'000'000;
  c.cwnd_packets_min = 8;  // let the BDP, not the floor, set the window
  CongestionControl cc(c);
  Sender sender{cc, Path{100'000'000, 20'000}};
  sender.RunUntil(5'000'000);
  INFO("btlbw " << cc.btlbw_bps() << " rtprop " << cc.rtprop_us());
  CHECK(cc.btlbw_bps() > 90'000'000);
  CHECK(cc.btlbw_bps() < 110'000'000);
  CHECK(cc.rtprop_us() >= 20'000);
  CHECK(cc.rtprop_us() < 21'000);
  CHECK(!cc.in_startup());
  // Window about 2 BDP (250 kB BDP at 100 Mbit/s x 20 ms).
  CHECK(cc.cwnd_bytes() > 400'000);
  CHECK(cc.cwnd_bytes() < 600'000);
}

// Room: a flow that ran under a 1/8 share and is then alone (the cap is
// lifted: back to startup) or one of two (the cap rises to half the link:
// paced at the share, its floor) fills the room in a few rounds, not the
// 1.25-per-cycle probing's ~10 cycles.
TEST_CASE("a fair-share cap that rises or is lifted fills the room", "[congestion]") {
  const bool lifted = GENERATE(true, false);
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  c.cap_lift = false;  // a cap alone on its path: the lift (tested below) would raise it
  CongestionControl cc(c);
  Sender sender{cc, Path{100'000'000, 20'000}};
  cc.SetRateCap(12'500'000);
  sender.RunUntil(3'000'000);  // long enough for the max filter to forget startup
  INFO("btlbw under the cap " << cc.btlbw_bps());
  REQUIRE(cc.btlbw_bps() < 20'000'000);
  REQUIRE(!cc.in_startup());
  const uint64_t target = lifted ? 90'000'000 : 45'000'000;
  cc.SetRateCap(lifted ? 0 : 50'000'000);
  const uint64_t took_us = sender.RunUntilBtlBw(target, 3'000'000);
  INFO("reached " << cc.btlbw_bps() << " after " << took_us << " us");
  CHECK(took_us < 300'000);  // 15 RTTs; the probe cycle alone needs > 1.4 s
  CHECK(cc.startup_restarts() == (lifted ? 1u : 0u));
  sender.RunUntil(sender.now + 2'000'000);
  CHECK(!cc.in_startup());
  if (lifted) {
    CHECK(cc.btlbw_bps() > 90'000'000);
    CHECK(cc.btlbw_bps() < 110'000'000);
  } else {  // under the new cap: 1.25 x 50 at most while probing
    CHECK(cc.btlbw_bps() > 45'000'000);
    CHECK(cc.btlbw_bps() < 66'000'000);
  }
  // A cap that only jitters upward is no room.
  const uint64_t before = cc.startup_restarts();
  cc.SetRateCap(40'000'000);
  cc.SetRateCap(45'000'000);
  CHECK(cc.startup_restarts() == before);
}

// Cap lift (congestion.h): a receiver that measured its ingress while its
// flows were slow advertises a share of 1.3 Mbit/s on a 25 Mbit/s path.
// The cap holds the flow, and no queue forms: each such round raises the
// ceiling, and the flow stays near its path's rate. With
// a standing queue on the path the ceiling stays at the share.
TEST_CASE("a cap that holds a flow on a path with room is lifted", "[congestion]") {
  // Alone on a 25 Mbit/s, 20 ms path for 2 s, then capped at 1.3 Mbit/s.
  auto trapped = [](CongestionControl& cc) {
    Sender s{cc, Path{25'000'000, 20'000}};
    s.RunUntil(2'000'000);
    REQUIRE(cc.btlbw_bps() > 22'000'000);
    cc.SetRateCap(1'300'000);
    INFO("paced at " << cc.pacing_rate_bps() << " under the cap");
    CHECK(cc.pacing_rate_bps() < 2'000'000);
    return s;
  };
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  CongestionControl cc(c);
  Sender sender = trapped(cc);
  sender.RunUntil(sender.now + 3'000'000);  // past BtlBw's max filter
  INFO("after 3 s: btlbw " << cc.btlbw_bps() << ", lift " << cc.cap_lift() << " after "
                           << cc.cap_lift_rounds() << " rounds");
  CHECK(cc.btlbw_bps() > 20'000'000);
  CHECK(cc.cap_lift() > 10);
  CHECK(cc.cap_lift_rounds() > 0);
  // A lifted cap (0) resets the lift.
  cc.SetRateCap(0);
  CHECK(cc.cap_lift() == 1.0);

  // Without the lift the same flow stays at 1.25 x the share.
  CongestionConfig off = c;
  off.cap_lift = false;
  CongestionControl held(off);
  Sender held_sender = trapped(held);
  held_sender.RunUntil(held_sender.now + 3'000'000);
  CHECK(held.btlbw_bps() < 2'000'000);

  // The same cap on a path whose RTT shows a standing queue (every RTT
  // sample 15 ms above the 20 ms RTprop the controller learned first).
  CongestionControl queued(c);
  Sender q = trapped(queued);
  q.path.rtt_us = 35'000;
  q.RunUntil(q.now + 1'000'000);
  INFO("queued path: paced at " << queued.pacing_rate_bps() << ", lift " << queued.cap_lift());
  CHECK(queued.cap_lift() == 1.0);
  CHECK(queued.pacing_rate_bps() < 2'000'000);
}

// path_clean: a round with no queue and no loss says so; a queued round
// and an idle gap do not. A flow that fills its own bottleneck keeps a
// queue there (its window is 2 x BDP); one held under a share does not.
TEST_CASE("a path reads clean without a queue or a loss", "[congestion]") {
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  c.cap_lift = false;  // the cap holds the flow under the path's rate
  CongestionControl cc(c);
  CHECK(!cc.path_clean());  // no round yet
  Sender s{cc, Path{25'000'000, 20'000}};
  s.RunUntil(2'000'000);
  CHECK(!cc.path_clean());  // at the path's rate: a standing queue
  cc.SetRateCap(5'000'000);
  s.RunUntil(s.now + 2'000'000);
  CHECK(cc.path_clean());
  s.path.rtt_us = 35'000;  // a queue of 15 ms elsewhere on the path
  s.RunUntil(s.now + 200'000);
  CHECK(!cc.path_clean());
  s.path.rtt_us = 20'000;
  s.RunUntil(s.now + 500'000);
  REQUIRE(cc.path_clean());
  s.RunUntil(s.now + 100'000);
  cc.OnIdleRestart();
  CHECK(!cc.path_clean());  // what it knew is from before the gap
}

// ShareLift: 1.25 a step (four RTprops) while some flow is clean, up to
// 8; back to 1 once none is, then no lift for eight steps, or for twice
// the last wait after a lift that met a queue within two steps.
TEST_CASE("a share's lift steps while a path has room and holds after a queue", "[congestion]") {
  ShareLift lift;
  uint64_t t = 1'000'000;
  const uint32_t rtprop = 20'000;
  const uint64_t step = 80'000;  // four RTprops
  CHECK(lift.Update(t, true, rtprop) == Approx(1.25));
  CHECK(lift.Update(t + step - 1, true, rtprop) == Approx(1.25));  // within the step
  t += step;
  CHECK(lift.Update(t, true, rtprop) == Approx(1.5625));
  for (int i = 0; i < 20; ++i) lift.Update(t += step, true, rtprop);
  CHECK(lift.lift() == Approx(8));  // its most
  CHECK(lift.steps() == 10);        // 1.25^10 > 8: the tenth reached it
  CHECK(lift.Update(t += step, false, rtprop) == 1);
  // Holds eight steps, then probes again.
  auto steps_held = [&] {
    int held = 0;
    while (lift.Update(t += step, true, rtprop) == 1) ++held;
    return held;
  };
  CHECK(steps_held() == 7);  // the eighth step is the first raise
  // Fruitless probes (a queue after one raise): 16, 32, 64, 64 steps.
  for (int want : {16, 32, 64, 64}) {
    CHECK(lift.Update(t += step, false, rtprop) == 1);
    CHECK(steps_held() == want - 1);
  }
  // A probe that runs three steps found room: eight again.
  lift.Update(t += step, true, rtprop);
  lift.Update(t += step, true, rtprop);
  lift.Update(t += step, false, rtprop);
  CHECK(steps_held() == 7);
  // A queue while not lifted is no reason to hold.
  ShareLift flat;
  CHECK(flat.Update(t, false, rtprop) == 1);
  CHECK(flat.Update(t + step, true, rtprop) == Approx(1.25));
  flat.Reset();  // no shared traffic
  CHECK(flat.lift() == 1);
  // Unpaced or unknown RTprop: steps of at least 1 ms per RTprop.
  ShareLift fast;
  fast.Update(t, true, 0);
  CHECK(fast.Update(t + 3'999, true, 0) == Approx(1.25));
  CHECK(fast.Update(t + 4'000, true, 0) == Approx(1.5625));
  // Another step length: two RTprops.
  ShareLift two(2);
  two.Update(t, true, rtprop);
  CHECK(two.Update(t + 39'999, true, rtprop) == Approx(1.25));
  CHECK(two.Update(t + 40'000, true, rtprop) == Approx(1.5625));
}

// A flow whose own path (20 Mbit/s) is slower than its share (50) has its
// room restarts come to nothing, and each doubles the wait for the next.
// When the others finish and the cap is lifted, that wait does not apply:
// one gain cycle after its last startup the flow restarts.
TEST_CASE("a lifted cap restarts the flow despite fruitless room restarts", "[congestion]") {
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  CongestionControl cc(c);
  Sender sender{cc, Path{20'000'000, 20'000}};
  cc.SetRateCap(50'000'000);
  sender.RunUntil(6'000'000);
  INFO("btlbw " << cc.btlbw_bps() << " restarts " << cc.startup_restarts());
  REQUIRE(cc.startup_restarts() >= 2);  // fruitless: the wait doubled
  CHECK(cc.btlbw_bps() < 25'000'000);
  // Just after a room restart ended: ~16 rounds (> one gain cycle, < the
  // 24-round minimum between room restarts; a round is ~40 ms here, RTprop
  // plus the queue of a 2 x BDP window).
  const uint64_t before = cc.startup_restarts();
  while (cc.startup_restarts() == before && sender.now < 60'000'000) {
    sender.RunUntil(sender.now + 1000);
  }
  REQUIRE(cc.startup_restarts() == before + 1);
  while (cc.in_startup()) sender.RunUntil(sender.now + 1000);
  sender.RunUntil(sender.now + 16 * 40'000);
  cc.SetRateCap(0);
  CHECK(cc.in_startup());
  CHECK(cc.startup_restarts() == before + 2);
}

// A lift within a gain cycle of the flow's last startup is not lost: the
// flow restarts when the cycle ends, unless a cap came back by then.
TEST_CASE("a lift soon after startup restarts the flow when the cycle ends", "[congestion]") {
  const bool cap_back = GENERATE(false, true);
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  c.cap_lift = false;  // the cap holds the flow at its share
  CongestionControl cc(c);
  Sender sender{cc, Path{40'000'000, 20'000}};
  cc.SetRateCap(10'000'000);
  while (cc.in_startup() && sender.now < 5'000'000) sender.RunUntil(sender.now + 1000);
  REQUIRE_FALSE(cc.in_startup());
  const uint64_t exit_round = cc.rounds();
  sender.RunUntil(sender.now + 2 * 25'000);
  cc.SetRateCap(0);              // the others finished
  CHECK_FALSE(cc.in_startup());  // within the cycle
  CHECK(cc.startup_restarts() == 0);
  if (cap_back) cc.SetRateCap(10'000'000);
  while (cc.rounds() < exit_round + 10) sender.RunUntil(sender.now + 1000);
  INFO("cap back " << cap_back << " rounds since startup " << cc.rounds() - exit_round);
  CHECK(cc.startup_restarts() == (cap_back ? 0u : 1u));
  if (!cap_back) {
    const uint64_t took_us = sender.RunUntilBtlBw(35'000'000, 2'000'000);
    INFO("reached " << cc.btlbw_bps() << " after " << took_us << " us");
    CHECK(took_us < 400'000);
  }
}

TEST_CASE("a flow after an idle gap restarts from its old estimate", "[congestion]") {
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  c.cap_lift = false;  // as above
  CongestionControl cc(c);
  Sender sender{cc, Path{100'000'000, 20'000}};
  cc.SetRateCap(12'500'000);
  sender.RunUntil(3'000'000);
  cc.SetRateCap(12'500'000);  // the stale share, until the receiver's next ACK
  REQUIRE(cc.btlbw_bps() < 20'000'000);
  // Idle: nothing in flight, then a new flow that is alone on the link.
  sender.RunUntil(sender.now + 100'000);
  cc.OnIdleRestart();
  CHECK(cc.in_startup());
  CHECK(cc.startup_restarts() == 1);
  cc.SetRateCap(0);  // no second restart: already in startup
  CHECK(cc.startup_restarts() == 1);
  const uint64_t took_us = sender.RunUntilBtlBw(90'000'000, 3'000'000);
  INFO("reached " << cc.btlbw_bps() << " after " << took_us << " us");
  CHECK(took_us < 300'000);
}

// A peer that only gets a few packets an iteration (a psd with no chunks
// but a probe slice) has its estimate drawn down to what those few
// packets showed, and the startup they each began counts rounds that
// never filled the pipe. A full transfer after the next idle gap still
// restarts from that estimate and climbs to the path's rate in a few
// round trips.
TEST_CASE("a full flow after probe-sized ones climbs to the path", "[congestion]") {
  const int probes = GENERATE(1, 2, 3, 4, 5, 6);
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  CongestionControl cc(c);
  Sender sender{cc, Path{25'000'000, 20'000}};
  sender.RunUntil(2'000'000);
  REQUIRE(cc.btlbw_bps() > 20'000'000);
  for (int k = 0; k < probes; ++k) {
    sender.RunUntil(sender.now + 1'000'000);  // idle
    cc.OnIdleRestart();
    sender.packets_left = 3;
    sender.RunUntil(sender.now + 100'000);
  }
  INFO(probes << " probe flows: btlbw " << cc.btlbw_bps() << " startup " << cc.in_startup());
  sender.RunUntil(sender.now + 1'000'000);
  cc.OnIdleRestart();
  sender.packets_left = UINT64_MAX;
  const uint64_t took_us = sender.RunUntilBtlBw(20'000'000, 2'000'000);
  INFO("reached " << cc.btlbw_bps() << " after " << took_us << " us");
  CHECK(took_us < 300'000);
}

// A flow held back by its own 10 Mbit/s link under a receiver share of 50:
// the cap leaves "room" every round, but restarts that find none back off.
TEST_CASE("restarts that find no room back off", "[congestion]") {
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  CongestionControl cc(c);
  Sender sender{cc, Path{10'000'000, 20'000}};
  cc.SetRateCap(50'000'000);
  sender.RunUntil(20'000'000);  // 1000 RTTs
  INFO("restarts " << cc.startup_restarts() << " rounds " << cc.rounds());
  CHECK(cc.startup_restarts() >= 1);  // it did look
  CHECK(cc.startup_restarts() <= 6);  // 24, 48, 96, 192, 384 rounds apart at least
  CHECK(cc.btlbw_bps() > 9'000'000);
  CHECK(cc.btlbw_bps() < 11'000'000);
}

// Spurious losses (congestion.h): a timer burst that declared 30 packets
// lost whose ACKs then came after all. Found within the round, the losses
// leave the round; found after it, the round's cut is undone; without
// them the cut stays.
TEST_CASE("losses that prove spurious are taken back", "[congestion]") {
  for (int mode = 0; mode < 3; ++mode) {  // 0: same round, 1: after the round, 2: never
    INFO("mode " << mode);
    CongestionConfig c;
    CongestionControl cc(c);
    Sender sender{cc, Path{100'000'000, 20'000}};
    sender.RunUntil(3'000'000);
    REQUIRE(!cc.in_startup());
    REQUIRE(cc.inflight_hi() == UINT64_MAX);
    const uint64_t rounds = cc.congestion_rounds();
    const uint64_t inflight = sender.inflight;
    for (int i = 0; i < 30; ++i) cc.OnLoss(Sender::kBytes, inflight);
    if (mode == 0) {
      for (int i = 0; i < 30; ++i) cc.OnSpuriousLoss(Sender::kBytes);
    }
    sender.RunUntil(sender.now + 25'000);  // the round ends
    if (mode == 0) {
      CHECK(cc.congestion_rounds() == rounds);
      CHECK(cc.inflight_hi() == UINT64_MAX);
      continue;
    }
    REQUIRE(cc.congestion_rounds() == rounds + 1);
    const uint64_t cut = cc.inflight_hi();
    CHECK(cut <= inflight * 7 / 10 + Sender::kBytes);
    if (mode == 1) {
      for (int i = 0; i < 14; ++i) cc.OnSpuriousLoss(Sender::kBytes);
      CHECK(cc.inflight_hi() == cut);  // under half of the round's losses: no undo yet
      cc.OnSpuriousLoss(Sender::kBytes);
      CHECK(cc.inflight_hi() == UINT64_MAX);
      CHECK(cc.undone_rounds() == 1);
    } else {
      sender.RunUntil(sender.now + 25'000);
      CHECK(cc.inflight_hi() <= cut + 2 * Sender::kBytes);  // additive growth only
      CHECK(cc.undone_rounds() == 0);
    }
  }
}

TEST_CASE("retransmissions give no RTT sample (Karn)", "[congestion]") {
  CongestionConfig c;
  CongestionControl cc(c);
  SendSample s = cc.OnSend(1000, true);
  cc.OnAck(5000, 1400, s);
  CHECK(cc.rtprop_us() == 0);
  SendSample t = cc.OnSend(6000, false);
  cc.OnAck(6500, 1400, t);
  CHECK(cc.rtprop_us() == 500);
}

TEST_CASE("window and rate respect their floors before any sample", "[congestion]") {
  CongestionConfig c;
  c.cwnd_packets_min = 8;
  c.packet_bytes = 1400;
  CongestionControl cc(c);
  CHECK(cc.pacing_rate_bps() == c.initial_rate_bps);
  CHECK(cc.cwnd_bytes() >= 8 * 1400);
}

// Several senders, each behind its own access link of `rate_bps`, share one
// drop-tail bottleneck of the same rate with a queue of `queue_bytes` (the
// incast of N workers into one psd, or tbf on the testbed); every packet
// also meets random loss `random_loss` on the way. Infinite backlog; the
// senders' ACKs come back after `rtt_us`, and a lost packet is declared lost
// to its sender one RTT after it was dropped.
struct SharedBottleneck {
  int senders = 8;
  uint64_t rate_bps = 100'000'000;
  uint64_t rtt_us = 20'000;
  uint64_t queue_bytes = 250'000;
  double random_loss = 0;
  uint64_t seconds = 6;
  CongestionConfig config;
  // The receiver advertises the max-min fair share of its measured ingress
  // (FairShareBps over the senders' recent rates) and each sender caps its
  // pacing at it (the endpoint does this through ACKs).
  bool receiver_share = false;
  std::vector<uint64_t> access_bps;  // per sender; empty: all at rate_bps
  // Senders that are loss-based TCP instead (Reno with Cubic's beta 0.7:
  // slow start, +1 packet per RTT, x0.7 once per window of loss; no pacing).
  int aimd_senders = 0;  // the last ones
  std::vector<uint64_t> delivered_late_by;

  uint64_t delivered_late = 0;  // bytes through the bottleneck in the last half
  uint64_t sent = 0, overflow_drops = 0, random_drops = 0;
  uint64_t sent_late = 0, overflow_late = 0;  // in the last half
  uint64_t congestion_rounds = 0, standing_queue_rounds = 0;

  void Run() {
    enum Kind { kArrive, kAck, kLoss };
    struct Event {
      uint64_t t;
      uint64_t order;
      Kind kind;
      int sender;
      SendSample sample;
      bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
    };
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
    uint64_t order = 0;
    const uint32_t bytes = config.packet_bytes;
    const uint64_t ser_us = uint64_t(bytes) * 8 * 1'000'000 / rate_bps;
    std::vector<CongestionControl> cc(senders, CongestionControl(config));
    std::vector<uint64_t> inflight(senders, 0), next_send(senders, 0), access_free(senders, 0);
    std::vector<uint64_t> access_ser_us(senders, ser_us);
    for (size_t i = 0; i < access_bps.size() && i < size_t(senders); ++i) {
      access_ser_us[i] = uint64_t(bytes) * 8 * 1'000'000 / access_bps[i];
    }
    delivered_late_by.assign(senders, 0);
    IngressRate ingress;
    std::vector<IngressRate> sender_rate(senders, IngressRate(kShareBinUs, kShareBins));
    std::vector<uint64_t> rates;
    std::vector<double> aimd_cwnd(senders, 10.0 * bytes);
    std::vector<bool> aimd_slow_start(senders, true);
    std::vector<uint64_t> aimd_cut_us(senders, 0);
    const auto is_aimd = [&](int i) { return i >= senders - aimd_senders; };
    std::deque<uint64_t> departures;  // of the packets queued at the bottleneck
    uint64_t link_free = 0;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> unit(0, 1);
    const uint64_t end = seconds * 1'000'000;
    for (uint64_t now = 0; now < end; now += 5) {
      while (!events.empty() && events.top().t <= now) {
        const Event e = events.top();
        events.pop();
        if (e.kind == kArrive) {
          while (!departures.empty() && departures.front() <= e.t) departures.pop_front();
          if (unit(rng) < random_loss) {
            ++random_drops;
            events.push({e.t + rtt_us, order++, kLoss, e.sender, e.sample});
          } else if ((departures.size() + 1) * bytes > queue_bytes) {
            ++overflow_drops;
            if (e.t > end / 2) ++overflow_late;
            events.push({e.t + rtt_us, order++, kLoss, e.sender, e.sample});
          } else {
            link_free = std::max(link_free, e.t) + ser_us;
            departures.push_back(link_free);
            if (link_free > end / 2 && link_free <= end) {
              delivered_late += bytes;
              delivered_late_by[e.sender] += bytes;
            }
            events.push({link_free + rtt_us, order++, kAck, e.sender, e.sample});
          }
        } else if (e.kind == kAck && is_aimd(e.sender)) {
          double& w = aimd_cwnd[e.sender];
          w += aimd_slow_start[e.sender] ? bytes : double(bytes) * bytes / w;
          inflight[e.sender] -= bytes;
        } else if (e.kind == kAck) {
          cc[e.sender].OnAck(e.t, bytes, e.sample);
          inflight[e.sender] -= bytes;
          if (receiver_share) {
            ingress.OnBytes(e.t, bytes);
            sender_rate[e.sender].OnBytes(e.t, bytes);
            rates.clear();
            for (auto& r : sender_rate) rates.push_back(r.rate_bps(e.t));
            cc[e.sender].SetRateCap(FairShareBps(ingress.rate_bps(e.t), rates));
          }
        } else if (is_aimd(e.sender)) {
          if (e.sample.sent_us >= aimd_cut_us[e.sender]) {  // once per window
            aimd_cwnd[e.sender] = std::max(2.0 * bytes, 0.7 * aimd_cwnd[e.sender]);
            aimd_slow_start[e.sender] = false;
            aimd_cut_us[e.sender] = e.t;
          }
          inflight[e.sender] -= bytes;
        } else {
          cc[e.sender].OnLoss(bytes, inflight[e.sender]);
          inflight[e.sender] -= bytes;
        }
      }
      for (int i = 0; i < senders; ++i) {
        const bool aimd = is_aimd(i);
        while (next_send[i] <= now &&
               inflight[i] + bytes <= (aimd ? uint64_t(aimd_cwnd[i]) : cc[i].cwnd_bytes())) {
          access_free[i] = std::max(access_free[i], now) + access_ser_us[i];
          events.push({access_free[i], order++, kArrive, i, cc[i].OnSend(now, false)});
          inflight[i] += bytes;
          ++sent;
          if (now > end / 2) ++sent_late;
          if (aimd) continue;  // window-limited, not paced
          next_send[i] =
              std::max(next_send[i], now) +
              std::max<uint64_t>(1, uint64_t(bytes) * 8'000'000 / cc[i].pacing_rate_bps());
        }
        if (next_send[i] < now) next_send[i] = now;
      }
    }
    for (int i = 0; i < senders - aimd_senders; ++i) {
      congestion_rounds += cc[i].congestion_rounds();
      standing_queue_rounds += cc[i].standing_queue_rounds();
    }
  }
  double utilization() const {
    return double(delivered_late) * 8 / (double(rate_bps) * double(seconds) / 2);
  }
  double overflow_fraction() const { return double(overflow_drops) / double(sent); }
  double overflow_late_fraction() const { return double(overflow_late) / double(sent_late); }
};

TEST_CASE("eight senders into one bottleneck: congestion loss caps in-flight data",
          "[congestion]") {
  SharedBottleneck with;
  with.Run();
  SharedBottleneck without;
  without.config.loss_threshold = 0;  // the pure BDP model, loss ignored
  without.Run();
  INFO("with response: utilization "
       << with.utilization() << " overflow " << with.overflow_fraction() << " late "
       << with.overflow_late_fraction() << " congestion rounds " << with.congestion_rounds);
  INFO("without: utilization " << without.utilization() << " overflow "
                               << without.overflow_fraction() << " late "
                               << without.overflow_late_fraction());
  CHECK(with.congestion_rounds > 0);
  CHECK(with.utilization() > 0.9);
  CHECK(with.overflow_fraction() < 0.05);
  // The response is what keeps the queue from dropping: without it 8 windows
  // of 2 x BDP overrun the queue.
  CHECK(without.overflow_fraction() > 2 * with.overflow_fraction());
}

TEST_CASE("a receiver-advertised fair share keeps eight senders off the queue's tail",
          "[congestion]") {
  SharedBottleneck capped;
  capped.receiver_share = true;
  capped.Run();
  SharedBottleneck plain;
  plain.Run();
  INFO("share: utilization " << capped.utilization() << " overflow late "
                             << capped.overflow_late_fraction() << " congestion rounds "
                             << capped.congestion_rounds);
  INFO("no share: utilization " << plain.utilization() << " overflow late "
                                << plain.overflow_late_fraction() << " congestion rounds "
                                << plain.congestion_rounds);
  // The cap is a ceiling 25% above the share (congestion.cc kCapHeadroom):
  // a cap at the share itself halved the overflow here, where C is the
  // link's from the first round, but on the testbed, where C is measured
  // from what the capped flows achieve, it held psd's pull at 68 Mbit/s
  // of 100 (docs/congestion.md). With the headroom the share costs nothing and
  // still keeps the senders within 20% of equal.
  CHECK(capped.utilization() > 0.95);
  CHECK(capped.overflow_late_fraction() <= plain.overflow_late_fraction() * 1.1);
  CHECK(capped.congestion_rounds <= plain.congestion_rounds * 11 / 10);
  const double equal = double(capped.delivered_late) / capped.senders;
  for (uint64_t b : capped.delivered_late_by) {
    CHECK(double(b) > equal * 0.8);
    CHECK(double(b) < equal * 1.2);
  }
}

TEST_CASE("a sender faster than the average share is not pulled down to it", "[congestion]") {
  // Sender 0 sits behind a 10 Mbit/s access link, sender 1 has the whole
  // 100 Mbit/s: the average share (55) is below what sender 1 can take.
  SharedBottleneck mixed;
  mixed.senders = 2;
  mixed.receiver_share = true;
  mixed.access_bps = {10'000'000, 100'000'000};
  mixed.Run();
  const double half = double(mixed.seconds) / 2;
  const double slow_mbps = double(mixed.delivered_late_by[0]) * 8 / half / 1e6;
  const double fast_mbps = double(mixed.delivered_late_by[1]) * 8 / half / 1e6;
  INFO("slow " << slow_mbps << " Mbit/s, fast " << fast_mbps << " Mbit/s, utilization "
               << mixed.utilization() << ", congestion rounds " << mixed.congestion_rounds
               << " (standing queue " << mixed.standing_queue_rounds << ")");
  CHECK(slow_mbps > 8);
  CHECK(fast_mbps > 80);
}

TEST_CASE("weighted shares: equal weights are the fair share, others split by weight",
          "[congestion]") {
  std::vector<size_t> order;
  const std::vector<double> one = {1.0};
  CHECK(WeightedShareLevel(100, {50}, one, order) == 0);  // one flow: no share
  CHECK(WeightedShareLevel(0, {10, 20}, {1.0, 1.0}, order) == 0);
  CHECK(WeightedShareLevel(100, {10, 20}, {1.0}, order) == 0);  // sizes differ
  // Equal weights: FairShareBps's level, whatever the weight's unit,
  // where no flow reads just under it.
  for (std::vector<uint64_t> rates : std::vector<std::vector<uint64_t>>{
           {30, 30, 30, 30}, {60, 10, 60}, {10, 80, 20}, {10, 20, 30}, {5, 90, 40, 12, 80}}) {
    std::vector<uint64_t> sorted = rates;
    const uint64_t fair = FairShareBps(200, sorted);
    const double level =
        WeightedShareLevel(200, rates, std::vector<double>(rates.size(), 7.0), order);
    CHECK(std::abs(level * 7.0 - double(fair)) <= 1.0);
  }
  // A sender's three peers with 48, 6 and 4 units left, none held
  // elsewhere: shares in that proportion, so all end together.
  const std::vector<double> left = {48, 6, 4};
  const std::vector<uint64_t> fresh = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
  double level = WeightedShareLevel(58'000, fresh, left, order);
  CHECK(level == Approx(1000.0));
  // The second held at 2,000 elsewhere (under its 6,000): it keeps that,
  // and the other two split the 56,000 left by 48:4.
  level = WeightedShareLevel(58'000, {UINT64_MAX, 2'000, UINT64_MAX}, left, order);
  CHECK(level * 48 == Approx(56'000.0 * 48 / 52));
  CHECK(level * 4 == Approx(56'000.0 * 4 / 52));
  // One just under its share (70 of 71.5) still counts as taking it:
  // FairShareBps would hold it to 70 and give the last 73.
  CHECK(WeightedShareLevel(200, {5, 90, 40, 12, 70}, std::vector<double>(5, 1.0), order) ==
        Approx(71.5));
  // Shares sum to the capacity whenever the flows fill it.
  const std::vector<uint64_t> mixed = {5, 90, 40, 12, 70};
  const std::vector<double> w = {3, 1, 2, 5, 4};
  level = WeightedShareLevel(200, mixed, w, order);
  double sum = 0;
  for (size_t i = 0; i < mixed.size(); ++i) sum += std::min(double(mixed[i]), level * w[i]);
  CHECK(sum == Approx(200.0));
}

TEST_CASE("a share's capacity is the busy spans' rate or one peer's BtlBw", "[congestion]") {
  CHECK(ShareCapacityBps(0, 50) == 0);  // never seen full: no shared bottleneck known
  CHECK(ShareCapacityBps(10, 50) == 50);
  CHECK(ShareCapacityBps(80, 50) == 80);
}

TEST_CASE("fair share is the water-filling level", "[congestion]") {
  std::vector<uint64_t> none = {50};
  CHECK(FairShareBps(100, none) == 0);  // one flow: no share to keep
  std::vector<uint64_t> unmeasured = {10, 20};
  CHECK(FairShareBps(0, unmeasured) == 0);
  std::vector<uint64_t> equal = {30, 30, 30, 30};
  CHECK(FairShareBps(100, equal) == 25);
  // The slow flow keeps its 10; the others split the 90 left.
  std::vector<uint64_t> slow = {60, 10, 60};
  CHECK(FairShareBps(100, slow) == 45);
  // Two slow ones leave 70 to the last.
  std::vector<uint64_t> two_slow = {10, 80, 20};
  CHECK(FairShareBps(100, two_slow) == 70);
  // Together under capacity: the largest may take all that is left.
  std::vector<uint64_t> under = {10, 20, 30};
  CHECK(FairShareBps(100, under) == 70);
  // Sum of min(r_i, R) is the capacity whenever the flows fill it.
  std::vector<uint64_t> mixed = {5, 90, 40, 12, 70};
  const uint64_t r = FairShareBps(200, mixed);
  uint64_t sum = 0;
  for (uint64_t x : mixed) sum += std::min(x, r);
  CHECK(sum <= 200);
  CHECK(sum + mixed.size() > 200);
}

TEST_CASE("random loss of 1% on one sender is not congestion", "[congestion]") {
  SharedBottleneck one;
  one.senders = 1;
  one.random_loss = 0.01;
  one.queue_bytes = 1'000'000;  // deep enough for 2 x BDP: no overflow
  SharedBottleneck strict = one;
  one.Run();
  INFO("utilization " << one.utilization() << " congestion rounds " << one.congestion_rounds
                      << " overflow " << one.overflow_drops);
  CHECK(one.overflow_drops == 0);
  CHECK(one.congestion_rounds == 0);
  CHECK(one.utilization() > 0.9);
  // Why the threshold is 5% and not BBR v2's 2%: at 2%, chance bunches of
  // random losses read as congestion and cost the lone sender rate.
  strict.config.loss_threshold = 0.02;
  strict.Run();
  INFO("threshold 2%: utilization " << strict.utilization() << " congestion rounds "
                                    << strict.congestion_rounds);
  CHECK(strict.congestion_rounds > 0);
  CHECK(strict.utilization() < 0.9);
}

TEST_CASE("a loss-based TCP flow keeps a share against LTP's controller", "[congestion]") {
  // One paced LTP sender and one Reno/Cubic-like sender share the 100
  // Mbit/s bottleneck with a queue of one BDP (tbf with latency 20 ms on the
  // testbed). The TCP flow fills the queue until it overflows; without the
  // standing-queue qualifier LTP reads the overflow as loss below 5% and
  // never yields.
  const auto run = [](bool standing) {
    SharedBottleneck pair;
    pair.senders = 2;
    pair.aimd_senders = 1;
    pair.seconds = 8;
    pair.config.standing_queue_response = standing;
    pair.Run();
    return pair;
  };
  const SharedBottleneck with = run(true);
  const SharedBottleneck without = run(false);
  const auto ratio = [](const SharedBottleneck& p) {
    return double(p.delivered_late_by[0]) / double(std::max<uint64_t>(p.delivered_late_by[1], 1));
  };
  INFO("with qualifier: ltp/tcp " << ratio(with) << " utilization " << with.utilization()
                                  << " standing rounds " << with.standing_queue_rounds);
  INFO("without: ltp/tcp " << ratio(without) << " utilization " << without.utilization());
  CHECK(with.standing_queue_rounds > 0);
  CHECK(ratio(with) < ratio(without) / 1.5);
  CHECK(ratio(with) < 2.5);  // kernel BBR against cubic on the testbed: 2.4
  CHECK(with.utilization() > 0.9);
}

// Unpaced paths (congestion.h): below unpaced_rtprop_us the window alone
// clocks the flow; a fair-share cap is ignored, and ignoring it is not a
// lifted cap (no return to startup).
TEST_CASE("a path of microseconds is neither paced nor capped", "[congestion]") {
  CongestionConfig c;
  CongestionControl cc(c);
  CHECK_FALSE(cc.unpaced());  // no RTT sample yet: paced at the initial rate
  CHECK(cc.pacing_rate_bps() < c.rate_bps_max);
  uint64_t now = 1000;
  for (int i = 0; i < 64; ++i) {
    const SendSample s = cc.OnSend(now, false);
    now += 30;  // 30 us RTT
    cc.OnAck(now, c.packet_bytes, s);
  }
  REQUIRE(cc.rtprop_us() > 0);
  REQUIRE(cc.rtprop_us() < c.unpaced_rtprop_us);
  CHECK(cc.unpaced());
  CHECK(cc.pacing_rate_bps() == c.rate_bps_max);
  const uint64_t restarts = cc.startup_restarts();
  cc.SetRateCap(50'000'000);
  CHECK(cc.rate_cap_bps() == 0);
  CHECK(cc.pacing_rate_bps() == c.rate_bps_max);
  cc.SetRateCap(0);
  CHECK(cc.startup_restarts() == restarts);
  CHECK(cc.cwnd_bytes() >= uint64_t(c.cwnd_packets_min) * c.packet_bytes);

  // unpaced_rtprop_us 0: every path is paced and capped.
  CongestionConfig paced = c;
  paced.unpaced_rtprop_us = 0;
  CongestionControl pc(paced);
  now = 1000;
  for (int i = 0; i < 64; ++i) {
    const SendSample s = pc.OnSend(now, false);
    now += 30;
    pc.OnAck(now, c.packet_bytes, s);
  }
  CHECK_FALSE(pc.unpaced());
  pc.SetRateCap(50'000'000);
  CHECK(pc.rate_cap_bps() == 50'000'000);
  CHECK(pc.pacing_rate_bps() < c.rate_bps_max);
}

}  // namespace
}  // namespace transport
}  // namespace hetps
