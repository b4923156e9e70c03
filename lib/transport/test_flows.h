// Helpers shared by the transport tests: reproducible float payloads cut
// into chunk packets the way psd and workerd cut them.
#ifndef HETPS_LIB_TRANSPORT_TEST_FLOWS_H_
#define HETPS_LIB_TRANSPORT_TEST_FLOWS_H_

#include <algorithm>
#include <random>
#include <vector>

#include "lib/transport/endpoint.h"

namespace hetps {
namespace transport {
namespace testing {

// n floats uniform in [-1, 1) from `seed`.
inline std::vector<float> Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// v as chunks of chunk_floats (ids from first_chunk), each cut into packets
// of payload_floats with its first and last packet critical.
inline std::vector<PacketSpan> ChunkPackets(const std::vector<float>& v, uint32_t first_chunk,
                                            uint32_t chunk_floats, uint32_t payload_floats) {
  std::vector<PacketSpan> out;
  for (size_t off = 0, c = first_chunk; off < v.size(); off += chunk_floats, ++c) {
    AppendPackets(static_cast<uint32_t>(c), v.data() + off,
                  static_cast<uint32_t>(std::min<size_t>(chunk_floats, v.size() - off)),
                  payload_floats, true, &out);
  }
  return out;
}

}  // namespace testing
}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_TEST_FLOWS_H_
