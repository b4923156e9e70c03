#include "lib/train/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/splitmix.h"
#include "lib/base/status_macros.h"

namespace hetps {
namespace train {

using Type = LayerSpec::Type;

absl::StatusOr<ModelSpec> BuiltinModel(const std::string& name) {
  ModelSpec s;
  s.name = name;
  if (name == "mlp" || name == "mlp-wide") {
    const int h1 = name == "mlp" ? 256 : 2048, h2 = name == "mlp" ? 128 : 2048;
    s.layers = {LayerSpec::Dense(h1), LayerSpec::Relu(), LayerSpec::Dense(h2), LayerSpec::Relu(),
                LayerSpec::Dense(10)};
    return s;
  }
  if (name == "lenet5") {
    s.layers = {LayerSpec::Conv(6, 5, 2),  LayerSpec::Relu(),   LayerSpec::MaxPool(2),
                LayerSpec::Conv(16, 5, 0), LayerSpec::Relu(),   LayerSpec::MaxPool(2),
                LayerSpec::Dense(120),     LayerSpec::Relu(),   LayerSpec::Dense(84),
                LayerSpec::Relu(),         LayerSpec::Dense(10)};
    return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "' (expected mlp, mlp-wide or lenet5)"));
}

std::vector<std::string> BuiltinModelNames() { return {"mlp", "mlp-wide", "lenet5"}; }

struct Model::Layer {
  LayerSpec spec;
  std::string name;
  int in_c = 0, in_h = 1, in_w = 1;
  int out_c = 0, out_h = 1, out_w = 1;
  size_t w_off = 0, w_size = 0, b_off = 0;  // parameter offsets (dense, conv)
  // conv: column matrices and their gradient, one sample's, or batch_max's
  // where the backend runs convolutions batched; then dw_each holds each
  // sample's weight gradient before they are summed.
  float* col = nullptr;
  float* dcol = nullptr;
  float* dw_each = nullptr;
  int32_t* argmax = nullptr;  // max-pool
  bool first = false;         // no input gradient needed

  size_t in_size() const { return static_cast<size_t>(in_c) * in_h * in_w; }
  size_t out_size() const { return static_cast<size_t>(out_c) * out_h * out_w; }
  Window2d window() const {
    Window2d w;
    w.channels = in_c;
    w.height = in_h;
    w.width = in_w;
    w.kernel = spec.kernel;
    w.stride = spec.stride;
    w.pad = spec.pad;
    return w;
  }
  size_t col_rows() const { return static_cast<size_t>(in_c) * spec.kernel * spec.kernel; }
  size_t col_cols() const { return static_cast<size_t>(out_h) * out_w; }
};

Model::Model(ModelSpec spec, Backend* backend, int batch_max)
    : spec_(std::move(spec)), backend_(backend), batch_max_(batch_max) {}

Model::~Model() {
  for (void* p : owned_) backend_->Free(p);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelSpec& spec, Backend* backend,
                                                     int batch_max) {
  if (backend == nullptr) return absl::InvalidArgumentError("model: no backend");
  if (batch_max <= 0 || batch_max > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: batch size ", batch_max, " out of range [1, 1048576]"));
  }
  if (spec.in_channels <= 0 || spec.in_height <= 0 || spec.in_width <= 0 || spec.classes < 2) {
    return absl::InvalidArgumentError("model: input shape and classes must be positive");
  }
  auto m = std::unique_ptr<Model>(new Model(spec, backend, batch_max));
  RETURN_IF_ERROR(m->Build());
  RETURN_IF_ERROR(m->Allocate());
  return m;
}

absl::StatusOr<size_t> Model::CountParameters(const ModelSpec& spec) {
  if (spec.in_channels <= 0 || spec.in_height <= 0 || spec.in_width <= 0 || spec.classes < 2) {
    return absl::InvalidArgumentError("model: input shape and classes must be positive");
  }
  Model m(spec, nullptr, 1);
  RETURN_IF_ERROR(m.Build());
  return m.num_params_;
}

absl::Status Model::Build() {
  int c = spec_.in_channels, h = spec_.in_height, w = spec_.in_width;
  input_size_ = static_cast<size_t>(c) * h * w;
  int dense_n = 0, conv_n = 0, pool_n = 0, relu_n = 0;
  // A ReLU followed by an unpadded max-pool runs after it instead: max
  // and ReLU commute (relu(max(x)) = max(relu(x)) exactly for any floats
  // but NaN), and so do their gradients (where a window's largest value
  // is not positive, both send it zero), but the ReLU and its backward
  // then touch a quarter as many values (a 2x2 pool). Unpadded, every
  // window holds an input.
  std::vector<size_t> order(spec_.layers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (spec_.layers[i].type == Type::kRelu && spec_.layers[i + 1].type == Type::kMaxPool &&
        spec_.layers[i + 1].pad == 0) {
      std::swap(order[i], order[i + 1]);
      ++i;
    }
  }
  for (size_t i : order) {
    auto l = std::make_unique<Layer>();
    l->spec = spec_.layers[i];
    l->first = layers_.empty();
    l->in_c = c;
    l->in_h = h;
    l->in_w = w;
    switch (l->spec.type) {
      case Type::kDense: {
        if (l->spec.units <= 0) return absl::InvalidArgumentError("model: dense units must be > 0");
        l->name = absl::StrCat("dense", ++dense_n);
        const int fan_in = c * h * w;
        l->in_c = fan_in;
        l->in_h = l->in_w = 1;
        l->out_c = l->spec.units;
        l->w_off = num_params_;
        l->w_size = static_cast<size_t>(l->out_c) * fan_in;
        tensors_.push_back({l->name + ".weight", {l->out_c, fan_in}, l->w_off, l->w_size});
        num_params_ += l->w_size;
        l->b_off = num_params_;
        tensors_.push_back({l->name + ".bias", {l->out_c}, l->b_off, size_t(l->out_c)});
        num_params_ += l->out_c;
        break;
      }
      case Type::kConv:
      case Type::kMaxPool: {
        const Window2d win = l->window();
        if (l->spec.kernel <= 0 || l->spec.stride <= 0 || l->spec.pad < 0 ||
            win.out_height() <= 0 || win.out_width() <= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "model: layer ", i, ": window does not fit a ", c, "x", h, "x", w, " input"));
        }
        l->out_h = win.out_height();
        l->out_w = win.out_width();
        if (l->spec.type == Type::kConv) {
          if (l->spec.units <= 0)
            return absl::InvalidArgumentError("model: conv channels must be > 0");
          l->name = absl::StrCat("conv", ++conv_n);
          l->out_c = l->spec.units;
          l->w_off = num_params_;
          l->w_size = static_cast<size_t>(l->out_c) * l->col_rows();
          tensors_.push_back({l->name + ".weight",
                              {l->out_c, c, l->spec.kernel, l->spec.kernel},
                              l->w_off,
                              l->w_size});
          num_params_ += l->w_size;
          l->b_off = num_params_;
          tensors_.push_back({l->name + ".bias", {l->out_c}, l->b_off, size_t(l->out_c)});
          num_params_ += l->out_c;
        } else {
          l->name = absl::StrCat("pool", ++pool_n);
          l->out_c = c;
        }
        break;
      }
      case Type::kRelu:
        l->name = absl::StrCat("relu", ++relu_n);
        l->out_c = c;
        l->out_h = h;
        l->out_w = w;
        break;
    }
    c = l->out_c;
    h = l->out_h;
    w = l->out_w;
    layers_.push_back(std::move(l));
  }
  if (layers_.empty() || static_cast<size_t>(c) * h * w != static_cast<size_t>(spec_.classes)) {
    return absl::InvalidArgumentError(absl::StrCat("model: the last layer must produce ",
                                                   spec_.classes, " outputs, not ", c * h * w));
  }
  return absl::OkStatus();
}

absl::Status Model::Allocate() {
  auto alloc = [&](size_t n) -> absl::StatusOr<float*> {
    ASSIGN_OR_RETURN(float* p, backend_->Alloc(n));
    owned_.push_back(p);
    return p;
  };
  ASSIGN_OR_RETURN(params_, alloc(num_params_));
  ASSIGN_OR_RETURN(grad_, alloc(num_params_));
  const size_t b = batch_max_;
  ASSIGN_OR_RETURN(float* in, alloc(b * input_size_));
  act_.push_back(in);
  dact_.push_back(nullptr);  // no gradient w.r.t. the data
  for (auto& l : layers_) {
    ASSIGN_OR_RETURN(float* out, alloc(b * l->out_size()));
    ASSIGN_OR_RETURN(float* dout, alloc(b * l->out_size()));
    act_.push_back(out);
    dact_.push_back(dout);
    if (l->spec.type == Type::kConv) {
      // Sample by sample, one sample's columns, rebuilt in backward: a
      // batch's worth (5 MB for lenet5's first layer) left the caches
      // between forward and backward and cost more to keep than to
      // recompute. Batched, forward's columns are kept for backward.
      const bool batched = backend_->batched_conv();
      const size_t samples = batched ? b : 1;
      ASSIGN_OR_RETURN(l->col, alloc(samples * l->col_rows() * l->col_cols()));
      ASSIGN_OR_RETURN(l->dcol, alloc(samples * l->col_rows() * l->col_cols()));
      if (batched) {
        ASSIGN_OR_RETURN(l->dw_each, alloc(b * l->w_size));
      }
    }
    if (l->spec.type == Type::kMaxPool) {
      ASSIGN_OR_RETURN(l->argmax, backend_->AllocInt(b * l->out_size()));
      owned_.push_back(l->argmax);
    }
  }
  ASSIGN_OR_RETURN(labels_, backend_->AllocInt(b));
  owned_.push_back(labels_);
  ASSIGN_OR_RETURN(row_loss_, alloc(b));
  if (backend_->batched_conv()) {
    ASSIGN_OR_RETURN(ones_, alloc(b));
    backend_->Fill(ones_, b, 1.f);
  }
  host_labels_.resize(b);
  host_row_loss_.resize(b);
  host_logits_.resize(b * spec_.classes);
  backend_->Fill(params_, num_params_, 0.f);
  weights_ = params_;
  return backend_->Sync();
}

std::vector<float> Model::InitialParameters(uint64_t seed) const {
  std::vector<float> p(num_params_, 0.f);
  for (const auto& l : layers_) {
    if (l->w_size == 0) continue;
    // One stream per tensor, so adding a layer does not reshuffle the others.
    SplitMix64 rng{seed ^ (0xA0761D6478BD642Full * (l->w_off + 1))};
    const size_t fan_in = l->spec.type == Type::kDense ? l->in_size() : l->col_rows();
    const float limit = std::sqrt(6.0f / static_cast<float>(fan_in));
    for (size_t i = 0; i < l->w_size; ++i) p[l->w_off + i] = limit * rng.Symmetric();
  }
  return p;
}

absl::Status Model::SetParameters(absl::Span<const float> params) {
  if (params.size() != num_params_) {
    return absl::InvalidArgumentError(absl::StrCat("model ", spec_.name, ": expected ", num_params_,
                                                   " parameters, got ", params.size()));
  }
  backend_->CopyToDevice(params_, params.data(), num_params_);
  weights_ = params_;
  return backend_->Sync();
}

absl::Status Model::UseParameters(absl::Span<const float> params) {
  if (!backend_->host_memory()) return SetParameters(params);
  if (params.size() != num_params_) {
    return absl::InvalidArgumentError(absl::StrCat("model ", spec_.name, ": expected ", num_params_,
                                                   " parameters, got ", params.size()));
  }
  weights_ = params.data();
  return absl::OkStatus();
}

absl::Status Model::GetParameters(absl::Span<float> params) const {
  if (params.size() != num_params_) {
    return absl::InvalidArgumentError(absl::StrCat("model ", spec_.name, ": expected ", num_params_,
                                                   " parameters, got ", params.size()));
  }
  return backend_->CopyToHost(params.data(), weights_, num_params_);
}

absl::Status Model::UploadBatch(const float* x, const uint8_t* labels, int n) {
  if (n <= 0 || n > batch_max_) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: batch of ", n, " samples outside [1, ", batch_max_, "]"));
  }
  for (int i = 0; i < n; ++i) {
    if (labels[i] >= spec_.classes) {
      return absl::InvalidArgumentError(absl::StrCat("model: label ", int(labels[i]), " of sample ",
                                                     i, " >= classes ", spec_.classes));
    }
    host_labels_[i] = labels[i];
  }
  backend_->CopyToDevice(act_[0], x, static_cast<size_t>(n) * input_size_);
  backend_->CopyIntToDevice(labels_, host_labels_.data(), n);
  return absl::OkStatus();
}

void Model::Forward(int n) {
  Backend& be = *backend_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    const float* x = act_[i];
    float* y = act_[i + 1];
    switch (l.spec.type) {
      case Type::kDense:
        // Y[n x out] = X[n x in] W^T + b
        be.Gemm(false, true, n, l.out_c, l.in_c, 1.f, x, l.in_c, weights_ + l.w_off, l.in_c, 0.f, y,
                l.out_c);
        be.AddBias(y, weights_ + l.b_off, n, l.out_c, 1);
        break;
      case Type::kConv: {
        const Window2d w = l.window();
        const size_t rows = l.col_rows(), cols = l.col_cols();
        if (be.batched_conv()) {
          // Y_s[out x cols] = W[out x rows] col_s[rows x cols] for every s.
          be.Im2Col(x, w, n, l.col);
          be.GemmStridedBatched(false, false, l.out_c, cols, rows, 1.f, weights_ + l.w_off, rows, 0,
                                l.col, cols, rows * cols, 0.f, y, cols, l.out_size(), n);
        } else {
          for (int s = 0; s < n; ++s) {
            be.Im2Col(x + s * l.in_size(), w, 1, l.col);
            be.Gemm(false, false, l.out_c, cols, rows, 1.f, weights_ + l.w_off, rows, l.col, cols,
                    0.f, y + s * l.out_size(), cols);
          }
        }
        be.AddBias(y, weights_ + l.b_off, n, l.out_c, cols);
        break;
      }
      case Type::kRelu:
        be.Relu(x, y, n * l.out_size());
        break;
      case Type::kMaxPool:
        be.MaxPool(x, l.window(), n, y, l.argmax);
        break;
    }
  }
}

absl::StatusOr<float> Model::ComputeGradients(const float* x, const uint8_t* labels, int n,
                                              absl::Span<float> grad,
                                              const std::function<void(size_t)>& final_from) {
  if (grad.size() != num_params_) {
    return absl::InvalidArgumentError(absl::StrCat("model ", spec_.name, ": gradient buffer of ",
                                                   grad.size(), " floats, need ", num_params_));
  }
  RETURN_IF_ERROR(UploadBatch(x, labels, n));
  Backend& be = *backend_;
  Forward(n);
  be.SoftmaxCrossEntropy(act_.back(), labels_, n, spec_.classes, 1.0f / n, row_loss_, dact_.back());
  // On a host-memory backend the gradient goes straight to the caller's
  // buffer. Only what is accumulated is zeroed first: biases and conv
  // weights (summed over samples); dense weights are written whole.
  float* const g = be.host_memory() ? grad.data() : grad_;
  for (const auto& l : layers_) {
    if (l->w_size == 0) continue;
    if (l->spec.type == Type::kConv) be.Fill(g + l->w_off, l->w_size, 0.f);
    be.Fill(g + l->b_off, l->out_c, 0.f);
  }
  for (size_t i = layers_.size(); i-- > 0;) {
    const Layer& l = *layers_[i];
    const float* x_in = act_[i];
    const float* y = act_[i + 1];
    const float* dy = dact_[i + 1];
    float* dx = l.first ? nullptr : dact_[i];
    switch (l.spec.type) {
      case Type::kDense:
        // dW[out x in] = dY^T X; db = column sums of dY; dX = dY W
        be.Gemm(true, false, l.out_c, l.in_c, n, 1.f, dy, l.out_c, x_in, l.in_c, 0.f, g + l.w_off,
                l.in_c);
        be.BiasGrad(dy, g + l.b_off, n, l.out_c, 1);
        if (dx != nullptr) {
          be.Gemm(false, false, n, l.in_c, l.out_c, 1.f, dy, l.out_c, weights_ + l.w_off, l.in_c,
                  0.f, dx, l.in_c);
        }
        break;
      case Type::kConv: {
        const Window2d w = l.window();
        const size_t rows = l.col_rows(), cols = l.col_cols();
        if (be.batched_conv()) {
          // dW_s = dY_s col_s^T for every s (forward's columns), then
          // dW += sum over s as ones[1 x n] dW_each[n x (out * rows)];
          // dcol_s = W^T dY_s, scattered back into dx.
          be.GemmStridedBatched(false, true, l.out_c, rows, cols, 1.f, dy, cols, l.out_size(),
                                l.col, cols, rows * cols, 0.f, l.dw_each, rows, l.w_size, n);
          be.Gemm(false, false, 1, static_cast<int>(l.w_size), n, 1.f, ones_, n, l.dw_each,
                  static_cast<int>(l.w_size), 1.f, g + l.w_off, static_cast<int>(l.w_size));
          if (dx != nullptr) {
            be.GemmStridedBatched(true, false, rows, cols, l.out_c, 1.f, weights_ + l.w_off, rows,
                                  0, dy, cols, l.out_size(), 0.f, l.dcol, cols, rows * cols, n);
            be.Fill(dx, n * l.in_size(), 0.f);
            be.Col2Im(l.dcol, w, n, dx);
          }
        } else {
          for (int s = 0; s < n; ++s) {
            const float* dys = dy + s * l.out_size();
            be.Im2Col(x_in + s * l.in_size(), w, 1, l.col);
            be.Gemm(false, true, l.out_c, rows, cols, 1.f, dys, cols, l.col, cols, 1.f, g + l.w_off,
                    rows);
            if (dx != nullptr) {
              be.Gemm(true, false, rows, cols, l.out_c, 1.f, weights_ + l.w_off, rows, dys, cols,
                      0.f, l.dcol, cols);
              float* dxs = dx + s * l.in_size();
              be.Fill(dxs, l.in_size(), 0.f);
              be.Col2Im(l.dcol, w, 1, dxs);
            }
          }
        }
        be.BiasGrad(dy, g + l.b_off, n, l.out_c, cols);
        break;
      }
      case Type::kRelu:
        if (dx != nullptr) be.ReluBackward(y, dy, dx, n * l.out_size());
        break;
      case Type::kMaxPool:
        if (dx != nullptr) be.MaxPoolBackward(dy, l.argmax, l.window(), n, dx);
        break;
    }
    // This layer's parameters, and every later layer's, are final now.
    if (final_from && l.w_size > 0 && g == grad.data() && i > 0) final_from(l.w_off);
  }
  if (g == grad_) RETURN_IF_ERROR(be.CopyToHost(grad.data(), grad_, num_params_));
  RETURN_IF_ERROR(be.CopyToHost(host_row_loss_.data(), row_loss_, n));
  double loss = 0;
  for (int i = 0; i < n; ++i) loss += host_row_loss_[i];
  return static_cast<float>(loss / n);
}

absl::StatusOr<EvalResult> Model::Evaluate(const float* x, const uint8_t* labels, size_t n) {
  EvalResult r;
  double loss = 0;
  size_t correct = 0;
  for (size_t start = 0; start < n; start += batch_max_) {
    const int b = static_cast<int>(std::min<size_t>(batch_max_, n - start));
    RETURN_IF_ERROR(UploadBatch(x + start * input_size_, labels + start, b));
    Forward(b);
    // dlogits is scratch here.
    backend_->SoftmaxCrossEntropy(act_.back(), labels_, b, spec_.classes, 0.f, row_loss_,
                                  dact_.back());
    RETURN_IF_ERROR(backend_->CopyToHost(host_logits_.data(), act_.back(),
                                         static_cast<size_t>(b) * spec_.classes));
    RETURN_IF_ERROR(backend_->CopyToHost(host_row_loss_.data(), row_loss_, b));
    for (int i = 0; i < b; ++i) {
      loss += host_row_loss_[i];
      const float* z = host_logits_.data() + static_cast<size_t>(i) * spec_.classes;
      const int pred = static_cast<int>(std::max_element(z, z + spec_.classes) - z);
      correct += pred == labels[start + i];
    }
  }
  r.samples = n;
  if (n > 0) {
    r.loss = loss / n;
    r.accuracy = static_cast<double>(correct) / n;
  }
  return r;
}

}  // namespace train
}  // namespace hetps
