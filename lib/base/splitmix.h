// SplitMix64: a tiny counter-based generator whose sequence is the same on
// every platform and compiler, used wherever nodes must derive identical
// values from a seed (initial parameters, data order). Not cryptographic.
// Values are plain state; not thread-safe per instance.
#ifndef HETPS_LIB_BASE_SPLITMIX_H_
#define HETPS_LIB_BASE_SPLITMIX_H_

#include <cstdint>

namespace hetps {

// The SplitMix64 finalizer: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct SplitMix64 {
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  uint64_t state;
  uint64_t Next() { return Mix64(state += kGamma); }
  // Uniform in [-1, 1), from the top 24 bits (exact in float).
  float Symmetric() { return static_cast<float>(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_SPLITMIX_H_
