// Gradient aggregation kernels, written for memory bandwidth: each input is
// streamed once and the output written once, with the running sum kept in a
// small L1-resident tile. Pure functions; thread-safe.
#ifndef HETPS_LIB_PS_AGGREGATE_H_
#define HETPS_LIB_PS_AGGREGATE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hetps {
namespace ps {

// out[i] = (in[0][i] + in[1][i] + ... + in[n-1][i]) * scale, summed in that
// order (so results are reproducible). out must not overlap any input.
void SumScaled(const float* const* in, size_t n, size_t len, float scale, float* out);

// A half-open range of element indices.
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

// The ranges of [0, len) that `have` (any order, may touch, must not
// overlap) leaves uncovered, ascending.
std::vector<Range> MissingRanges(std::vector<Range> have, uint64_t len);

// Unbiased mean of n gradients of which some elements never arrived (LTP
// bubbles). missing[k] lists input k's missing ranges (ascending, disjoint);
// those elements must be zeros in in[k] (bubble-filled). Then
//   out[i] = (sum of in[k][i] over the inputs whose element i arrived)
//            * (1 / that count),   0 where no input has it.
// Summed in input order, so out is bit-identical to that mean computed over
// the delivered inputs alone (adding a zero is exact). The paper divides by
// n everywhere, biasing every bubbled element toward 0. Cost: one
// SumScaled pass plus a second over the elements with bubbles.
// Returns the number of elements whose count was below n.
//
// weights (n of them, each > 0; null: all 1): input k counts w[k] times,
// out[i] = (sum of w[k] in[k][i] over the inputs whose element i arrived)
//          / (sum of w[k] over them):
// gradients averaged over different numbers of samples, weighted by them.
// With all weights equal the result is bit-identical to null weights.
uint64_t MeanUnbiased(const float* const* in, const std::vector<Range>* missing, size_t n,
                      size_t len, float* out, const float* weights = nullptr);

// out[i] = (w[0] in[0][i] + ... + w[n-1] in[n-1][i]) * scale, summed in
// that order, tile by tile. out must not overlap any input.
void WeightedSum(const float* const* in, const float* w, size_t n, size_t len, float scale,
                 float* out);

// True when the n weights are not all equal (a weighted mean is needed).
bool Unequal(const float* w, size_t n);

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_AGGREGATE_H_
