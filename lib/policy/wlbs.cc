#include "lib/policy/wlbs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace policy {

double CapabilityIndicator(const NodeCapability& c, const CapabilityWeights& w) {
  return w.per_core * c.cores + w.per_memory_gib * c.memory_gib + w.per_gpu * c.gpus;
}

absl::StatusOr<std::vector<int64_t>> SplitProportional(int64_t total,
                                                       const std::vector<double>& weights,
                                                       int64_t min_each) {
  const int64_t n = static_cast<int64_t>(weights.size());
  if (n == 0) return absl::InvalidArgumentError("split: no workers");
  if (min_each < 0 || total < n * min_each) {
    return absl::InvalidArgumentError(absl::StrCat("split: ", total, " units cannot give ", n,
                                                   " workers at least ", min_each, " each"));
  }
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("split: worker ", i, " has weight ", weights[i]));
    }
    sum += weights[i];
  }
  if (sum <= 0) return absl::InvalidArgumentError("split: every weight is 0");
  // Give everyone min_each, then the rest by largest remainder.
  const int64_t rest = total - n * min_each;
  std::vector<int64_t> out(n, min_each);
  std::vector<std::pair<double, int64_t>> remainder(n);
  int64_t given = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double exact = static_cast<double>(rest) * weights[i] / sum;
    const int64_t whole = static_cast<int64_t>(std::floor(exact));
    out[i] += whole;
    given += whole;
    remainder[i] = {exact - static_cast<double>(whole), i};
  }
  std::sort(remainder.begin(), remainder.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (int64_t k = 0; given < rest; ++k, ++given) ++out[remainder[k % n].second];
  return out;
}

absl::StatusOr<WorkerShares> InitialDivision(const std::vector<NodeCapability>& nodes,
                                             int64_t total_samples, int64_t total_batch,
                                             const CapabilityWeights& weights) {
  std::vector<double> w;
  for (const NodeCapability& c : nodes) w.push_back(CapabilityIndicator(c, weights));
  WorkerShares s;
  auto samples = SplitProportional(total_samples, w, 1);
  if (!samples.ok()) return samples.status();
  auto batch = SplitProportional(total_batch, w, 1);
  if (!batch.ok()) return batch.status();
  s.samples = std::move(*samples);
  s.batch = std::move(*batch);
  return s;
}

namespace {

absl::Status ValidateMeasurements(const std::vector<int64_t>& units,
                                  const std::vector<double>& time_s) {
  if (units.empty()) return absl::InvalidArgumentError("adjustment: no workers");
  if (units.size() != time_s.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("adjustment: ", units.size(), " workers but ", time_s.size(), " times"));
  }
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i] < 0) return absl::InvalidArgumentError("adjustment: negative units");
    if (!std::isfinite(time_s[i]) || time_s[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("adjustment: worker ", i, " measured time ", time_s[i], " (must be > 0)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Adjustment> PartialAdjust(const std::vector<int64_t>& units,
                                         const std::vector<double>& time_s, double theta_s,
                                         int64_t min_units) {
  if (auto st = ValidateMeasurements(units, time_s); !st.ok()) return st;
  if (!(theta_s >= 0) || min_units < 0) {
    return absl::InvalidArgumentError("adjustment: theta and min_units must be >= 0");
  }
  Adjustment a;
  a.units = units;
  const auto [lo, hi] = std::minmax_element(time_s.begin(), time_s.end());
  const int fast = static_cast<int>(lo - time_s.begin());
  const int slow = static_cast<int>(hi - time_s.begin());
  if (*hi - *lo <= theta_s || fast == slow) return a;
  // Speeds in units/s; a worker with 0 units has no measured speed: take
  // the other's so the pair splits evenly.
  double v_slow = units[slow] / time_s[slow];
  double v_fast = units[fast] / time_s[fast];
  if (v_fast <= 0) v_fast = v_slow;
  if (v_slow <= 0) v_slow = v_fast;
  const int64_t pair = units[slow] + units[fast];
  if (v_slow + v_fast <= 0 || pair < 2 * min_units) return a;
  int64_t slow_units =
      static_cast<int64_t>(std::llround(static_cast<double>(pair) * v_slow / (v_slow + v_fast)));
  slow_units = std::clamp<int64_t>(slow_units, min_units, pair - min_units);
  if (slow_units == units[slow]) return a;  // rounding leaves nothing to move
  a.units[slow] = slow_units;
  a.units[fast] = pair - slow_units;
  a.adjusted = true;
  a.from = slow;
  a.to = fast;
  return a;
}

absl::StatusOr<std::vector<int64_t>> RedistributeFailed(const std::vector<int64_t>& units,
                                                        const std::vector<double>& time_s,
                                                        const std::vector<bool>& failed) {
  if (auto st = ValidateMeasurements(units, time_s); !st.ok()) return st;
  if (failed.size() != units.size()) {
    return absl::InvalidArgumentError("redistribution: failed flags do not match workers");
  }
  std::vector<double> speed(units.size(), 0);
  int64_t freed = 0;
  bool any = false;
  for (size_t i = 0; i < units.size(); ++i) {
    if (failed[i]) {
      freed += units[i];
    } else {
      speed[i] = std::max(units[i] / time_s[i], 1e-12);  // a live worker keeps some weight
      any = true;
    }
  }
  if (!any) return absl::InvalidArgumentError("redistribution: every worker failed");
  auto extra = SplitProportional(freed, speed, 0);
  if (!extra.ok()) return extra.status();
  std::vector<int64_t> out(units.size(), 0);
  for (size_t i = 0; i < units.size(); ++i) out[i] = failed[i] ? 0 : units[i] + (*extra)[i];
  return out;
}

}  // namespace policy
}  // namespace hetps
