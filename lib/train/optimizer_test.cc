#include "lib/train/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

namespace hetps {
namespace train {
namespace {

TEST_CASE("SGD with momentum follows v = mu v + g, p -= lr v", "[optimizer]") {
  OptimizerConfig c;
  c.learning_rate = 0.5f;
  c.momentum = 0.9f;
  OptimizerState s(c, 2);
  std::vector<float> p = {1.f, -2.f};
  const std::vector<float> g = {0.2f, -0.4f};
  s.Apply(absl::MakeSpan(p), g);  // v = g
  CHECK(p[0] == Approx(1.f - 0.5f * 0.2f));
  CHECK(p[1] == Approx(-2.f + 0.5f * 0.4f));
  s.Apply(absl::MakeSpan(p), g);  // v = 0.9 g + g = 1.9 g
  CHECK(p[0] == Approx(0.9f - 0.5f * 0.38f));
  CHECK(p[1] == Approx(-1.8f + 0.5f * 0.76f));
  CHECK(s.steps() == 2);
}

TEST_CASE("Adam's first step moves each weight by about lr * sign(g)", "[optimizer]") {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdam;
  c.learning_rate = 0.01f;
  OptimizerState s(c, 3);
  std::vector<float> p = {0.f, 0.f, 0.f};
  s.Apply(absl::MakeSpan(p), std::vector<float>{3.f, -0.001f, 0.f});
  CHECK(p[0] == Approx(-0.01f).epsilon(1e-4));
  CHECK(p[1] == Approx(0.01f).epsilon(1e-3));
  CHECK(p[2] == 0.f);
  // Second step with the same gradient: still about lr per step.
  s.Apply(absl::MakeSpan(p), std::vector<float>{3.f, -0.001f, 0.f});
  CHECK(p[0] == Approx(-0.02f).epsilon(1e-3));
}

TEST_CASE("weight decay adds wd * p to the gradient", "[optimizer]") {
  OptimizerConfig c;
  c.learning_rate = 1.f;
  c.momentum = 0.f;
  c.weight_decay = 0.1f;
  OptimizerState s(c, 1);
  std::vector<float> p = {2.f};
  s.Apply(absl::MakeSpan(p), std::vector<float>{0.f});
  CHECK(p[0] == Approx(1.8f));
}

TEST_CASE("applying chunk by chunk is bit-identical to the whole vector", "[optimizer]") {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam}) {
    OptimizerConfig c;
    c.kind = kind;
    c.weight_decay = 1e-4f;
    const size_t n = 1000, chunk = 128;
    std::mt19937 rng(9);
    std::normal_distribution<float> d;
    std::vector<float> whole(n), grad(n);
    for (auto& v : whole) v = d(rng);
    std::vector<float> chunked = whole;
    OptimizerState all(c, n);
    std::vector<OptimizerState> parts;
    for (size_t off = 0; off < n; off += chunk) parts.emplace_back(c, std::min(chunk, n - off));
    for (int step = 0; step < 5; ++step) {
      for (auto& v : grad) v = d(rng);
      all.Apply(absl::MakeSpan(whole), grad);
      for (size_t k = 0; k < parts.size(); ++k) {
        const size_t off = k * chunk, len = parts[k].size();
        parts[k].Apply(absl::MakeSpan(chunked).subspan(off, len),
                       absl::MakeConstSpan(grad).subspan(off, len));
      }
    }
    CHECK(whole == chunked);
  }
}

TEST_CASE("a step in pieces (BeginStep, Update per range) equals Apply", "[optimizer]") {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam}) {
    OptimizerConfig c;
    c.kind = kind;
    c.weight_decay = 1e-4f;
    c.schedule = OptimizerConfig::Schedule::kCosine;
    c.total_steps = 10;
    const size_t n = 1000;
    std::mt19937 rng(11);
    std::normal_distribution<float> d;
    std::vector<float> whole(n), grad(n);
    for (auto& v : whole) v = d(rng);
    std::vector<float> pieces = whole;
    OptimizerState a(c, n), b(c, n);
    for (int step = 0; step < 5; ++step) {
      for (auto& v : grad) v = d(rng);
      a.Apply(absl::MakeSpan(whole), grad);
      b.BeginStep();
      // Uneven ranges, last one first: the order must not matter.
      const size_t cuts[] = {0, 7, 300, 301, 999, n};
      for (int k = 4; k >= 0; --k) {
        const size_t off = cuts[k], len = cuts[k + 1] - cuts[k];
        b.Update(off, absl::MakeSpan(pieces).subspan(off, len),
                 absl::MakeConstSpan(grad).subspan(off, len));
      }
    }
    CHECK(whole == pieces);
    CHECK(a.steps() == b.steps());
  }
}

TEST_CASE("cosine schedule: lr at step 0, lr/2 half-way, 0 at the end", "[optimizer]") {
  OptimizerConfig c;
  c.learning_rate = 0.4f;
  CHECK(LearningRateAt(c, 12345) == 0.4f);  // constant
  c.schedule = OptimizerConfig::Schedule::kCosine;
  c.total_steps = 100;
  CHECK(LearningRateAt(c, 0) == 0.4f);
  CHECK(LearningRateAt(c, 50) == Approx(0.2f));
  CHECK(LearningRateAt(c, 25) == Approx(0.2f * (1 + std::sqrt(0.5f))));
  CHECK(LearningRateAt(c, 100) == Approx(0.f).margin(1e-7));
  CHECK(LearningRateAt(c, 1000) == Approx(0.f).margin(1e-7));  // stays at the floor
  for (uint64_t t = 1; t <= 100; ++t) CHECK(LearningRateAt(c, t) < LearningRateAt(c, t - 1));
  // Apply uses the rate of the step it takes: plain SGD moves p by lr_t * g.
  c.momentum = 0;
  c.total_steps = 2;
  OptimizerState s(c, 1);
  std::vector<float> p = {1.f};
  const std::vector<float> g = {1.f};
  s.Apply(absl::MakeSpan(p), g);
  CHECK(p[0] == Approx(1.f - 0.4f));
  s.Apply(absl::MakeSpan(p), g);
  CHECK(p[0] == Approx(0.6f - 0.2f));
  s.Apply(absl::MakeSpan(p), g);
  CHECK(p[0] == Approx(0.4f).margin(1e-6));
}

TEST_CASE("optimizer config validation names the field", "[optimizer]") {
  OptimizerConfig c;
  CHECK(ValidateOptimizerConfig(c).ok());
  c.learning_rate = 0;
  CHECK(ValidateOptimizerConfig(c).message().find("learning_rate") != std::string::npos);
  c = OptimizerConfig();
  c.momentum = 1.f;
  CHECK(ValidateOptimizerConfig(c).message().find("momentum") != std::string::npos);
  c = OptimizerConfig();
  c.beta2 = -0.1f;
  CHECK(!ValidateOptimizerConfig(c).ok());
  c = OptimizerConfig();
  c.learning_rate = std::nanf("");
  CHECK(!ValidateOptimizerConfig(c).ok());
  c = OptimizerConfig();
  c.schedule = OptimizerConfig::Schedule::kCosine;
  CHECK(ValidateOptimizerConfig(c).message().find("total_steps") != std::string::npos);
  CHECK(ParseOptimizerKind("adam").value() == OptimizerConfig::Kind::kAdam);
  CHECK(ParseOptimizerKind("rmsprop").status().message().find("rmsprop") != std::string::npos);
}

}  // namespace
}  // namespace train
}  // namespace hetps
