// SimNetwork: each link's fate of a datagram depends only on the seed, the
// two addresses and the datagram's place on that link; delay, jitter
// (reordering), duplication, rate and drop-tail behave as specified.
#include "lib/transport/sim_network.h"

#include <arpa/inet.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

namespace hetps {
namespace transport {
namespace {

Peer Addr(uint32_t host, uint16_t port = 7000) {
  return Peer{htonl(0x0A000000u + host), htons(port)};
}

void SendN(SimSocket& from, const Peer& to, int n, size_t bytes = 100) {
  std::vector<uint8_t> buf(bytes);
  for (int i = 0; i < n; ++i) {
    std::memcpy(buf.data(), &i, sizeof(i));
    OutDatagram d{to, buf.data(), buf.size(), nullptr, 0};
    REQUIRE(from.SendBatch(&d, 1) == 1);
  }
}

// Sockets at hosts 1, 2 and 3.
std::array<std::unique_ptr<SimSocket>, 3> OpenThree(SimNetwork& net) {
  std::array<std::unique_ptr<SimSocket>, 3> out;
  for (uint32_t i = 0; i < 3; ++i) {
    auto s = net.Open(Addr(i + 1));
    REQUIRE(s.ok());
    out[i] = std::move(*s);
  }
  return out;
}

// Every datagram receivable now, as the int each one starts with.
std::vector<int> Drain(SimSocket& s) {
  std::vector<int> got;
  std::vector<InDatagram> in;
  while (s.RecvBatch(&in) > 0) {
    for (const InDatagram& d : in) {
      int v;
      std::memcpy(&v, d.data, sizeof(v));
      got.push_back(v);
    }
  }
  return got;
}

TEST_CASE("a seeded link drops the same datagrams in every run", "[sim]") {
  std::vector<int> runs[2];
  for (auto& got : runs) {
    FakeClock clock;
    SimNetwork net(&clock, 42);
    auto a = net.Open(Addr(1));
    auto b = net.Open(Addr(2));
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    LinkImpairment lossy;
    lossy.loss = 0.3;
    net.SetLink(Addr(1), Addr(2), lossy);
    SendN(**a, Addr(2), 1000);
    clock.Advance(absl::Milliseconds(1));
    got = Drain(**b);
    const SimStats st = net.stats();
    CHECK(st.sent == 1000);
    CHECK(st.lost + st.delivered == 1000);
  }
  CHECK(runs[0] == runs[1]);
  // About 30% lost with this seed; exact for the seed, so not luck.
  CHECK(runs[0].size() > 600);
  CHECK(runs[0].size() < 800);
  // Another seed, another pattern.
  FakeClock clock;
  SimNetwork net(&clock, 43);
  auto a = net.Open(Addr(1));
  auto b = net.Open(Addr(2));
  LinkImpairment lossy;
  lossy.loss = 0.3;
  net.SetLink(Addr(1), Addr(2), lossy);
  SendN(**a, Addr(2), 1000);
  clock.Advance(absl::Milliseconds(1));
  CHECK(Drain(**b) != runs[0]);
}

TEST_CASE("delay holds datagrams; jitter reorders them; duplicates arrive twice", "[sim]") {
  FakeClock clock;
  SimNetwork net(&clock, 7);
  auto a = net.Open(Addr(1));
  auto b = net.Open(Addr(2));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  LinkImpairment imp;
  imp.delay_us = 5000;
  imp.jitter_us = 3000;
  imp.duplicate = 0.2;
  net.SetLink(Addr(1), Addr(2), imp);
  SendN(**a, Addr(2), 200);
  clock.Advance(absl::Microseconds(4999));
  CHECK(Drain(**b).empty());
  CHECK((*b)->next_arrival_us() >= clock.MonotonicMicros());
  clock.Advance(absl::Milliseconds(4));
  const std::vector<int> got = Drain(**b);
  CHECK(net.stats().duplicated > 0);
  CHECK(got.size() == 200 + net.stats().duplicated);
  CHECK(!std::is_sorted(got.begin(), got.end()));
  CHECK((*b)->next_arrival_us() == UINT64_MAX);
}

TEST_CASE("a rate-limited link serialises and drops at the tail of its queue", "[sim]") {
  FakeClock clock;
  SimNetwork net(&clock, 1);
  auto a = net.Open(Addr(1));
  auto b = net.Open(Addr(2));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  LinkImpairment imp;
  imp.delay_us = 0;
  imp.rate_bps = 8'000'000;      // 1 byte per microsecond
  imp.queue_bytes_max = 10'000;  // 10 ms of queue
  net.SetLink(Addr(1), Addr(2), imp);
  SendN(**a, Addr(2), 200, 1000);  // 200 ms of data at once
  const SimStats st = net.stats();
  CHECK(st.queue_dropped > 150);
  CHECK(st.queue_dropped < 200);
  CHECK(st.uplink_dropped + st.downlink_dropped == 0);  // at the link, not at an access link
  clock.Advance(absl::Microseconds(1000));
  CHECK(Drain(**b).size() == 1);  // one 1000-byte datagram per millisecond
  clock.Advance(absl::Milliseconds(100));
  CHECK(Drain(**b).size() == 200 - st.queue_dropped - 1);
}

// Two senders' links each at the downlink's rate: together they queue at
// it, in the order their links deliver (interleaved: not one sender's
// whole burst first), and drop at its tail.
TEST_CASE("a downlink serialises what all senders send to it", "[sim]") {
  FakeClock clock;
  SimNetwork net(&clock, 1);
  auto [a, b, c] = OpenThree(net);
  LinkImpairment imp;
  imp.delay_us = 0;
  imp.rate_bps = 8'000'000;  // each sender's link: 1 byte per microsecond
  net.SetEgress(Addr(1), imp);
  net.SetEgress(Addr(2), imp);
  net.SetDownlink(Addr(3), 8'000'000, 10'000);  // the same rate, 10 ms of queue
  SendN(*a, Addr(3), 5, 1000);
  SendN(*b, Addr(3), 5, 1000);
  clock.Advance(absl::Milliseconds(5));
  // Through by 5 ms: the first pair's two, then one a ms.
  CHECK(Drain(*c) == std::vector<int>{0, 0, 1, 1});
  CHECK(net.next_arrival_us() == clock.MonotonicMicros() + 1000);  // a2
  clock.Advance(absl::Milliseconds(6));
  CHECK(Drain(*c).size() == 6);
  CHECK(net.stats().queue_dropped == 0);
  SendN(*a, Addr(3), 40, 1000);  // 40 ms each: twice what the downlink takes
  SendN(*b, Addr(3), 40, 1000);
  clock.Advance(absl::Milliseconds(200));
  const auto got = Drain(*c);
  const uint64_t dropped = net.stats().queue_dropped;
  CHECK(got.size() + dropped == 80);
  CHECK(net.stats().downlink_dropped == dropped);
  CHECK(net.stats().uplink_dropped == 0);
  // ~40 went through while they came, ~10 more from the full queue.
  CHECK(got.size() >= 48);
  CHECK(got.size() <= 52);
}

TEST_CASE("an uplink serialises what one sender sends to all its peers", "[sim]") {
  FakeClock clock;
  SimNetwork net(&clock, 1);
  auto [a, b, c] = OpenThree(net);
  LinkImpairment imp;
  imp.delay_us = 100;
  net.SetEgress(Addr(1), imp);                // links without a rate of their own
  net.SetUplink(Addr(1), 8'000'000, 10'000);  // 1 byte per microsecond, 10 ms of queue
  SendN(*a, Addr(2), 3, 1000);
  SendN(*a, Addr(3), 3, 1000);
  // One a ms, in the order sent: b's three, then c's.
  clock.Advance(absl::Microseconds(3100));
  CHECK(Drain(*b) == std::vector<int>{0, 1, 2});
  CHECK(Drain(*c).empty());
  clock.Advance(absl::Milliseconds(3));
  CHECK(Drain(*c) == std::vector<int>{0, 1, 2});
  CHECK(net.stats().queue_dropped == 0);
  SendN(*a, Addr(2), 40, 1000);  // 40 ms at once: the queue holds 10
  SendN(*a, Addr(3), 40, 1000);
  clock.Advance(absl::Milliseconds(200));
  const size_t got = Drain(*b).size() + Drain(*c).size();
  CHECK(got + net.stats().queue_dropped == 80);
  CHECK(got == 11);  // the one on the wire and ten waiting
  CHECK(net.stats().uplink_dropped == net.stats().queue_dropped);
  CHECK(net.stats().downlink_dropped == 0);
  // Another sender's datagrams do not wait behind a's.
  SendN(*b, Addr(3), 1, 1000);
  clock.Advance(absl::Microseconds(100));
  CHECK(Drain(*c).size() == 1);
  // What a link loses crossed the uplink first: c's datagram waits
  // behind the two that a's link to b drops.
  LinkImpairment lossy = imp;
  lossy.loss = 1.0;
  net.SetLink(Addr(1), Addr(2), lossy);
  SendN(*a, Addr(2), 2, 1000);
  SendN(*a, Addr(3), 1, 1000);
  clock.Advance(absl::Microseconds(2900));
  CHECK(Drain(*c).empty());
  clock.Advance(absl::Microseconds(200));
  CHECK(Drain(*c).size() == 1);
  CHECK(Drain(*b).empty());
}

TEST_CASE("addresses: taken ports refused, port 0 picks one, unroutable counted", "[sim]") {
  FakeClock clock;
  SimNetwork net(&clock, 1);
  auto a = net.Open(Addr(1));
  REQUIRE(a.ok());
  CHECK(!net.Open(Addr(1)).ok());
  auto any = net.Open(Addr(1, 0));
  REQUIRE(any.ok());
  CHECK((*any)->local().port != 0);
  SendN(**a, Addr(9), 3);
  CHECK(net.stats().unroutable == 3);
  // Injected datagrams come from any address.
  const uint8_t bytes[4] = {1, 0, 0, 0};
  net.Inject(Addr(200, 1), Addr(1), bytes, sizeof(bytes));
  clock.Advance(absl::Milliseconds(1));
  std::vector<InDatagram> in;
  REQUIRE((*a)->RecvBatch(&in) == 1);
  CHECK(in[0].from == Addr(200, 1));
  CHECK(in[0].len == 4);
  // A closed socket's address is free again.
  a->reset();
  CHECK(net.Open(Addr(1)).ok());
}

}  // namespace
}  // namespace transport
}  // namespace hetps
