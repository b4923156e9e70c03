// Simulator engine: max-min fair sharing against hand-computed rates, and
// rounds whose timing can be worked out by hand (store and forward,
// pipelining, a rate change mid-transfer, multipath relief).
#include "lib/sim/round_sim.h"

#include <catch2/catch.hpp>

#include "lib/sim/flow_network.h"

namespace hetps {
namespace sim {
namespace {

std::vector<int64_t> RunAll(FlowNetwork* net, std::vector<double>* when) {
  std::vector<int64_t> order, done;
  while (std::isfinite(net->NextCompletion())) {
    const double t = net->NextCompletion();
    done.clear();
    net->AdvanceTo(t, &done);
    for (int64_t tag : done) {
      order.push_back(tag);
      when->push_back(t);
    }
  }
  return order;
}

RoundSimulator::RatesFn Fixed(std::vector<double> r) {
  return [r](int64_t) { return r; };
}

policy::AggregationTree TreeOf(int n, int root, std::vector<int> parent) {
  policy::AggregationTree t;
  t.root = root;
  t.parent = parent;
  t.route.assign(n, {});
  for (int v = 0; v < n; ++v) {
    if (parent[v] >= 0) t.route[v] = {v, parent[v]};
  }
  return t;
}

}  // namespace

TEST_CASE("flows share links max-min fairly", "[sim]") {
  // Links 0 (10 B/s) and 1 (4 B/s); f1 on 0, f2 on 0 and 1, f3 on 1:
  // link 1 limits f2 and f3 to 2 each, f1 takes the 8 left on link 0.
  FlowNetwork net({10, 4});
  net.Start({0}, 80, 1);
  net.Start({0, 1}, 20, 2);
  net.Start({1}, 20, 3);
  std::vector<double> when;
  auto order = RunAll(&net, &when);
  REQUIRE(order.size() == 3);
  // f1 at 8 B/s, f2 and f3 at 2 B/s: all done at t = 10.
  CHECK(when[0] == Approx(10));
  CHECK(when[2] == Approx(10));
  // One flow alone; then two equal flows share: 10 B each at 5 B/s.
  FlowNetwork one({5});
  one.Start({0}, 10, 7);
  one.Start({0}, 10, 8);
  when.clear();
  order = RunAll(&one, &when);
  CHECK(when[0] == Approx(4));
  CHECK(when[1] == Approx(4));
  CHECK(one.carried_bytes()[0] == Approx(20));
  // When one finishes, the other speeds up: 5 B and 15 B at 5 B/s: 2 s,
  // then 10 B alone at 5 B/s: 4 s.
  FlowNetwork two({5});
  two.Start({0}, 5, 1);
  two.Start({0}, 15, 2);
  when.clear();
  order = RunAll(&two, &when);
  CHECK(order == std::vector<int64_t>{1, 2});
  CHECK(when[0] == Approx(2));
  CHECK(when[1] == Approx(4));
}

TEST_CASE("a round: compute, gather to the root, send back", "[sim]") {
  auto sim = RoundSimulator::Create(2, {{0, 1, 0.1}}, 0, Fixed({1e6}));
  REQUIRE(sim.ok());
  RoundPlan plan;
  plan.compute_s = {0.5, 1.0};
  plan.trees.push_back({TreeOf(2, 0, {-1, 0}), {}, {1e6}});
  auto r = sim->RunRound(plan);
  REQUIRE(r.ok());
  // Node 1 computes 1 s, sends 1 MB at 1 MB/s (done 2.0, arrives 2.1), the
  // root sends it back (done 3.1, arrives 3.2).
  CHECK(r->duration_s == Approx(3.2));
  CHECK(r->compute_s == Approx(1.0));
  CHECK(r->chunks_sent == 2);
  // The next round starts where this one ended.
  auto r2 = sim->RunRound(plan);
  REQUIRE(r2.ok());
  CHECK(r2->start_s == Approx(3.2));
  CHECK(sim->now() == Approx(6.4));
}

TEST_CASE("chunks pipeline along a chain", "[sim]") {
  auto sim = RoundSimulator::Create(3, {{0, 1, 0}, {1, 2, 0}}, 0, Fixed({1e6, 1e6}));
  REQUIRE(sim.ok());
  RoundPlan plan;
  plan.compute_s = {0, 0, 0};
  plan.trees.push_back({TreeOf(3, 0, {-1, 0, 1}), {}, std::vector<double>(10, 1e5)});
  auto r = sim->RunRound(plan);
  REQUIRE(r.ok());
  // 0.1 s per chunk per hop: up the chain ends at 1.1 s, the last chunk
  // comes back down two hops later: 1.3 s (whole-model store-and-forward
  // would take 4 s).
  CHECK(r->duration_s == Approx(1.3));
  // One chunk: no pipelining, 4 hops of 1 s.
  plan.trees[0].chunk_bytes = {1e6};
  auto r1 = sim->RunRound(plan);
  REQUIRE(r1.ok());
  CHECK(r1->duration_s == Approx(4.0));
}

TEST_CASE("a rate change mid-transfer takes effect at the period boundary", "[sim]") {
  auto sim = RoundSimulator::Create(2, {{0, 1, 0}}, 1.0, [](int64_t period) {
    return std::vector<double>{period == 0 ? 1e6 : 2e6};
  });
  REQUIRE(sim.ok());
  RoundPlan plan;
  plan.compute_s = {0, 0};
  plan.trees.push_back({TreeOf(2, 0, {-1, 0}), {}, {2e6}});
  auto r = sim->RunRound(plan);
  REQUIRE(r.ok());
  // Up: 1 MB in the first second, 1 MB at 2 MB/s: 1.5 s. Down: 1 s more.
  CHECK(r->duration_s == Approx(2.5));
  CHECK(sim->current_rates()[0] == 2e6);
}

TEST_CASE("auxiliary paths carry chunks when the primary is busy", "[sim]") {
  // Triangle: 1 -> 0 is slow, 1 -> 2 -> 0 fast. Tree: 1 and 2 send to 0.
  auto make = [] {
    return RoundSimulator::Create(3, {{0, 1, 0}, {1, 2, 0}, {0, 2, 0}}, 0,
                                  Fixed({1e6, 10e6, 10e6}));
  };
  RoundPlan plan;
  plan.compute_s = {0, 0, 0};
  TreePlan tp{TreeOf(3, 0, {-1, 0, 0}), {}, std::vector<double>(20, 1e5)};
  tp.auxiliary.assign(3, {});
  tp.auxiliary[1] = {{1, 2, 0}};
  tp.auxiliary[2] = {{2, 1, 0}};
  plan.trees.push_back(tp);
  auto single = make();
  REQUIRE(single.ok());
  auto r0 = single->RunRound(plan);
  REQUIRE(r0.ok());
  CHECK(r0->auxiliary_sent == 0);
  plan.multipath = true;
  plan.primary_busy_bound = 2;
  plan.auxiliary_queue_length = 5;
  auto multi = make();
  REQUIRE(multi.ok());
  auto r1 = multi->RunRound(plan);
  REQUIRE(r1.ok());
  CHECK(r1->auxiliary_sent > 0);
  CHECK(r1->duration_s < 0.6 * r0->duration_s);
  // The paper's early binding sends the burst of ready chunks that finds
  // every route full to the slow primary: less relief.
  plan.late_binding = false;
  auto early = make();
  REQUIRE(early.ok());
  auto r2 = early->RunRound(plan);
  REQUIRE(r2.ok());
  CHECK(r2->auxiliary_sent > 0);
  CHECK(r2->duration_s > r1->duration_s);
}

TEST_CASE("bad plans and stalls are reported, not crashed on", "[sim]") {
  CHECK(!RoundSimulator::Create(0, {}, 0, Fixed({})).ok());
  CHECK(!RoundSimulator::Create(2, {{0, 2, 0}}, 0, Fixed({1})).ok());
  CHECK(!RoundSimulator::Create(2, {{0, 1, 0}, {1, 0, 0}}, 0, Fixed({1, 1})).ok());
  CHECK(!RoundSimulator::Create(2, {{0, 1, 0}}, 0, Fixed({1, 1})).ok());
  auto sim = RoundSimulator::Create(3, {{0, 1, 0}}, 0, Fixed({0}));
  REQUIRE(sim.ok());
  RoundPlan plan;
  plan.compute_s = {0, 0, 0};
  plan.trees.push_back({TreeOf(3, 0, {-1, 0, -1}), {}, {1e6}});
  auto r = sim->RunRound(plan);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  plan.trees[0] = {TreeOf(3, 0, {-1, 0, 0}), {}, {1e6}};  // 2 -> 0 has no link
  auto sim2 = RoundSimulator::Create(3, {{0, 1, 0}}, 0, Fixed({1}));
  REQUIRE(sim2.ok());
  CHECK(sim2->RunRound(plan).status().code() == absl::StatusCode::kInvalidArgument);
  plan.compute_s = {0};
  CHECK(!sim2->RunRound(plan).ok());
}

TEST_CASE("progress order lets a long tree's chunk overtake a short tree's late ones", "[sim]") {
  // Line 0 - 1 - 2, 1 B/s each way, no latency, chunks of 1 B. Tree A (root
  // 1) has 3 chunks from node 0; tree B (root 2) has 1 chunk, 0 -> 1 -> 2
  // and back. Both share the queue 0 -> 1.
  // FIFO: A0 A1 A2 B0 on 0 -> 1 (B0 leaves at 3); B0 then takes 1 -> 2,
  // 2 -> 1, 1 -> 0: done at 7.
  // Progress: A0 (1/6), A1 (1/2), B0 (1/2, after A1), A2 (5/6): B0 leaves at
  // 2, is back at node 1 at 5 and reaches 0 at 6 (after A2's down, 4 to 5).
  for (bool progress : {false, true}) {
    CAPTURE(progress);
    auto sim = RoundSimulator::Create(3, {{0, 1, 0}, {1, 2, 0}}, 0, Fixed({1, 1}));
    REQUIRE(sim.ok());
    RoundPlan plan;
    plan.compute_s = {0, 0, 0};
    plan.progress_order = progress;
    plan.trees.push_back({TreeOf(3, 1, {1, -1, -1}), {}, {1, 1, 1}});
    plan.trees.push_back({TreeOf(3, 2, {1, 2, -1}), {}, {1}});
    auto r = sim->RunRound(plan);
    REQUIRE(r.ok());
    CHECK(r->duration_s == Approx(progress ? 6 : 7));
    CHECK(r->chunks_sent == 3 * 2 + 1 * 4);
  }
}

}  // namespace sim
}  // namespace hetps
