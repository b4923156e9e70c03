// Policy computation time, baselines measured in the same run:
//  1. ADLB's exact load solver (water filling, O(N log N)) against the
//     paper's Algorithm 1 (O(N) per move) at N = 1000: time and the round
//     time each reaches. Goal: exact at least 100x faster and never worse.
//  2. A full ADLB decision for 10,000 servers (exact shares, slicing a
//     98 MB model at the Eq. 4 granularity, Algorithm 2): goal under 10 ms.
// Throughputs: uniform 20-220 Mbit/s (the ADLB testbed's range; the slowest
// node's own update then bounds every solution, and Algorithm 1 stops at
// that floor) and 110-220 Mbit/s (the balance decides), seeded.
//
// usage: policy_bench [--repeats 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "lib/policy/adlb.h"

namespace hetps {
namespace policy {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `repeats` samples of the time per call; a sample repeats the
// call until 20 ms passed, so microsecond calls are timed accurately.
template <typename F>
double MedianSeconds(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto a = Clock::now();
    int calls = 0;
    double secs = 0;
    do {
      f();
      ++calls;
      secs = std::chrono::duration<double>(Clock::now() - a).count();
    } while (secs < 0.02);
    t.push_back(secs / calls);
  }
  return Median(t);
}

std::vector<double> Throughputs(int n, uint64_t seed, double lo_mbit = 20, double hi_mbit = 220) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mbit(lo_mbit, hi_mbit);
  std::vector<double> s(n);
  for (double& x : s) x = mbit(rng) * 1e6 / 8;
  return s;
}

int Main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--repeats") absl::SimpleAtoi(argv[i + 1], &repeats);
  }
  const double mobilenet = 21e6, resnet = 98e6;
  for (const auto& [lo, hi] : {std::pair<double, double>{110, 220}, {20, 220}}) {
    std::printf(
        "1. ADLB load solver, N = 1000, M = 21 MB, throughputs %g-%g Mbit/s, median of %d\n", lo,
        hi, repeats);
    std::printf("%-38s %10s %10s %10s %9s\n", "solver", "time ms", "round s", "iters", "speed-up");
    const auto s = Throughputs(1000, 1, lo, hi);
    LoadDistribution exact;
    const double t_exact = MedianSeconds(repeats, [&] { exact = *SolveLoadExact(mobilenet, s); });
    std::printf("%-38s %10.3f %10.4f %10s %9s\n", "exact (water filling)", t_exact * 1e3,
                exact.max_time_s, "-", "-");
    for (double threshold : {1.0, 1e-2, 1e-3, 1e-4, 1e-6}) {
      LoadDistribution a1;
      const double t = MedianSeconds(
          repeats, [&] { a1 = *SolveLoadAlgorithm1(mobilenet, s, threshold, 100'000'000); });
      char name[64];
      std::snprintf(name, sizeof(name), "Algorithm 1, threshold %g s%s", threshold,
                    a1.converged ? "" : " (floor)");
      std::printf("%-38s %10.3f %10.4f %10d %8.0fx\n", name, t * 1e3, a1.max_time_s, a1.iterations,
                  t / t_exact);
    }
    for (const char* name : {"average", "elastic"}) {
      auto d =
          std::string(name) == "average" ? LoadAverage(mobilenet, s) : LoadElastic(mobilenet, s);
      std::printf("%-38s %10s %10.4f %10s %9s\n", name, "-", d->max_time_s, "-", "-");
    }
    std::printf("\n");
  }

  std::printf("2. ADLB decision for 10,000 servers, M = 98 MB (24.5 M parameters)\n");
  const auto s10k = Throughputs(10000, 2);
  const double params = resnet / 4;
  size_t slices = 0;
  const double t_all = MedianSeconds(repeats, [&] {
    auto d = SolveLoadExact(resnet, s10k);
    const auto gran = static_cast<uint64_t>(SliceGranularity(params, 10000));
    std::vector<double> share(d->share_bytes.size());
    for (size_t i = 0; i < share.size(); ++i) share[i] = d->share_bytes[i] / 4;
    const auto cut = CutSlices({static_cast<uint64_t>(params)}, gran, 10000,
                               PartitionRate(10000, params / gran), 1);
    auto assign = AssignSlices(share, cut, 2);
    slices = assign->size();
  });
  const double t_solve =
      MedianSeconds(repeats, [&] { SolveLoadExact(resnet, s10k).IgnoreError(); });
  std::printf(
      "exact shares: %.3f ms; with slicing and Algorithm 2 (%zu slices): %.3f ms "
      "(goal < 10 ms)\n",
      t_solve * 1e3, slices, t_all * 1e3);
  return 0;
}

}  // namespace
}  // namespace policy
}  // namespace hetps

int main(int argc, char** argv) { return hetps::policy::Main(argc, argv); }
