#include "lib/transport/ghash.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// Functions get their instruction sets by attribute, not by build flags:
// the rest of the binary must still run on CPUs without them, and
// Available() decides at run time.
#define HETPS_GHASH_SSE __attribute__((target("pclmul,ssse3,sse4.1")))
#define HETPS_GHASH_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,ssse3,sse4.1")))

namespace hetps {
namespace transport {
namespace {

// The multiplier's form of a block: its 16 bytes reversed, so that bit k
// of the 128-bit integer is GCM's coefficient of x^(127-k) (GCM numbers
// bits from the first byte's most significant one).
HETPS_GHASH_SSE inline __m128i Reverse(__m128i v) {
  const __m128i mask = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm_shuffle_epi8(v, mask);
}

// Shifts of the whole 128-bit integer by s in [1, 63].
HETPS_GHASH_SSE inline __m128i ShiftLeft(__m128i v, int s) {
  return _mm_or_si128(_mm_slli_epi64(v, s), _mm_srli_epi64(_mm_slli_si128(v, 8), 64 - s));
}
HETPS_GHASH_SSE inline __m128i ShiftRight(__m128i v, int s) {
  return _mm_or_si128(_mm_srli_epi64(v, s), _mm_slli_epi64(_mm_srli_si128(v, 8), 64 - s));
}

// The GF(2^128) product from the 256-bit carry-less product [hi:lo] of two
// values in the multiplier's form (or an XOR of such products: everything
// here is linear, which is what lets 16 products share one reduction).
HETPS_GHASH_SSE inline __m128i Reduce(__m128i lo, __m128i hi) {
  // The carry-less product of two reversed values is the reversed product
  // shifted by one place: shift the 256 bits left by one. Then bit m of
  // the 256 is the coefficient of x^(255-m).
  hi = _mm_or_si128(ShiftLeft(hi, 1), _mm_srli_epi64(_mm_srli_si128(lo, 8), 63));
  lo = ShiftLeft(lo, 1);
  // `lo` holds degrees 255..128. With x^128 = x^7 + x^2 + x + 1, its term
  // x^(128+j) folds to x^j (that is lo itself) plus lo shifted right by 1,
  // 2 and 7 (the higher degrees). The lowest 7 bits of lo would land past
  // degree 127 again: fold those once more first (they are lo's bits 0..6
  // moved to the top, shifted by 1, 2 and 7: lo << 127, << 126, << 121).
  const __m128i low = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi64(lo, 63), _mm_slli_epi64(lo, 62)),
                                    _mm_slli_epi64(lo, 57));
  const __m128i f = _mm_xor_si128(lo, _mm_slli_si128(low, 8));
  const __m128i folded = _mm_xor_si128(_mm_xor_si128(f, ShiftRight(f, 1)),
                                       _mm_xor_si128(ShiftRight(f, 2), ShiftRight(f, 7)));
  return _mm_xor_si128(hi, folded);
}

// Accumulates the carry-less product of x and h: low and high 128 bits
// and the middle terms (x.lo*h.hi + x.hi*h.lo), combined in Combine.
struct Wide {
  __m128i lo, hi, mid;
};

HETPS_GHASH_SSE inline void MulAdd(__m128i x, __m128i h, Wide* w) {
  w->lo = _mm_xor_si128(w->lo, _mm_clmulepi64_si128(x, h, 0x00));
  w->hi = _mm_xor_si128(w->hi, _mm_clmulepi64_si128(x, h, 0x11));
  w->mid = _mm_xor_si128(
      w->mid, _mm_xor_si128(_mm_clmulepi64_si128(x, h, 0x01), _mm_clmulepi64_si128(x, h, 0x10)));
}

HETPS_GHASH_SSE inline __m128i Combine(const Wide& w) {
  return Reduce(_mm_xor_si128(w.lo, _mm_slli_si128(w.mid, 8)),
                _mm_xor_si128(w.hi, _mm_srli_si128(w.mid, 8)));
}

HETPS_GHASH_SSE inline Wide Zero() {
  return Wide{_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
}

HETPS_GHASH_SSE __m128i Mul(__m128i x, __m128i h) {
  Wide w = Zero();
  MulAdd(x, h, &w);
  return Combine(w);
}

// The four 128-bit lanes XORed together.
HETPS_GHASH_AVX512 inline __m128i Fold(__m512i v) {
  const __m256i a =
      _mm256_xor_si256(_mm512_extracti64x4_epi64(v, 0), _mm512_extracti64x4_epi64(v, 1));
  return _mm_xor_si128(_mm256_extracti128_si256(a, 0), _mm256_extracti128_si256(a, 1));
}

// Y after n more blocks at p: Y_i = (Y_{i-1} ^ X_i) * H, computed a step
// (kStepBlocks) at a time as (Y ^ X_1) H^32 + X_2 H^31 + ... + X_32 H with
// one reduction per step (the reduction's latency, not the multiplies,
// bounds the speed: the longer the step, the fewer of them), and the
// last n % 32 blocks likewise with H^(n%32)..H.
HETPS_GHASH_AVX512 __m128i Blocks(const uint8_t (*powers)[16], const uint8_t (*step)[64], __m128i y,
                                  const uint8_t* p, size_t n) {
  constexpr size_t kVectors = Ghash::kStepBlocks / 4;
  const __m512i rev =
      _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  for (; n >= Ghash::kStepBlocks; n -= Ghash::kStepBlocks, p += 16 * Ghash::kStepBlocks) {
    __m512i lo = _mm512_setzero_si512(), hi = lo, mid = lo;
    for (size_t j = 0; j < kVectors; ++j) {
      __m512i x = _mm512_shuffle_epi8(_mm512_loadu_si512(p + 64 * j), rev);
      if (j == 0) x = _mm512_xor_si512(x, _mm512_zextsi128_si512(y));
      const __m512i h = _mm512_load_si512(step[2 * j]);
      lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, h, 0x00));
      hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, h, 0x11));
      // Karatsuba: (x.lo + x.hi)(h.lo + h.hi) + lo + hi is the middle
      // term; the sums of h's halves are precomputed (step[2j + 1]), and
      // lo + hi is added once for all vectors below.
      const __m512i xs = _mm512_xor_si512(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
      mid = _mm512_xor_si512(
          mid, _mm512_clmulepi64_epi128(xs, _mm512_load_si512(step[2 * j + 1]), 0x00));
    }
    mid = _mm512_xor_si512(mid, _mm512_xor_si512(lo, hi));
    // The middle terms into each lane's low and high halves, then the
    // four lanes summed: one 256-bit product to reduce.
    lo = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
    hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
    y = Reduce(Fold(lo), Fold(hi));
  }
  if (n > 0) {
    Wide w = Zero();
    for (size_t i = 0; i < n; ++i) {
      __m128i x = Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
      if (i == 0) x = _mm_xor_si128(x, y);
      MulAdd(x, _mm_load_si128(reinterpret_cast<const __m128i*>(powers[n - 1 - i])), &w);
    }
    y = Combine(w);
  }
  return y;
}

}  // namespace

bool Ghash::Available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq") &&
           __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("ssse3") &&
           __builtin_cpu_supports("sse4.1");
  }();
  return ok;
}

HETPS_GHASH_SSE Ghash::Ghash(const uint8_t h[16]) {
  const __m128i hr = Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  __m128i p = hr;
  for (size_t i = 0; i < kStepBlocks; ++i) {
    _mm_store_si128(reinterpret_cast<__m128i*>(powers_[i]), p);
    p = Mul(p, hr);
  }
  for (size_t j = 0; j < kStepBlocks / 4; ++j) {
    for (size_t l = 0; l < 4; ++l) {
      const uint8_t* h = powers_[kStepBlocks - 4 * j - l - 1];
      std::memcpy(step_[2 * j] + 16 * l, h, 16);
      for (size_t b = 0; b < 8; ++b) step_[2 * j + 1][16 * l + b] = h[b] ^ h[8 + b];
    }
  }
}

HETPS_GHASH_SSE void Ghash::Hash(const uint8_t* head, size_t head_len, const uint8_t* body,
                                 size_t body_len, uint8_t out[16]) const {
  // The head and the body's first bytes up to a block boundary, so the
  // rest of the body is read in place.
  alignas(16) uint8_t first[kHeadMax + 16] = {};
  head_len = std::min(head_len, kHeadMax);
  if (head_len > 0) std::memcpy(first, head, head_len);
  const size_t take = std::min(body_len, (16 - head_len % 16) % 16);
  if (take > 0) std::memcpy(first + head_len, body, take);
  __m128i y = Blocks(powers_, step_, _mm_setzero_si128(), first, (head_len + take + 15) / 16);
  const uint8_t* rest = body + take;
  const size_t rest_len = body_len - take;
  const size_t whole = rest_len / 16;
  y = Blocks(powers_, step_, y, rest, whole);
  // The last partial block, zero-padded, and the length block: the bit
  // length of the authenticated data (big-endian, 64 bits), then the
  // ciphertext's (0).
  alignas(16) uint8_t last[32] = {};
  const size_t tail = rest_len % 16;
  if (tail > 0) std::memcpy(last, rest + 16 * whole, tail);
  uint8_t* len_block = tail > 0 ? last + 16 : last;
  const uint64_t bits = uint64_t(head_len + body_len) * 8;
  for (int i = 0; i < 8; ++i) len_block[i] = uint8_t(bits >> (56 - 8 * i));
  y = Blocks(powers_, step_, y, last, tail > 0 ? 2 : 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), Reverse(y));
}

}  // namespace transport
}  // namespace hetps
