#include "lib/ps/aggregate.h"

#include <algorithm>

namespace hetps {
namespace ps {
namespace {

// Sums N inputs in registers and stores once: every input byte is read once,
// every output byte written once.
template <int N>
inline __attribute__((always_inline)) void SumBody(const float* const* in, size_t len, float scale,
                                                   float* out, bool accumulate) {
  const float* __restrict p[N];
  for (int k = 0; k < N; ++k) p[k] = in[k];
  float* __restrict o = out;
  for (size_t i = 0; i < len; ++i) {
    float s = accumulate ? o[i] + p[0][i] : p[0][i];
    for (int k = 1; k < N; ++k) s += p[k][i];
    o[i] = s * scale;
  }
}

// One function per N, cloned for AVX-512 / AVX2 / baseline x86-64 and
// picked at load time (target_clones), so one binary runs anywhere. Plain
// functions, not a template: clang does not clone templates.
#define HETPS_SUM_KERNEL(N)                                                           \
  __attribute__((target_clones("avx512f", "avx2", "default"))) void Sum##N(           \
      const float* const* in, size_t len, float scale, float* out, bool accumulate) { \
    SumBody<N>(in, len, scale, out, accumulate);                                      \
  }
HETPS_SUM_KERNEL(1)
HETPS_SUM_KERNEL(2)
HETPS_SUM_KERNEL(3)
HETPS_SUM_KERNEL(4)
HETPS_SUM_KERNEL(5)
HETPS_SUM_KERNEL(6)
HETPS_SUM_KERNEL(7)
HETPS_SUM_KERNEL(8)
#undef HETPS_SUM_KERNEL

using Kernel = void (*)(const float* const*, size_t, float, float*, bool);
constexpr Kernel kKernels[] = {nullptr, Sum1, Sum2, Sum3, Sum4, Sum5, Sum6, Sum7, Sum8};
constexpr size_t kGroup = 8;

}  // namespace

void SumScaled(const float* const* in, size_t n, size_t len, float scale, float* out) {
  if (n == 0 || len == 0) return;
  if (n <= kGroup) {
    kKernels[n](in, len, scale, out, false);
    return;
  }
  // More than 8 inputs: groups of 8 accumulate into `out` (unscaled), the
  // last group applies the scale. Same left-to-right summation order.
  size_t k = 0;
  for (; n - k > kGroup; k += kGroup) kKernels[kGroup](in + k, len, 1.0f, out, k > 0);
  kKernels[n - k](in + k, len, scale, out, true);
}

std::vector<Range> MissingRanges(std::vector<Range> have, uint64_t len) {
  std::sort(have.begin(), have.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> gaps;
  uint64_t at = 0;
  for (const Range& r : have) {
    if (r.begin > at) gaps.push_back({at, std::min(r.begin, len)});
    at = std::max(at, r.end);
    if (at >= len) break;
  }
  if (at < len) gaps.push_back({at, len});
  return gaps;
}

uint64_t MeanUnbiased(const float* const* in, const std::vector<Range>* missing, size_t n,
                      size_t len, float* out) {
  if (n == 0 || len == 0) return 0;
  SumScaled(in, n, len, 1.0f / n, out);
  // Sweep the inputs' missing ranges: +1 at a begin, -1 at an end.
  std::vector<std::pair<uint64_t, int>> events;
  for (size_t k = 0; k < n; ++k) {
    for (const Range& r : missing[k]) {
      if (r.begin >= r.end) continue;
      events.push_back({r.begin, +1});
      events.push_back({std::min<uint64_t>(r.end, len), -1});
    }
  }
  if (events.empty()) return 0;
  std::sort(events.begin(), events.end());
  std::vector<const float*> at(n);
  uint64_t partial = 0;
  int absent = 0;
  for (size_t e = 0; e < events.size();) {
    const uint64_t pos = events[e].first;
    while (e < events.size() && events[e].first == pos) absent += events[e++].second;
    if (absent == 0 || e == events.size()) continue;
    const uint64_t end = events[e].first;
    if (end <= pos) continue;
    const size_t count = n - static_cast<size_t>(absent);
    if (count == 0) {
      std::fill(out + pos, out + end, 0.0f);
    } else {
      for (size_t k = 0; k < n; ++k) at[k] = in[k] + pos;
      SumScaled(at.data(), n, end - pos, 1.0f / count, out + pos);
    }
    partial += end - pos;
  }
  return partial;
}

}  // namespace ps
}  // namespace hetps
