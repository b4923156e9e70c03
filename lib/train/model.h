// Feed-forward classifiers (dense, conv, ReLU, max-pool, softmax
// cross-entropy) whose parameters are ONE flat float32 vector: a list of
// named tensors at fixed offsets. The flat layout is what the parameter
// servers shard into chunks, so a model never needs to know about chunks.
//
// A Model owns its activation and parameter buffers on a Backend it does not
// own (the backend must outlive it). Not thread-safe: one trainer thread.
#ifndef HETPS_LIB_TRAIN_MODEL_H_
#define HETPS_LIB_TRAIN_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/train/backend.h"

namespace hetps {
namespace train {

struct LayerSpec {
  enum class Type { kDense, kConv, kRelu, kMaxPool };
  Type type = Type::kDense;
  int units = 0;   // dense: output units; conv: output channels
  int kernel = 0;  // conv, max-pool
  int stride = 1;  // conv, max-pool
  int pad = 0;     // conv, max-pool

  static LayerSpec Dense(int units) { return {Type::kDense, units, 0, 1, 0}; }
  static LayerSpec Conv(int channels, int kernel, int pad) {
    return {Type::kConv, channels, kernel, 1, pad};
  }
  static LayerSpec Relu() { return {Type::kRelu, 0, 0, 1, 0}; }
  static LayerSpec MaxPool(int kernel) { return {Type::kMaxPool, 0, kernel, kernel, 0}; }
};

struct ModelSpec {
  std::string name;
  int in_channels = 1;
  int in_height = 28;
  int in_width = 28;
  int classes = 10;
  std::vector<LayerSpec> layers;  // the last one must produce `classes` outputs
};

// The built-in models, sized for 28x28 grey images and 10 classes:
//   mlp       784-256-128-10                       (~235 K parameters)
//   mlp-wide  784-2048-2048-10                     (~5.8 M, ~23 MB float32)
//   lenet5    conv6@5x5(pad 2)-pool-conv16@5x5-pool-120-84-10 (~62 K)
absl::StatusOr<ModelSpec> BuiltinModel(const std::string& name);
std::vector<std::string> BuiltinModelNames();

struct TensorInfo {
  std::string name;        // e.g. "dense1.weight"
  std::vector<int> shape;  // row-major
  size_t offset = 0;       // into the flat parameter vector, in floats
  size_t size = 0;         // floats
};

struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of argmax == label
  size_t samples = 0;
};

class Model {
 public:
  // `batch_max` bounds every call's sample count (buffers are sized for it).
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelSpec& spec, Backend* backend,
                                                       int batch_max);
  // Parameters of `spec`, without a backend or any buffer.
  static absl::StatusOr<size_t> CountParameters(const ModelSpec& spec);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t num_params() const { return num_params_; }
  size_t input_size() const { return input_size_; }
  int batch_max() const { return batch_max_; }
  Backend* backend() const { return backend_; }

  // Deterministic initial parameters for `seed`, identical on every machine:
  // He-uniform weights (limit sqrt(6 / fan_in)), zero biases.
  std::vector<float> InitialParameters(uint64_t seed) const;

  absl::Status SetParameters(absl::Span<const float> params);
  // As SetParameters, but where the backend computes in host memory (CPU)
  // the model reads `params` in place, without a copy: they must stay
  // valid and unchanged until the next SetParameters or UseParameters
  // (a trainer's pulled parameters, one copy less per iteration). Other
  // backends copy.
  absl::Status UseParameters(absl::Span<const float> params);
  absl::Status GetParameters(absl::Span<float> params) const;

  // Forward and backward over n samples (row-major input_size() floats each):
  // writes d(mean loss)/d(params) to `grad` (num_params() floats) and
  // returns the mean loss. Labels must be < classes.
  // `final_from`, when set, is called during backward on a host-memory
  // backend, each time the gradients at every offset >= its argument are
  // final in `grad` (layers are laid out in order and backward runs from
  // the last), so a trainer can push those while the rest is computed.
  absl::StatusOr<float> ComputeGradients(const float* x, const uint8_t* labels, int n,
                                         absl::Span<float> grad,
                                         const std::function<void(size_t)>& final_from = nullptr);

  // Mean loss and accuracy over n samples, in batches of batch_max().
  absl::StatusOr<EvalResult> Evaluate(const float* x, const uint8_t* labels, size_t n);

  struct Layer;  // internal

 private:
  Model(ModelSpec spec, Backend* backend, int batch_max);
  // The layers and tensors (shapes only), then the backend's buffers.
  absl::Status Build();
  absl::Status Allocate();
  absl::Status UploadBatch(const float* x, const uint8_t* labels, int n);
  void Forward(int n);

  ModelSpec spec_;
  Backend* backend_;
  int batch_max_;
  size_t input_size_ = 0;
  size_t num_params_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<void*> owned_;  // device buffers to free
  float* params_ = nullptr;
  const float* weights_ = nullptr;  // what the layers read: params_, or UseParameters' span
  float* grad_ = nullptr;
  float* ones_ = nullptr;     // batch_max ones: sums per-sample gradients (batched conv)
  std::vector<float*> act_;   // act_[i]: input of layer i; act_.back(): logits
  std::vector<float*> dact_;  // same shapes, gradients
  int32_t* labels_ = nullptr;
  float* row_loss_ = nullptr;
  std::vector<int32_t> host_labels_;
  std::vector<float> host_row_loss_;
  std::vector<float> host_logits_;
};

}  // namespace train
}  // namespace hetps

#endif  // HETPS_LIB_TRAIN_MODEL_H_
