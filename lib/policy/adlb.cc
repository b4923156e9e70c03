#include "lib/policy/adlb.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "absl/strings/str_cat.h"
#include "lib/base/splitmix.h"

namespace hetps {
namespace policy {
namespace {

absl::Status Validate(double model_bytes, const std::vector<double>& s) {
  if (s.empty()) return absl::InvalidArgumentError("load distribution: no nodes");
  if (!std::isfinite(model_bytes) || model_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("load distribution: model size ", model_bytes, " is not a size"));
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isfinite(s[i]) || s[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("load distribution: node ", i, " has throughput ", s[i],
                       " (must be > 0; leave unreachable nodes out)"));
    }
  }
  return absl::OkStatus();
}

// Shares that should sum to M may miss by rounding: give the difference to
// the largest share (it changes that share by a few ulps).
void FixSum(double model_bytes, std::vector<double>* m) {
  const double sum = std::accumulate(m->begin(), m->end(), 0.0);
  auto big = std::max_element(m->begin(), m->end());
  *big = std::max(0.0, *big + (model_bytes - sum));
}

LoadDistribution Proportional(double model_bytes, const std::vector<double>& s) {
  LoadDistribution d;
  const double total = std::accumulate(s.begin(), s.end(), 0.0);
  d.share_bytes.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) d.share_bytes[i] = model_bytes * s[i] / total;
  FixSum(model_bytes, &d.share_bytes);
  EvaluateLoad(model_bytes, s, &d);
  return d;
}

}  // namespace

double TransferTime(double model_bytes, int nodes, double share_bytes, double throughput_Bps) {
  if (nodes <= 1) return 0;
  return (model_bytes + (nodes - 2) * share_bytes) / throughput_Bps;
}

void EvaluateLoad(double model_bytes, const std::vector<double>& s, LoadDistribution* d) {
  const int n = static_cast<int>(s.size());
  d->time_s.resize(s.size());
  d->max_time_s = 0;
  for (int i = 0; i < n; ++i) {
    d->time_s[i] = TransferTime(model_bytes, n, d->share_bytes[i], s[i]);
    d->max_time_s = std::max(d->max_time_s, d->time_s[i]);
  }
}

absl::StatusOr<LoadDistribution> SolveLoadExact(double model_bytes, const std::vector<double>& s) {
  if (auto st = Validate(model_bytes, s); !st.ok()) return st;
  const size_t n = s.size();
  if (n <= 2) return Proportional(model_bytes, s);
  const double g = static_cast<double>(n - 2);
  // At level T node i takes max(0, T S_i - M) / g; the sum is increasing in
  // T and must equal M. Michelot's method: assume every node active, solve
  // for T, drop the nodes that would take a negative share, repeat. T only
  // falls and the active set only shrinks (it always contains the true one),
  // so this ends; a few passes suffice in practice. Past kPasses we finish by
  // sorting instead, keeping O(N log N) for adversarial inputs.
  constexpr int kPasses = 16;
  std::vector<double> active(s);
  double level = 0;
  bool settled = false;
  for (int pass = 0; pass < kPasses && !settled; ++pass) {
    const double sum = std::accumulate(active.begin(), active.end(), 0.0);
    level = model_bytes * (g + static_cast<double>(active.size())) / sum;
    const double cut = model_bytes / level;  // active iff S_i > M / T
    const size_t before = active.size();
    active.erase(std::remove_if(active.begin(), active.end(), [&](double x) { return x < cut; }),
                 active.end());
    settled = active.size() == before;
  }
  if (!settled) {
    // With the k fastest active: sum_{j<=k} (T S_j - M) / g = M, so
    // T = M (g + k) / P_k, valid when node k is active (T S_k >= M) and
    // node k+1 is not. k = |active| qualifies if no smaller one does.
    std::sort(active.begin(), active.end(), std::greater<double>());
    double prefix = 0;
    for (size_t k = 1; k <= active.size(); ++k) {
      prefix += active[k - 1];
      level = model_bytes * (g + static_cast<double>(k)) / prefix;
      if (k == active.size() || level * active[k] <= model_bytes) break;
    }
  }
  LoadDistribution d;
  d.share_bytes.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    d.share_bytes[i] = std::max(0.0, (level * s[i] - model_bytes) / g);
  }
  FixSum(model_bytes, &d.share_bytes);
  EvaluateLoad(model_bytes, s, &d);
  return d;
}

absl::StatusOr<LoadDistribution> SolveLoadAlgorithm1(double model_bytes,
                                                     const std::vector<double>& s,
                                                     double similarity_threshold_s,
                                                     int max_iterations) {
  if (auto st = Validate(model_bytes, s); !st.ok()) return st;
  if (!(similarity_threshold_s >= 0)) {
    return absl::InvalidArgumentError("load distribution: similarity threshold must be >= 0");
  }
  const int n = static_cast<int>(s.size());
  LoadDistribution d;
  d.share_bytes.assign(n, model_bytes / n);  // line 1
  if (n <= 2) {
    EvaluateLoad(model_bytes, s, &d);  // t_i does not depend on m_i
    return d;
  }
  const double g = n - 2;
  auto extremes = [&](int* hi, int* lo, double* t_hi, double* t_lo) {  // lines 2-9, 14-22
    *t_hi = -INFINITY;
    *t_lo = INFINITY;
    for (int i = 0; i < n; ++i) {
      const double t = (model_bytes + g * d.share_bytes[i]) / s[i];
      if (*t_hi < t) *t_hi = t, *hi = i;
      if (*t_lo > t) *t_lo = t, *lo = i;
    }
  };
  int hi = 0, lo = 0;
  double t_hi, t_lo;
  extremes(&hi, &lo, &t_hi, &t_lo);
  d.converged = false;
  while (d.iterations < max_iterations) {
    if (t_hi - t_lo < similarity_threshold_s) {  // line 10
      d.converged = true;
      break;
    }
    if (d.share_bytes[hi] <= 0) break;  // t_hi = M / S_hi: no share can lower it
    // Lines 11-13 with Eq. 12-13 solved correctly.
    const double sum = d.share_bytes[hi] + d.share_bytes[lo];
    double lo_share = (g * sum * s[lo] - model_bytes * (s[hi] - s[lo])) / (g * (s[hi] + s[lo]));
    lo_share = std::clamp(lo_share, 0.0, sum);
    d.share_bytes[lo] = lo_share;
    d.share_bytes[hi] = sum - lo_share;
    ++d.iterations;
    extremes(&hi, &lo, &t_hi, &t_lo);
  }
  EvaluateLoad(model_bytes, s, &d);
  return d;
}

absl::StatusOr<LoadDistribution> LoadAverage(double model_bytes, const std::vector<double>& s) {
  if (auto st = Validate(model_bytes, s); !st.ok()) return st;
  LoadDistribution d;
  d.share_bytes.assign(s.size(), model_bytes / static_cast<double>(s.size()));
  EvaluateLoad(model_bytes, s, &d);
  return d;
}

absl::StatusOr<LoadDistribution> LoadElastic(double model_bytes, const std::vector<double>& s) {
  if (auto st = Validate(model_bytes, s); !st.ok()) return st;
  return Proportional(model_bytes, s);
}

double SliceGranularity(double model_params, int nodes, double alpha) {
  if (nodes < 1 || !(model_params > 0) || !(alpha > 0)) return 1;
  return std::max(1.0, std::sqrt(model_params * alpha / nodes));
}

double PartitionRate(int nodes, double slices, double gamma) {
  if (!(slices > 0) || nodes < 1) return 1;
  return std::clamp(2.0 * nodes * gamma / slices, 0.0, 1.0);
}

std::vector<Slice> CutSlices(const std::vector<uint64_t>& tensor_params, uint64_t granularity,
                             uint64_t size_probe, double partition_rate, uint64_t seed) {
  granularity = std::max<uint64_t>(granularity, 1);
  size_probe = std::max<uint64_t>(size_probe, 1);
  SplitMix64 rng{seed};
  std::vector<Slice> out;
  for (uint32_t t = 0; t < tensor_params.size(); ++t) {
    for (uint64_t off = 0; off < tensor_params[t];) {
      const double u = static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
      const bool probe = u < partition_rate && tensor_params[t] - off >= size_probe;
      const uint64_t size = std::min(probe ? size_probe : granularity, tensor_params[t] - off);
      out.push_back(Slice{t, off, size, probe});
      off += size;
    }
  }
  return out;
}

absl::StatusOr<std::vector<int>> AssignSlices(const std::vector<double>& share,
                                              const std::vector<Slice>& slices, int num_probe) {
  if (share.empty()) return absl::InvalidArgumentError("slice assignment: no servers");
  if (num_probe < 0) return absl::InvalidArgumentError("slice assignment: num_probe < 0");
  std::vector<double> left = share;
  std::vector<int> assign(slices.size(), -1);
  // Lines 2-10: num_probe probe slices per server, in slice order.
  size_t index = 0;
  for (size_t i = 0; i < left.size(); ++i) {
    for (int h = 0; h < num_probe; ++h) {
      while (index < slices.size() && !slices[index].probe) ++index;
      if (index >= slices.size()) break;
      assign[index] = static_cast<int>(i);
      left[i] -= static_cast<double>(slices[index].size);
      ++index;
    }
  }
  // Lines 11-20: the rest to the largest remaining share, lowest index first
  // among equals (the paper's strict '<' scan), via a heap.
  auto cmp = [&](int a, int b) { return left[a] != left[b] ? left[a] < left[b] : a > b; };
  std::priority_queue<int, std::vector<int>, decltype(cmp)> heap(cmp);
  for (size_t i = 0; i < left.size(); ++i) heap.push(static_cast<int>(i));
  for (size_t j = 0; j < slices.size(); ++j) {
    if (assign[j] >= 0) continue;
    const int r = heap.top();
    heap.pop();
    assign[j] = r;
    left[r] -= static_cast<double>(slices[j].size);
    heap.push(r);
  }
  return assign;
}

}  // namespace policy
}  // namespace hetps
