// ADLB: property tests on random inputs (shares sum to M and are >= 0; the
// exact solver is optimal, checked by its optimality conditions, by random
// feasible moves and by a grid search; it never loses to Algorithm 1 or the
// baselines), Algorithm 1's corrected Eq. 14, slicing and Algorithm 2
// against the paper's linear scan.
#include "lib/policy/adlb.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

namespace hetps {
namespace policy {
namespace {

double Sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

std::vector<double> RandomThroughputs(std::mt19937_64& rng, int n) {
  // 1 to 220 Mbit/s in bytes/s, sometimes a tenfold-slower straggler.
  std::uniform_real_distribution<double> rate(1e6 / 8, 220e6 / 8);
  std::vector<double> s(n);
  for (double& x : s) x = rate(rng);
  if (n > 1 && rng() % 3 == 0) s[rng() % n] /= 10;
  return s;
}

double MaxTime(double m, const std::vector<double>& s, const std::vector<double>& share) {
  double t = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    t = std::max(t, TransferTime(m, static_cast<int>(s.size()), share[i], s[i]));
  }
  return t;
}

}  // namespace

TEST_CASE("exact solver: shares are feasible and optimal on random inputs", "[adlb]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 60);
    const double m = std::uniform_real_distribution<double>(1e3, 3e8)(rng);
    auto s = RandomThroughputs(rng, n);
    if (trial % 4 == 0) {
      // Geometric spread: each pass of the solver drops only a node or two,
      // so it falls back to sorting (the other path).
      for (int i = 0; i < n; ++i) s[i] = 1e5 * std::pow(1.25, (i * 7919) % n);
    }
    auto d = SolveLoadExact(m, s);
    REQUIRE(d.ok());
    CAPTURE(trial, n, m);
    REQUIRE(d->share_bytes.size() == size_t(n));
    CHECK(Sum(d->share_bytes) == Approx(m).epsilon(1e-9));
    for (double x : d->share_bytes) REQUIRE(x >= 0);
    CHECK(d->max_time_s == Approx(MaxTime(m, s, d->share_bytes)).epsilon(1e-12));
    if (n <= 2) continue;
    // Optimality conditions: every node with a share finishes at the same
    // level T; a node without one could not help (T S_i <= M).
    double level = 0;
    for (int i = 0; i < n; ++i) {
      if (d->share_bytes[i] > 1e-9 * m) level = std::max(level, d->time_s[i]);
    }
    for (int i = 0; i < n; ++i) {
      if (d->share_bytes[i] > 1e-9 * m) {
        CHECK(d->time_s[i] == Approx(level).epsilon(1e-9));
      } else {
        CHECK(level * s[i] <= m * (1 + 1e-9));
      }
    }
    // No random feasible move of load between two nodes lowers the level of
    // the loaded nodes (the objective's part that shares can change).
    for (int k = 0; k < 20; ++k) {
      auto moved = d->share_bytes;
      const int a = rng() % n, b = rng() % n;
      if (a == b || moved[a] <= 0) continue;
      const double delta = moved[a] * std::uniform_real_distribution<double>(0.001, 1)(rng);
      moved[a] -= delta;
      moved[b] += delta;
      CHECK(MaxTime(m, s, moved) >= d->max_time_s * (1 - 1e-9));
    }
    // Never worse than Algorithm 1 or the baselines.
    auto alg1 = SolveLoadAlgorithm1(m, s, 1e-3, 100000);
    auto avg = LoadAverage(m, s);
    auto ela = LoadElastic(m, s);
    REQUIRE((alg1.ok() && avg.ok() && ela.ok()));
    CHECK(d->max_time_s <= alg1->max_time_s * (1 + 1e-9));
    CHECK(d->max_time_s <= avg->max_time_s * (1 + 1e-9));
    CHECK(d->max_time_s <= ela->max_time_s * (1 + 1e-9));
    CHECK(Sum(alg1->share_bytes) == Approx(m).epsilon(1e-9));
    for (double x : alg1->share_bytes) REQUIRE(x >= 0);
  }
}

TEST_CASE("exact solver matches a grid search over all splits of 3 and 4 nodes", "[adlb]") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + trial % 2;
    const double m = 1000;
    const auto s = RandomThroughputs(rng, n);
    auto d = SolveLoadExact(m, s);
    REQUIRE(d.ok());
    double best = INFINITY;
    const int steps = n == 3 ? 400 : 100;
    for (int a = 0; a <= steps; ++a) {
      for (int b = 0; a + b <= steps; ++b) {
        if (n == 3) {
          best = std::min(
              best, MaxTime(m, s, {m * a / steps, m * b / steps, m * (steps - a - b) / steps}));
          continue;
        }
        for (int c = 0; a + b + c <= steps; ++c) {
          best = std::min(best, MaxTime(m, s,
                                        {m * a / steps, m * b / steps, m * c / steps,
                                         m * (steps - a - b - c) / steps}));
        }
      }
    }
    CHECK(d->max_time_s <= best * (1 + 1e-9));
    CHECK(d->max_time_s >= best * (1 - 0.02));  // the grid is coarse
  }
}

TEST_CASE("load distribution edge cases and bad input", "[adlb]") {
  auto one = SolveLoadExact(100, {5});
  REQUIRE(one.ok());
  CHECK(one->share_bytes == std::vector<double>{100});
  CHECK(one->max_time_s == 0);
  auto two = SolveLoadExact(100, {1, 3});  // t_i = M / S_i whatever the split
  REQUIRE(two.ok());
  CHECK(two->share_bytes[0] == Approx(25));
  CHECK(two->share_bytes[1] == Approx(75));
  CHECK(two->max_time_s == Approx(100.0));
  // Equal throughputs: an even split, and Algorithm 1 stays there.
  auto even = SolveLoadExact(90, {2, 2, 2});
  REQUIRE(even.ok());
  for (double x : even->share_bytes) CHECK(x == Approx(30));
  auto alg = SolveLoadAlgorithm1(90, {2, 2, 2}, 1e-9, 100);
  REQUIRE(alg.ok());
  CHECK(alg->converged);
  CHECK(alg->iterations == 0);
  CHECK(!SolveLoadExact(100, {}).ok());
  CHECK(!SolveLoadExact(100, {1, 0, 2}).ok());
  CHECK(!SolveLoadExact(100, {1, -1, 2}).ok());
  CHECK(!SolveLoadExact(100, {1, NAN, 2}).ok());
  CHECK(!SolveLoadExact(-1, {1, 2, 3}).ok());
  CHECK(SolveLoadExact(100, {1, 0, 2}).status().message().find("node 1") != std::string::npos);
  CHECK(!SolveLoadAlgorithm1(100, {1, 2, 3}, -1, 10).ok());
}

TEST_CASE("Algorithm 1 equalises the extreme pair with the corrected Eq. 14", "[adlb]") {
  // Three nodes, one faster: after one move the two extremes finish together
  // (Eq. 14 as printed would put 340 of the pair's 200 on node 2).
  const std::vector<double> s = {10, 10, 12};
  auto d = SolveLoadAlgorithm1(300, s, 0, 1);
  REQUIRE(d.ok());
  REQUIRE(d->iterations == 1);
  // Nodes 0 (first of the slowest) and 2 (fastest) moved; node 1 kept 100.
  CHECK(d->share_bytes[1] == Approx(100));
  CHECK(d->time_s[0] == Approx(d->time_s[2]));
  CHECK(d->share_bytes[2] == Approx(3000.0 / 22));
  CHECK(Sum(d->share_bytes) == Approx(300));
  // Run to convergence: it approaches the exact optimum.
  auto full = SolveLoadAlgorithm1(300, s, 1e-9, 100000);
  auto exact = SolveLoadExact(300, s);
  REQUIRE((full.ok() && exact.ok()));
  CHECK(full->max_time_s == Approx(exact->max_time_s).epsilon(1e-6));
  // A straggler whose own update bounds the round: the loop stops (the
  // paper's would not) with the straggler aggregating nothing.
  auto stuck = SolveLoadAlgorithm1(300, {1, 100, 100}, 1e-9, 100000);
  REQUIRE(stuck.ok());
  CHECK_FALSE(stuck->converged);
  CHECK(stuck->share_bytes[0] == 0);
  CHECK(stuck->max_time_s == Approx(300.0));
  CHECK(stuck->iterations < 100000);
}

TEST_CASE("slice granularity, partition rate and cutting", "[adlb]") {
  CHECK(SliceGranularity(1.2e7, 12) == Approx(std::sqrt(1.2e7 * 1.2e5 / 12)));
  CHECK(SliceGranularity(0, 12) == 1);
  CHECK(PartitionRate(12, 1000) == Approx(2 * 12 * 0.6 / 1000));
  CHECK(PartitionRate(12, 3) == 1);
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> tensors(1 + rng() % 8);
    for (auto& t : tensors) t = 1 + rng() % 100000;
    const uint64_t gran = 1 + rng() % 5000, probe = 1 + rng() % 3000;
    const double rate = (rng() % 100) / 100.0;
    const auto slices = CutSlices(tensors, gran, probe, rate, trial);
    CHECK(CutSlices(tensors, gran, probe, rate, trial).size() == slices.size());
    // Contiguous, non-overlapping, covering each tensor exactly.
    std::vector<uint64_t> next(tensors.size(), 0);
    for (const Slice& sl : slices) {
      REQUIRE(sl.tensor < tensors.size());
      REQUIRE(sl.offset == next[sl.tensor]);
      REQUIRE(sl.size > 0);
      REQUIRE(sl.size <= std::max(gran, probe));
      if (sl.probe) REQUIRE(sl.size == probe);
      next[sl.tensor] += sl.size;
    }
    CHECK(next == tensors);
  }
}

// Algorithm 2 exactly as printed: linear scans.
std::vector<int> PaperAssign(std::vector<double> m, const std::vector<Slice>& slices,
                             int num_probe) {
  std::vector<int> assign(slices.size(), -1);
  size_t index = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    for (int h = 0; h < num_probe; ++h) {
      while (index < slices.size() && !slices[index].probe) ++index;
      if (index >= slices.size()) break;
      assign[index] = int(i);
      m[i] -= double(slices[index].size);
      ++index;
    }
  }
  for (size_t j = 0; j < slices.size(); ++j) {
    if (assign[j] >= 0) continue;
    double best = -INFINITY;
    int receiver = 0;
    for (size_t i = 0; i < m.size(); ++i) {
      if (best < m[i] - double(slices[j].size)) {
        best = m[i] - double(slices[j].size);
        receiver = int(i);
      }
    }
    assign[j] = receiver;
    m[receiver] = best;
  }
  return assign;
}

TEST_CASE("Algorithm 2: every slice assigned exactly once, as the paper's scan does", "[adlb]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 40);
    const auto s = RandomThroughputs(rng, n);
    std::vector<uint64_t> tensors(1 + rng() % 6);
    for (auto& t : tensors) t = 1 + rng() % 200000;
    const uint64_t total = std::accumulate(tensors.begin(), tensors.end(), uint64_t{0});
    auto d = SolveLoadExact(double(total), s);
    REQUIRE(d.ok());
    const uint64_t gran = 1 + uint64_t(SliceGranularity(double(total), n));
    const auto slices = CutSlices(tensors, gran, 100, 0.2, trial);
    const int num_probe = int(rng() % 3);
    auto got = AssignSlices(d->share_bytes, slices, num_probe);
    REQUIRE(got.ok());
    REQUIRE(got->size() == slices.size());
    std::vector<int> probes(n, 0);
    for (size_t j = 0; j < slices.size(); ++j) {
      REQUIRE((*got)[j] >= 0);
      REQUIRE((*got)[j] < n);
      if (slices[j].probe) ++probes[(*got)[j]];
    }
    CHECK(*got == PaperAssign(d->share_bytes, slices, num_probe));
    // With enough probe slices, every server gets its probes.
    const auto probe_count =
        std::count_if(slices.begin(), slices.end(), [](const Slice& sl) { return sl.probe; });
    if (probe_count >= n * num_probe) {
      for (int c : probes) CHECK(c >= num_probe);
    }
  }
  CHECK(!AssignSlices({}, {}, 1).ok());
}

}  // namespace policy
}  // namespace hetps
