// ADLB: network-aware parameter-server load distribution (paper:
// ../shared/papers/adlb-network-aware-ps-load-balancing.txt, sections 3.1
// and 3.3). Pure functions of plain values: no I/O, no threads, no clock;
// every randomised step takes its seed. Thread-compatible.
//
// Setting (paper Eq. 7-10): N nodes, each both worker and server. Every
// worker holds an update of M bytes; server i aggregates a share m_i of it
// (sum m_i = M). Node i then moves L_i = M + (N - 2) m_i bytes (it sends the
// M - m_i it does not own and serves (N - 1) m_i) at its measured throughput
// S_i, taking t_i = L_i / S_i. A round takes max_i t_i.
//
// What we do differently from the paper, and why (docs/policy.md):
// - SolveLoadExact solves Eq. 10 exactly by water filling in O(N log N);
//   Algorithm 1 (pairwise equalisation, kept as published for comparison)
//   only approaches it and needs O(N) per step.
// - Eq. 14 as printed divides by (N - 2)(S_min - S_max), which has the wrong
//   sign (and divides by zero for equal throughputs); we use the solution of
//   Eq. 12-13, (N - 2)(S_max + S_min).
// - Algorithm 1 can drive a share negative; we clamp to [0, m_max + m_min]
//   and stop when the slowest node already aggregates nothing, since then
//   t_max = M / S_i is a floor no share can lower (the paper's loop would
//   never end).
#ifndef HETPS_LIB_POLICY_ADLB_H_
#define HETPS_LIB_POLICY_ADLB_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {
namespace policy {

struct LoadDistribution {
  std::vector<double> share_bytes;  // m_i; sums to M, each >= 0
  std::vector<double> time_s;       // t_i (Eq. 9)
  double max_time_s = 0;            // max_i t_i: the round's transfer time
  int iterations = 0;               // Algorithm 1's moving iterations
  bool converged = true;            // Algorithm 1: t_max - t_min < threshold
};

// Eq. 9: t_i = (M + (N - 2) m_i) / S_i; 0 for N == 1 (nothing to send). O(1).
double TransferTime(double model_bytes, int nodes, double share_bytes, double throughput_bps);

// Fills time_s and max_time_s of `d` from its shares. O(N).
void EvaluateLoad(double model_bytes, const std::vector<double>& throughput_Bps,
                  LoadDistribution* d);

// The optimum of Eq. 10, min max_i t_i s.t. sum m_i = M, m_i >= 0, by water
// filling: at level T, node i can take (T S_i - M) / (N - 2) (or nothing);
// the sum is increasing in T, so sorting S descending, the k fastest nodes
// are active at T = M (N - 2 + k) / sum_{j<=k} S_j for the one k that is
// consistent (found by Michelot-style passes, O(N) each and few in
// practice, with a sort after 16 passes). Among optima (the slowest node's own M / S_i can bound
// all of them) it balances the others exactly. N == 2: t_i does not depend on m_i; shares follow
// throughput. N == 1: m_1 = M. throughput_Bps: S_i in bytes/s, each finite and > 0 (InvalidArgument
// otherwise). O(N log N) time, O(N) space.
absl::StatusOr<LoadDistribution> SolveLoadExact(double model_bytes,
                                                const std::vector<double>& throughput_Bps);

// Algorithm 1 as published (with the corrections in the header comment):
// start from M / N each, then repeatedly equalise the nodes with the largest
// and smallest t_i until t_max - t_min < similarity_threshold_s (the paper
// uses 1 s) or max_iterations. O(N) per iteration; the paper estimates
// Theta(N^2) in total.
absl::StatusOr<LoadDistribution> SolveLoadAlgorithm1(double model_bytes,
                                                     const std::vector<double>& throughput_Bps,
                                                     double similarity_threshold_s,
                                                     int max_iterations);

// Baselines. Average: m_i = M / N, network-agnostic (ps-lite, MXNet).
// Elastic: m_i proportional to S_i (the paper's evaluation of [18]). O(N).
absl::StatusOr<LoadDistribution> LoadAverage(double model_bytes,
                                             const std::vector<double>& throughput_Bps);
absl::StatusOr<LoadDistribution> LoadElastic(double model_bytes,
                                             const std::vector<double>& throughput_Bps);

// Eq. 4: the slice granularity x = sqrt(M alpha / N) minimising Eq. 2, with
// M in parameters (the paper measured alpha = 1.2e5 in the same unit). At
// least 1. O(1).
double SliceGranularity(double model_params, int nodes, double alpha = 1.2e5);

// Eq. 5: the probability that a slice is cut as a probe slice, so that every
// worker sends about 2 gamma probes to each of the N servers per round:
// 2 N gamma / (number of slices), capped at 1. gamma = 0.6 in the paper.
double PartitionRate(int nodes, double slices, double gamma = 0.6);

struct Slice {
  uint32_t tensor = 0;
  uint64_t offset = 0;  // parameters into the tensor
  uint64_t size = 0;    // parameters
  bool probe = false;   // size == size_probe, kept to measure idle servers
};

// Cuts tensors (sizes in parameters) into slices of `granularity` (the tail
// of a tensor is shorter); each cut is a probe slice of `size_probe` instead
// with probability partition_rate (seeded: the same inputs give the same
// slices). O(number of slices).
std::vector<Slice> CutSlices(const std::vector<uint64_t>& tensor_params, uint64_t granularity,
                             uint64_t size_probe, double partition_rate, uint64_t seed);

// Algorithm 2: each server first gets up to num_probe probe slices (so every
// link keeps being measured, even a server whose share is 0), then each
// remaining slice goes to the server with the largest remaining share
// (ties: lowest index). share: m_i in parameters. Returns the server of each
// slice. The paper scans all servers per slice, O(N num_slice); a heap makes
// it O(num_slice log N + N num_probe) with the same result.
absl::StatusOr<std::vector<int>> AssignSlices(const std::vector<double>& share_params,
                                              const std::vector<Slice>& slices, int num_probe);

}  // namespace policy
}  // namespace hetps

#endif  // HETPS_LIB_POLICY_ADLB_H_
