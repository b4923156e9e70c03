// Server-side optimizers over a contiguous range of parameters (a chunk):
// SGD with momentum and Adam. Element-wise, so applying them chunk by chunk
// gives bit-identical results to applying them to the whole vector; that is
// what lets a sharded parameter server match single-process training.
//
// OptimizerState owns the per-element slots (velocity, or Adam's moments)
// for one range. Not thread-safe; one owner per chunk.
#ifndef HETPS_LIB_TRAIN_OPTIMIZER_H_
#define HETPS_LIB_TRAIN_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetps {
namespace train {

struct OptimizerConfig {
  enum class Kind { kSgd, kAdam };
  // constant: learning_rate at every step. cosine: learning_rate x
  // (1 + cos(pi t / total_steps)) / 2 at step t = 0, 1, ..., which ends near 0:
  // the last iterates stop wandering, so the final model is stable.
  enum class Schedule { kConstant, kCosine };
  Kind kind = Kind::kSgd;
  float learning_rate = 0.05f;
  Schedule schedule = Schedule::kConstant;
  uint64_t total_steps = 0;   // cosine: steps of the whole run (> 0)
  float momentum = 0.9f;      // SGD; 0 is plain SGD
  float beta1 = 0.9f;         // Adam
  float beta2 = 0.999f;       // Adam
  float epsilon = 1e-8f;      // Adam
  float weight_decay = 0.0f;  // L2, added to the gradient
};

absl::StatusOr<OptimizerConfig::Kind> ParseOptimizerKind(const std::string& s);
const char* OptimizerKindName(OptimizerConfig::Kind kind);
// The learning rate of step t (0-based) under c's schedule.
float LearningRateAt(const OptimizerConfig& c, uint64_t t);
// Ranges: learning_rate in (0, 10], momentum and betas in [0, 1), epsilon > 0,
// weight_decay in [0, 1); a cosine schedule needs total_steps > 0.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& c);

class OptimizerState {
 public:
  OptimizerState(const OptimizerConfig& config, size_t size);

  // One step: params -= update(grad). Both spans must have size() elements.
  // lr is LearningRateAt(config, steps()) before the step.
  //   SGD:  v = momentum * v + g;  p -= lr * v        (g includes weight decay)
  //   Adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  //         p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  void Apply(absl::Span<float> params, absl::Span<const float> grad);

  // The same step in pieces, so a server can apply each tile of the
  // aggregate while it is still in cache: BeginStep, then Update over
  // ranges that cover [0, size()) once each, in any order. `params` and
  // `grad` are the range's elements, starting at element `offset`.
  void BeginStep();
  void Update(size_t offset, absl::Span<float> params, absl::Span<const float> grad);

  // The optimizer's state, for checkpoints: 1 slot for SGD (the momentum
  // buffer, kept even when momentum is 0), 2 for Adam (first and second
  // moments), each size() long.
  size_t slot_count() const { return config_.kind == OptimizerConfig::Kind::kSgd ? 1 : 2; }
  absl::Span<const float> slot(size_t i) const { return i == 0 ? slot1_ : slot2_; }
  // Restoring from a checkpoint: the state written back, and the step
  // count it was taken at (the learning-rate schedule and Adam's bias
  // corrections go on from there).
  absl::Span<float> mutable_slot(size_t i) { return absl::MakeSpan(i == 0 ? slot1_ : slot2_); }
  void set_steps(uint64_t steps) { steps_ = steps; }

  size_t size() const { return size_; }
  uint64_t steps() const { return steps_; }
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  size_t size_;
  uint64_t steps_ = 0;
  // The step in progress (BeginStep): learning rate and Adam's bias
  // corrections.
  float lr_ = 0, c1_ = 1, c2_ = 1;
  std::vector<float> slot1_;  // SGD velocity, or Adam first moment
  std::vector<float> slot2_;  // Adam second moment
};

}  // namespace train
}  // namespace hetps

#endif  // HETPS_LIB_TRAIN_OPTIMIZER_H_
