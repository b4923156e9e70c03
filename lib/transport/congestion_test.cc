#include "lib/transport/congestion.h"

#include <catch2/catch.hpp>

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

TEST_CASE("estimates converge to the path's bandwidth and RTT", "[congestion]") {
  CongestionConfig c;
  c.initial_rate_bps = 10'000'000;
  c.cwnd_packets_min = 8;  // let the BDP, not the floor, set the window
  CongestionControl cc(c);
  Path path{100'000'000, 20'000};
  uint64_t now = 0;
  // Send at the controller's pacing rate, bounded by its window.
  struct InFlight {
    uint64_t ack_us;
    SendSample s;
  };
  std::vector<InFlight> q;
  uint64_t inflight = 0;
  const uint32_t bytes = 1400;
  for (int step = 0; step < 400000 && now < 5'000'000; ++step) {
    // Deliver ACKs due by now.
    for (size_t i = 0; i < q.size();) {
      if (q[i].ack_us <= now) {
        cc.OnAck(q[i].ack_us, bytes, q[i].s);
        inflight -= bytes;
        q.erase(q.begin() + i);
      } else {
        ++i;
      }
    }
    if (inflight + bytes <= cc.cwnd_bytes()) {
      SendSample s = cc.OnSend(now, false);
      q.push_back({path.AckTime(now, bytes), s});
      inflight += bytes;
      now += std::max<uint64_t>(1, uint64_t(bytes) * 8 * 1'000'000 / cc.pacing_rate_bps());
    } else {
      now += 50;
    }
  }
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

}  // namespace
}  // namespace transport
}  // namespace hetps
