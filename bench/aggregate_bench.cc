// Aggregation of 8 gradient buffers (SumScaled) against a plain memory
// bandwidth baseline measured in the same run: memcpy of a region as large as
// all 8 inputs together (so both run from DRAM, not cache), counting bytes
// read + written. The aggregation's effective bandwidth counts 8 buffers read
// + 1 written. Goal: at least 60% of the baseline.
//
// usage: aggregate_bench [--mb-per-buffer 23] [--buffers 8] [--repeats 15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "lib/ps/aggregate.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 23;
  size_t buffers = 8;
  int repeats = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb-per-buffer") absl::SimpleAtoi(argv[i + 1], &mb);
    if (a == "--buffers") absl::SimpleAtoi(argv[i + 1], &buffers);
    if (a == "--repeats") absl::SimpleAtoi(argv[i + 1], &repeats);
  }
  const size_t len = (mb << 20) / sizeof(float);
  std::vector<std::vector<float>> in(buffers, std::vector<float>(len));
  for (size_t k = 0; k < buffers; ++k) {
    for (size_t i = 0; i < len; ++i) in[k][i] = float((i + k) % 97) * 0.01f;
  }
  std::vector<const float*> ptrs;
  for (auto& b : in) ptrs.push_back(b.data());
  std::vector<float> out(len, 0.f), copy_src(len * buffers, 1.f), copy(len * buffers, 0.f);
  std::vector<double> agg_gbs, copy_gbs, ratios;
  const double bytes = double(len) * sizeof(float);
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    std::memcpy(copy.data(), copy_src.data(), copy.size() * sizeof(float));
    auto t1 = Clock::now();
    hetps::ps::SumScaled(ptrs.data(), buffers, len, 1.0f / buffers, out.data());
    auto t2 = Clock::now();
    const double c = 2 * bytes * buffers / std::chrono::duration<double>(t1 - t0).count() / 1e9;
    const double a = (buffers + 1) * bytes / std::chrono::duration<double>(t2 - t1).count() / 1e9;
    copy_gbs.push_back(c);
    agg_gbs.push_back(a);
    ratios.push_back(a / c);
  }
  volatile float sink = out[len / 2] + copy[len / 3];
  (void)sink;
  std::printf("aggregation of %zu x %zu MB float32 buffers, median of %d\n", buffers, mb, repeats);
  std::printf("%-28s %10s\n", "kernel", "GB/s");
  std::printf("%-28s %10.2f\n", "memcpy (read+write)", Median(copy_gbs));
  std::printf("%-28s %10.2f\n", "SumScaled (8 read + 1 write)", Median(agg_gbs));
  std::printf("ratio (median of pairs)      %10.2f\n", Median(ratios));
  return 0;
}
