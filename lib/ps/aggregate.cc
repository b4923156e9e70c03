#include "lib/ps/aggregate.h"

#include <algorithm>

namespace hetps {
namespace ps {
namespace {

// Sums N inputs in registers and stores once: every input byte is read once,
// every output byte written once. Cloned for AVX-512 / AVX2 / baseline x86-64
// and picked at load time (target_clones), so one binary runs anywhere.
template <int N>
__attribute__((target_clones("avx512f", "avx2", "default"))) void SumN(const float* const* in,
                                                                       size_t len, float scale,
                                                                       float* out,
                                                                       bool accumulate) {
  const float* __restrict p[N];
  for (int k = 0; k < N; ++k) p[k] = in[k];
  float* __restrict o = out;
  for (size_t i = 0; i < len; ++i) {
    float s = accumulate ? o[i] + p[0][i] : p[0][i];
    for (int k = 1; k < N; ++k) s += p[k][i];
    o[i] = s * scale;
  }
}

using Kernel = void (*)(const float* const*, size_t, float, float*, bool);
constexpr Kernel kKernels[] = {nullptr, SumN<1>, SumN<2>, SumN<3>, SumN<4>,
                               SumN<5>, SumN<6>, SumN<7>, SumN<8>};
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

}  // namespace ps
}  // namespace hetps
