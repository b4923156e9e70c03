// Gradient aggregation kernels, written for memory bandwidth: each input is
// streamed once and the output written once, with the running sum kept in a
// small L1-resident tile. Pure functions; thread-safe.
#ifndef HETPS_LIB_PS_AGGREGATE_H_
#define HETPS_LIB_PS_AGGREGATE_H_

#include <cstddef>

namespace hetps {
namespace ps {

// out[i] = (in[0][i] + in[1][i] + ... + in[n-1][i]) * scale, summed in that
// order (so results are reproducible). out must not overlap any input.
void SumScaled(const float* const* in, size_t n, size_t len, float scale, float* out);

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_AGGREGATE_H_
