#include "lib/membership/membership.h"

#include <catch2/catch.hpp>
#include <random>
#include <thread>

namespace hetps {
namespace {

NodeRecord Node(const std::string& id, NodeRole role = NodeRole::kWorker) {
  NodeRecord n;
  n.node_id = id;
  n.role = role;
  n.control_address = "127.0.0.1:1";
  return n;
}

Membership::Options Opts() {
  Membership::Options o;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.dead_after_missed = 3;
  return o;
}

TEST_CASE("a node that misses 3 heartbeats dies, not before") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  auto inc = m.Register(Node("w0"));
  REQUIRE(inc.ok());
  clock.Advance(absl::Milliseconds(299));
  CHECK(m.Expire() == 0);
  CHECK(m.Get("w0")->state == NodeState::kAlive);
  clock.Advance(absl::Milliseconds(1));
  CHECK(m.Expire() == 1);
  CHECK(m.Get("w0")->state == NodeState::kDead);
  CHECK(m.counters().deaths == 1);
  // A dead node's heartbeat is refused; it must register again.
  CHECK(m.Heartbeat("w0", *inc).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("incarnations start where a restarted schedd says; each one is reported first") {
  FakeClock clock;
  Membership::Options o = Opts();
  o.first_incarnation = 40;
  std::vector<uint64_t> saved;
  o.on_incarnation = [&](uint64_t next) { saved.push_back(next); };
  Membership m(o, &clock);
  CHECK(*m.Register(Node("w0")) == 40);
  CHECK(*m.Register(Node("w1")) == 41);
  CHECK(saved == std::vector<uint64_t>{41, 42});
}

TEST_CASE("heartbeats keep a node alive") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  auto inc = m.Register(Node("w0"));
  for (int i = 0; i < 50; ++i) {
    clock.Advance(absl::Milliseconds(250));
    REQUIRE(m.Heartbeat("w0", *inc).ok());
    REQUIRE(m.Expire() == 0);
  }
  CHECK(m.List(false).size() == 1);
}

TEST_CASE("one live node per id: a second address is refused, the first unharmed") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  auto first = m.Register(Node("psd-0"));
  REQUIRE(first.ok());
  NodeRecord impostor = Node("psd-0");
  impostor.control_address = "127.0.0.1:2";
  auto second = m.Register(impostor);
  REQUIRE(second.status().code() == absl::StatusCode::kAlreadyExists);
  // The message names both addresses.
  CHECK(second.status().message().find("alive at 127.0.0.1:1") != absl::string_view::npos);
  CHECK(second.status().message().find("from 127.0.0.1:2") != absl::string_view::npos);
  CHECK(m.counters().conflicts == 1);
  // The live one keeps its incarnation and its heartbeats.
  CHECK(m.Get("psd-0")->incarnation == *first);
  CHECK(m.Heartbeat("psd-0", *first).ok());
  // The same address is the same endpoint (the old process is gone): at once.
  auto again = m.Register(Node("psd-0"));
  REQUIRE(again.ok());
  CHECK(*again != *first);
  // Once the registered one is dead, the other address may take the id.
  clock.Advance(absl::Seconds(1));
  m.Expire();
  CHECK(m.Register(impostor).ok());
}

TEST_CASE("a restarted node re-registers with a new incarnation") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  auto first = m.Register(Node("w0"));
  clock.Advance(absl::Seconds(1));
  m.Expire();
  REQUIRE(m.Get("w0")->state == NodeState::kDead);
  auto second = m.Register(Node("w0"));
  REQUIRE(second.ok());
  CHECK(*second > *first);
  CHECK(m.Get("w0")->state == NodeState::kAlive);
  // The old incarnation can no longer heartbeat or deregister.
  CHECK(m.Heartbeat("w0", *first).code() == absl::StatusCode::kNotFound);
  CHECK(m.Deregister("w0", *first).code() == absl::StatusCode::kNotFound);
  CHECK(m.Heartbeat("w0", *second).ok());
}

TEST_CASE("deregister marks LEFT, which never expires to DEAD") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  auto inc = m.Register(Node("s0", NodeRole::kServer));
  REQUIRE(m.Deregister("s0", *inc).ok());
  REQUIRE(m.Deregister("s0", *inc).ok());  // idempotent
  clock.Advance(absl::Seconds(10));
  CHECK(m.Expire() == 0);
  CHECK(m.Get("s0")->state == NodeState::kLeft);
  CHECK(m.List(false).empty());
  CHECK(m.List(true).size() == 1);
}

TEST_CASE("non-expiring entries (schedd itself) never die") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  NodeRecord self = Node("schedd", NodeRole::kScheduler);
  self.expires = false;
  REQUIRE(m.Register(self).ok());
  clock.Advance(absl::Hours(1));
  CHECK(m.Expire() == 0);
}

TEST_CASE("invalid registrations are rejected") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  CHECK(m.Register(Node("")).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(m.Register(Node("has space")).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(m.Register(Node(std::string(129, 'x'))).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(m.Register(Node("w", NodeRole::kUnspecified)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(m.Heartbeat("ghost", 1).code() == absl::StatusCode::kNotFound);
  CHECK(m.counters().rejected_heartbeats == 1);
}

TEST_CASE("the table is bounded; departed entries make room, live ones do not") {
  FakeClock clock;
  Membership::Options o = Opts();
  o.nodes_max = 3;
  Membership m(o, &clock);
  auto a = m.Register(Node("a"));
  REQUIRE(m.Register(Node("b")).ok());
  REQUIRE(m.Register(Node("c")).ok());
  CHECK(m.Register(Node("d")).status().code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(m.Deregister("a", *a).ok());
  REQUIRE(m.Register(Node("d")).ok());
  CHECK_FALSE(m.Get("a").has_value());
  // Re-registering a known id needs no room.
  REQUIRE(m.Register(Node("b")).ok());
}

TEST_CASE("watchers get a snapshot then every change, in order") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  REQUIRE(m.Register(Node("w0")).ok());
  std::vector<NodeRecord> snap;
  uint64_t snap_version = 0;
  auto sub = m.Watch(&snap, &snap_version);
  REQUIRE(snap.size() == 1);
  CHECK(snap_version == m.version());
  auto inc = m.Register(Node("w1"));
  clock.Advance(absl::Seconds(1));
  REQUIRE(m.Heartbeat("w1", *inc).ok());
  m.Expire();  // w0 dies
  REQUIRE(m.Deregister("w1", *inc).ok());

  MembershipEvent e;
  REQUIRE(sub->Next(absl::ZeroDuration(), &e) == MembershipSubscription::Result::kEvent);
  CHECK(e.kind == MembershipEventKind::kJoined);
  CHECK(e.node.node_id == "w1");
  CHECK(e.version == snap_version + 1);
  REQUIRE(sub->Next(absl::ZeroDuration(), &e) == MembershipSubscription::Result::kEvent);
  CHECK(e.kind == MembershipEventKind::kDied);
  CHECK(e.node.node_id == "w0");
  REQUIRE(sub->Next(absl::ZeroDuration(), &e) == MembershipSubscription::Result::kEvent);
  CHECK(e.kind == MembershipEventKind::kLeft);
  CHECK(e.version == snap_version + 3);
  CHECK(sub->Next(absl::Milliseconds(1), &e) == MembershipSubscription::Result::kTimeout);
  m.Unwatch(sub);
  CHECK(sub->Next(absl::Milliseconds(1), &e) == MembershipSubscription::Result::kClosed);
}

TEST_CASE("a watcher that falls behind is closed as overflowed, not blocked") {
  FakeClock clock;
  Membership::Options o = Opts();
  o.watch_queue_max = 4;
  Membership m(o, &clock);
  std::vector<NodeRecord> snap;
  uint64_t v;
  auto sub = m.Watch(&snap, &v);
  for (int i = 0; i < 10; ++i) REQUIRE(m.Register(Node("n" + std::to_string(i))).ok());
  MembershipEvent e;
  CHECK(sub->Next(absl::ZeroDuration(), &e) == MembershipSubscription::Result::kOverflowed);
  CHECK(m.counters().watch_overflows == 1);
}

TEST_CASE("random operation sequences keep the table consistent") {
  FakeClock clock;
  Membership m(Opts(), &clock);
  std::mt19937 rng(7);
  std::map<std::string, uint64_t> inc;
  std::vector<NodeRecord> snap;
  uint64_t v0;
  auto sub = m.Watch(&snap, &v0);
  uint64_t events = 0;
  for (int step = 0; step < 2000; ++step) {
    std::string id = "n" + std::to_string(rng() % 8);
    switch (rng() % 4) {
      case 0: {
        auto r = m.Register(Node(id));
        REQUIRE(r.ok());
        inc[id] = *r;
        break;
      }
      case 1:
        if (inc.count(id)) (void)m.Heartbeat(id, inc[id]);
        break;
      case 2:
        if (inc.count(id)) (void)m.Deregister(id, inc[id]);
        break;
      case 3:
        clock.Advance(absl::Milliseconds(rng() % 200));
        m.Expire();
        break;
    }
    MembershipEvent e;
    while (sub->Next(absl::ZeroDuration(), &e) == MembershipSubscription::Result::kEvent) {
      ++events;
      REQUIRE(e.version == v0 + events);
    }
  }
  CHECK(m.version() == v0 + events);
  for (const auto& n : m.List(true)) {
    CHECK(n.incarnation == inc[n.node_id]);
  }
}

TEST_CASE("concurrent heartbeats and expiry are safe") {
  Membership::Options o = Opts();
  o.heartbeat_interval = absl::Milliseconds(50);
  Membership m(o, RealClock::Get());
  std::vector<uint64_t> incs;
  for (int i = 0; i < 4; ++i) incs.push_back(*m.Register(Node("t" + std::to_string(i))));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 2000; ++k) (void)m.Heartbeat("t" + std::to_string(i), incs[i]);
    });
  }
  threads.emplace_back([&] {
    for (int k = 0; k < 2000; ++k) m.Expire();
  });
  for (auto& t : threads) t.join();
  CHECK(m.counters().heartbeats + m.counters().rejected_heartbeats == 8000);
}

}  // namespace
}  // namespace hetps
