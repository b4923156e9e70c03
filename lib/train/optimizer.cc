#include "lib/train/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace train {

absl::StatusOr<OptimizerConfig::Kind> ParseOptimizerKind(const std::string& s) {
  if (s == "sgd") return OptimizerConfig::Kind::kSgd;
  if (s == "adam") return OptimizerConfig::Kind::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", s, "' (expected sgd or adam)"));
}

const char* OptimizerKindName(OptimizerConfig::Kind kind) {
  return kind == OptimizerConfig::Kind::kSgd ? "sgd" : "adam";
}

float LearningRateAt(const OptimizerConfig& c, uint64_t t) {
  if (c.schedule == OptimizerConfig::Schedule::kConstant || c.total_steps == 0) {
    return c.learning_rate;
  }
  const double x = double(std::min(t, c.total_steps)) / double(c.total_steps);
  return static_cast<float>(double(c.learning_rate) * 0.5 * (1.0 + std::cos(M_PI * x)));
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  auto bad = [](const char* what, double v, const char* range) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer: ", what, " = ", v, " is outside ", range));
  };
  if (!(c.learning_rate > 0 && c.learning_rate <= 10)) {
    return bad("learning_rate", c.learning_rate, "(0, 10]");
  }
  if (!(c.momentum >= 0 && c.momentum < 1)) return bad("momentum", c.momentum, "[0, 1)");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("beta1", c.beta1, "[0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("beta2", c.beta2, "[0, 1)");
  if (!(c.epsilon > 0 && c.epsilon < 1)) return bad("epsilon", c.epsilon, "(0, 1)");
  if (!(c.weight_decay >= 0 && c.weight_decay < 1)) {
    return bad("weight_decay", c.weight_decay, "[0, 1)");
  }
  if (c.schedule == OptimizerConfig::Schedule::kCosine && c.total_steps == 0) {
    return absl::InvalidArgumentError("optimizer: a cosine lr_schedule needs total_steps > 0");
  }
  return absl::OkStatus();
}

OptimizerState::OptimizerState(const OptimizerConfig& config, size_t size)
    : config_(config), size_(size), slot1_(size, 0.f) {
  if (config_.kind == OptimizerConfig::Kind::kAdam) slot2_.assign(size, 0.f);
}

void OptimizerState::Apply(absl::Span<float> params, absl::Span<const float> grad) {
  // Sizes are fixed by the chunk layout the owner built us from.
  assert(params.size() == size_ && grad.size() == size_);
  BeginStep();
  Update(0, params, grad);
}

void OptimizerState::BeginStep() {
  lr_ = LearningRateAt(config_, steps_);
  ++steps_;
  if (config_.kind == OptimizerConfig::Kind::kSgd) return;
  // Bias corrections in double, once per step.
  const double t = static_cast<double>(steps_);
  c1_ = static_cast<float>(1.0 / (1.0 - std::pow(double(config_.beta1), t)));
  c2_ = static_cast<float>(1.0 / (1.0 - std::pow(double(config_.beta2), t)));
}

void OptimizerState::Update(size_t offset, absl::Span<float> params, absl::Span<const float> grad) {
  assert(params.size() == grad.size() && offset + params.size() <= size_);
  const float lr = lr_, wd = config_.weight_decay;
  float* __restrict p = params.data();
  const float* __restrict g = grad.data();
  float* __restrict s1 = slot1_.data() + offset;
  const size_t n = params.size();
  if (config_.kind == OptimizerConfig::Kind::kSgd) {
    const float mu = config_.momentum;
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * p[i];
      s1[i] = mu * s1[i] + gi;
      p[i] -= lr * s1[i];
    }
    return;
  }
  float* __restrict s2 = slot2_.data() + offset;
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
  const float c1 = c1_, c2 = c2_;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    s1[i] = b1 * s1[i] + (1.f - b1) * gi;
    s2[i] = b2 * s2[i] + (1.f - b2) * gi * gi;
    p[i] -= lr * (s1[i] * c1) / (std::sqrt(s2[i] * c2) + eps);
  }
}

}  // namespace train
}  // namespace hetps
