#include "lib/ps/aggregate.h"

#include <algorithm>
#include <tuple>

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

bool Unequal(const float* w, size_t n) {
  for (size_t k = 1; k < n; ++k) {
    if (w[k] != w[0]) return true;
  }
  return false;
}

void WeightedSum(const float* const* in, const float* w, size_t n, size_t len, float scale,
                 float* out) {
  if (n == 0) return;
  // One input at a time (a vectorized axpy each), over tiles small enough
  // that `out` stays in L1 across the inputs: each input byte is read once.
  constexpr size_t kTile = 2048;
  for (size_t at = 0; at < len; at += kTile) {
    const size_t end = std::min(len, at + kTile);
    const float* __restrict first = in[0];
    float* __restrict o = out;
    for (size_t i = at; i < end; ++i) o[i] = w[0] * first[i];
    for (size_t k = 1; k < n; ++k) {
      const float* __restrict p = in[k];
      const float wk = w[k];
      for (size_t i = at; i < end; ++i) o[i] += wk * p[i];
    }
    for (size_t i = at; i < end; ++i) o[i] *= scale;
  }
}

uint64_t MeanUnbiased(const float* const* in, const std::vector<Range>* missing, size_t n,
                      size_t len, float* out, const float* weights) {
  if (n == 0 || len == 0) return 0;
  if (weights != nullptr && !Unequal(weights, n)) weights = nullptr;
  double total = double(n);
  if (weights != nullptr) {
    total = 0;
    for (size_t k = 0; k < n; ++k) total += weights[k];
    WeightedSum(in, weights, n, len, float(1.0 / total), out);
  } else {
    SumScaled(in, n, len, 1.0f / n, out);
  }
  // Sweep the inputs' missing ranges: +1 at a begin, -1 at an end.
  // (position, +-1, input): the absent weight is summed in input order.
  std::vector<std::tuple<uint64_t, int, size_t>> events;
  for (size_t k = 0; k < n; ++k) {
    for (const Range& r : missing[k]) {
      if (r.begin >= r.end) continue;
      events.push_back({r.begin, +1, k});
      events.push_back({std::min<uint64_t>(r.end, len), -1, k});
    }
  }
  if (events.empty()) return 0;
  std::sort(events.begin(), events.end());
  std::vector<const float*> at(n);
  uint64_t partial = 0;
  std::vector<bool> gone(n, false);
  int absent = 0;
  for (size_t e = 0; e < events.size();) {
    const uint64_t pos = std::get<0>(events[e]);
    while (e < events.size() && std::get<0>(events[e]) == pos) {
      absent += std::get<1>(events[e]);
      gone[std::get<2>(events[e])] = std::get<1>(events[e]) > 0;
      ++e;
    }
    if (absent == 0 || e == events.size()) continue;
    const uint64_t end = std::get<0>(events[e]);
    if (end <= pos) continue;
    const size_t count = n - static_cast<size_t>(absent);
    for (size_t k = 0; k < n; ++k) at[k] = in[k] + pos;
    if (count == 0) {
      std::fill(out + pos, out + end, 0.0f);
    } else if (weights == nullptr) {
      SumScaled(at.data(), n, end - pos, 1.0f / count, out + pos);
    } else {
      double present = 0;
      for (size_t k = 0; k < n; ++k) present += gone[k] ? 0.0 : weights[k];
      WeightedSum(at.data(), weights, n, end - pos, float(1.0 / present), out + pos);
    }
    partial += end - pos;
  }
  return partial;
}

}  // namespace ps
}  // namespace hetps
