// WLBS: splits sum exactly and respect minimums; a partial adjustment
// equalises the slowest/fastest pair at measured speeds; repeated minor
// adjustments bring a cluster with a half-speed straggler within 10% of the
// ideal iteration time (equal split: 1.8x slower); failed workers' work is
// redistributed without loss.
#include "lib/policy/wlbs.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>

namespace hetps {
namespace policy {
namespace {

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// Time of each worker for its units at its true speed (units/s).
std::vector<double> Times(const std::vector<int64_t>& units, const std::vector<double>& speed) {
  std::vector<double> t(units.size());
  for (size_t i = 0; i < units.size(); ++i) t[i] = std::max<double>(units[i], 1e-3) / speed[i];
  return t;
}

double IterationTime(const std::vector<int64_t>& units, const std::vector<double>& speed) {
  const auto t = Times(units, speed);
  return *std::max_element(t.begin(), t.end());
}

}  // namespace

TEST_CASE("proportional splits sum exactly and respect the minimum", "[wlbs]") {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + int(rng() % 30);
    std::vector<double> w(n);
    for (double& x : w) x = (rng() % 5 == 0) ? 0 : double(rng() % 1000) / 7;
    if (std::all_of(w.begin(), w.end(), [](double x) { return x == 0; })) w[0] = 1;
    const int64_t min_each = int64_t(rng() % 3);
    const int64_t total = n * min_each + int64_t(rng() % 100000);
    auto s = SplitProportional(total, w, min_each);
    REQUIRE(s.ok());
    REQUIRE(Sum(*s) == total);
    const double wsum = std::accumulate(w.begin(), w.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      REQUIRE((*s)[i] >= min_each);
      // Within one unit of the exact proportional share of what is left.
      const double exact = min_each + double(total - n * min_each) * w[i] / wsum;
      REQUIRE(std::abs(double((*s)[i]) - exact) < 1.0 + 1e-9);
    }
  }
  CHECK(!SplitProportional(2, {1, 1, 1}, 1).ok());
  CHECK(!SplitProportional(10, {0, 0}, 0).ok());
  CHECK(!SplitProportional(10, {1, -1}, 0).ok());
  CHECK(!SplitProportional(10, {}, 0).ok());
}

TEST_CASE("initial division follows capability indicators", "[wlbs]") {
  // Two 8-core nodes, one 4-core, one with a GPU.
  std::vector<NodeCapability> nodes = {{8, 32, 0}, {8, 32, 0}, {4, 16, 0}, {8, 32, 1}};
  auto s = InitialDivision(nodes, 60000, 256);
  REQUIRE(s.ok());
  CHECK(Sum(s->samples) == 60000);
  CHECK(Sum(s->batch) == 256);
  CHECK(s->samples[0] == s->samples[1]);
  CHECK(s->samples[2] < s->samples[0]);
  CHECK(s->samples[3] > s->samples[0]);
  CHECK(s->batch[3] > s->batch[2]);
  CHECK(!InitialDivision({{0, 0, 0}}, 100, 10).ok());
}

TEST_CASE("a partial adjustment equalises the slowest and the fastest worker", "[wlbs]") {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = 2 + int(rng() % 10);
    std::vector<double> speed(n);
    for (double& v : speed) v = 1 + double(rng() % 1000);
    std::vector<int64_t> units(n);
    for (auto& u : units) u = 1 + int64_t(rng() % 5000);
    const auto t = Times(units, speed);
    auto a = PartialAdjust(units, t, 0, 1);
    REQUIRE(a.ok());
    REQUIRE(Sum(a->units) == Sum(units));
    for (auto u : a->units) REQUIRE(u >= 1);
    if (!a->adjusted) continue;
    // Only the pair moved, and their times now differ by at most a unit's.
    for (int i = 0; i < n; ++i) {
      if (i != a->from && i != a->to) REQUIRE(a->units[i] == units[i]);
    }
    CHECK(a->units[a->from] < units[a->from]);
    const auto t2 = Times(a->units, speed);
    const double unit_time = 1 / std::min(speed[a->from], speed[a->to]);
    CHECK(std::abs(t2[a->from] - t2[a->to]) <= unit_time + 1e-9);
  }
  // Within theta: nothing moves.
  auto same = PartialAdjust({10, 10}, {1.0, 1.05}, 0.1, 1);
  REQUIRE(same.ok());
  CHECK_FALSE(same->adjusted);
  CHECK(!PartialAdjust({10, 10}, {1.0}, 0.1, 1).ok());
  CHECK(!PartialAdjust({10, 10}, {1.0, 0}, 0.1, 1).ok());
}

TEST_CASE("minor adjustments bring a half-speed straggler within 10% of ideal", "[wlbs]") {
  // WLBS's setting: 5 workers, one at half speed, batch 32 each (160).
  const std::vector<double> speed = {100, 100, 100, 100, 50};  // samples/s
  std::vector<int64_t> batch(5, 32);
  const double ideal = 160.0 / 450.0;
  const double equal_split = IterationTime(batch, speed);
  CHECK(equal_split / ideal >= 1.6);
  int cycles = 0;
  for (; cycles < 50; ++cycles) {
    auto a = PartialAdjust(batch, Times(batch, speed), 0.005, 1);
    REQUIRE(a.ok());
    if (!a->adjusted) break;
    batch = a->units;
  }
  CAPTURE(cycles, batch);
  CHECK(Sum(batch) == 160);
  CHECK(IterationTime(batch, speed) <= 1.10 * ideal);
  CHECK(cycles < 50);
}

TEST_CASE("a failed worker's work goes to the others by speed", "[wlbs]") {
  const std::vector<int64_t> units = {100, 100, 100, 60};
  const std::vector<double> t = {1, 1, 2, 1};  // worker 2 is half as fast
  auto r = RedistributeFailed(units, t, {false, false, false, true});
  REQUIRE(r.ok());
  CHECK(Sum(*r) == 360);
  CHECK((*r)[3] == 0);
  CHECK((*r)[0] == 124);
  CHECK((*r)[1] == 124);
  CHECK((*r)[2] == 112);
  CHECK(!RedistributeFailed(units, t, {true, true, true, true}).ok());
  CHECK(!RedistributeFailed(units, t, {true}).ok());
}

}  // namespace policy
}  // namespace hetps
