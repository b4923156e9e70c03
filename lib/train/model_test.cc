// CPU backend: numerical gradient checks for every layer type, the built-in
// models' layouts, input validation, and learning on real Fashion-MNIST.
#include "lib/train/model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <random>

#include "lib/data/idx.h"
#include "lib/train/backend.h"
#include "lib/train/optimizer.h"

namespace hetps {
namespace train {
namespace {

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> y;
};

Batch RandomBatch(const Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Batch b;
  b.x.resize(static_cast<size_t>(n) * m.input_size());
  for (float& v : b.x) v = u(rng);
  for (int i = 0; i < n; ++i) b.y.push_back(static_cast<uint8_t>(rng() % m.spec().classes));
  return b;
}

std::vector<float> RandomParams(const Model& m, uint32_t seed) {
  std::vector<float> p = m.InitialParameters(seed);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (const TensorInfo& t : m.tensors()) {
    if (t.name.find(".bias") == std::string::npos) continue;
    for (size_t i = 0; i < t.size; ++i) p[t.offset + i] = u(rng);  // non-zero biases
  }
  return p;
}

struct GradCheck {
  double worst = 0;  // worst normalised error over entries that are not at a kink
  int checked = 0;
  int kinks = 0;  // entries at a ReLU / max-pool kink: matched a one-sided difference
};

// Normalised error |num - ana| / max(1e-2, |num|, |ana|).
double Err(double num, double ana) {
  return std::abs(num - ana) / std::max({1e-2, std::abs(num), std::abs(ana)});
}

constexpr double kGradTolerance = 2e-2;

// Finite differences on the mean loss against the analytic gradient, for up
// to `per_tensor` entries of every tensor (all of them in small tensors).
// ReLU and max-pool make the loss piecewise smooth: where the central
// difference straddles a kink, the analytic gradient (a one-sided
// derivative) must match the left or right difference instead; such entries
// are counted, and must stay rare.
GradCheck CheckGradients(const ModelSpec& spec, int n, int per_tensor, bool batched_conv) {
  auto backend = NewCpuBackend(batched_conv);
  auto model_or = Model::Create(spec, backend.get(), n);
  REQUIRE(model_or.ok());
  Model& m = **model_or;
  std::vector<float> p = RandomParams(m, 7);
  Batch b = RandomBatch(m, n, 11);
  std::vector<float> grad(m.num_params());
  REQUIRE(m.SetParameters(p).ok());
  auto base = m.ComputeGradients(b.x.data(), b.y.data(), n, absl::MakeSpan(grad));
  REQUIRE(base.ok());

  std::vector<float> scratch(m.num_params());
  std::vector<float> q = p;
  auto loss_at = [&](size_t i, float delta) {
    q[i] = p[i] + delta;
    REQUIRE(m.SetParameters(q).ok());
    auto l = m.ComputeGradients(b.x.data(), b.y.data(), n, absl::MakeSpan(scratch));
    REQUIRE(l.ok());
    q[i] = p[i];
    return static_cast<double>(*l);
  };
  GradCheck r;
  std::mt19937 rng(3);
  for (const TensorInfo& t : m.tensors()) {
    const int count = static_cast<int>(std::min<size_t>(t.size, per_tensor));
    for (int k = 0; k < count; ++k) {
      const size_t i = t.offset + (t.size <= size_t(per_tensor) ? k : rng() % t.size);
      const double ana = grad[i];
      ++r.checked;
      double best = 1e9;
      for (float eps : {2e-3f, 5e-4f}) {
        best = std::min(best, Err((loss_at(i, eps) - loss_at(i, -eps)) / (2.0 * eps), ana));
      }
      if (best < kGradTolerance) {
        r.worst = std::max(r.worst, best);
        continue;
      }
      const float h = 5e-4f;
      const double right = (loss_at(i, h) - *base) / h, left = (*base - loss_at(i, -h)) / h;
      if (std::min(Err(right, ana), Err(left, ana)) < 5 * kGradTolerance) {
        ++r.kinks;
        continue;
      }
      UNSCOPED_INFO(t.name << "[" << i - t.offset << "] analytic " << ana << ", left " << left
                           << ", right " << right);
      r.worst = std::max(r.worst, best);
    }
  }
  return r;
}

void ExpectGradientsMatch(const ModelSpec& spec, int n, int per_tensor, bool batched_conv = false) {
  const GradCheck r = CheckGradients(spec, n, per_tensor, batched_conv);
  INFO((batched_conv ? "batched convolutions: " : "")
       << r.checked << " entries checked, " << r.kinks << " at kinks, worst error " << r.worst);
  CHECK(r.checked > 0);
  CHECK(r.worst < kGradTolerance);
  CHECK(r.kinks * 10 <= r.checked);
}

ModelSpec Small(int c, int h, int w, std::vector<LayerSpec> layers) {
  ModelSpec s;
  s.name = "small";
  s.in_channels = c;
  s.in_height = h;
  s.in_width = w;
  s.classes = 10;
  s.layers = std::move(layers);
  return s;
}

TEST_CASE("gradient check: dense + softmax cross-entropy", "[model][gradcheck]") {
  ExpectGradientsMatch(Small(1, 4, 4, {LayerSpec::Dense(10)}), 5, 200);
}

TEST_CASE("gradient check: relu between dense layers", "[model][gradcheck]") {
  ExpectGradientsMatch(
      Small(1, 4, 4, {LayerSpec::Dense(12), LayerSpec::Relu(), LayerSpec::Dense(10)}), 4, 200);
}

TEST_CASE("gradient check: stacked convolutions (im2col, col2im, padding)", "[model][gradcheck]") {
  for (bool batched : {false, true}) {
    ExpectGradientsMatch(
        Small(2, 6, 6, {LayerSpec::Conv(3, 3, 1), LayerSpec::Conv(4, 3, 0), LayerSpec::Dense(10)}),
        3, 200, batched);
  }
}

// The GPU's path (whole-batch im2col, strided-batched GEMMs, per-sample
// weight gradients summed by a GEMM) gives the sample-by-sample results.
TEST_CASE("batched convolutions give the per-sample path's loss and gradients", "[model]") {
  for (const char* name : {"lenet5", "conv"}) {
    const ModelSpec spec = std::string(name) == "lenet5"
                               ? *BuiltinModel("lenet5")
                               : Small(2, 9, 7,
                                       {LayerSpec::Conv(3, 3, 2), LayerSpec::Relu(),
                                        LayerSpec::Conv(4, 3, 0), LayerSpec::Dense(10)});
    const int n = 6;
    auto plain_be = NewCpuBackend(false), batched_be = NewCpuBackend(true);
    auto plain = Model::Create(spec, plain_be.get(), n);
    auto batched = Model::Create(spec, batched_be.get(), n);
    REQUIRE(plain.ok());
    REQUIRE(batched.ok());
    const std::vector<float> p = RandomParams(**plain, 21);
    const Batch b = RandomBatch(**plain, n, 22);
    std::vector<float> g1((*plain)->num_params(), 7.f), g2((*plain)->num_params(), -3.f);
    for (auto* m : {&*plain, &*batched}) REQUIRE((*m)->SetParameters(p).ok());
    // A batch smaller than batch_max too: strides must follow the batch.
    for (int used : {n, n - 2}) {
      INFO(name << ", " << used << " samples");
      auto l1 = (*plain)->ComputeGradients(b.x.data(), b.y.data(), used, absl::MakeSpan(g1));
      auto l2 = (*batched)->ComputeGradients(b.x.data(), b.y.data(), used, absl::MakeSpan(g2));
      REQUIRE(l1.ok());
      REQUIRE(l2.ok());
      CHECK(*l2 == Approx(*l1).epsilon(1e-6));
      double worst = 0;
      for (size_t i = 0; i < g1.size(); ++i) {
        worst = std::max(worst,
                         std::abs(double(g1[i]) - g2[i]) / std::max(1e-3, std::abs(double(g1[i]))));
      }
      CHECK(worst < 1e-4);
    }
  }
}

// The CPU backend copies whole in-bounds runs of a row (InsideRange);
// checked against the definition for pads and strides the built-in models
// do not use.
// A window over 7x9 planes: odd sizes, so strides leave edges over.
Window2d Window7x9(int channels, int kernel, int stride, int pad) {
  Window2d w;
  w.channels = channels;
  w.height = 7;
  w.width = 9;
  w.kernel = kernel;
  w.stride = stride;
  w.pad = pad;
  return w;
}

TEST_CASE("cpu im2col and col2im match their definition for any pad and stride", "[model]") {
  std::unique_ptr<Backend> be = NewCpuBackend();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int stride : {1, 2, 3}) {
    for (int pad : {0, 1, 2, 4}) {
      for (int kernel : {1, 3, 5}) {
        const Window2d w = Window7x9(2, kernel, stride, pad);
        if (w.out_height() <= 0 || w.out_width() <= 0) continue;
        const int oh = w.out_height(), ow = w.out_width();
        const size_t cols = size_t(oh) * ow, rows = size_t(w.channels) * kernel * kernel;
        std::vector<float> x(size_t(w.channels) * w.height * w.width);
        for (float& v : x) v = u(rng);
        std::vector<float> col(rows * cols, 99.f), want(rows * cols);
        std::vector<float> dcol(rows * cols);
        for (float& v : dcol) v = u(rng);
        std::vector<float> dx(x.size(), 0.f), want_dx(x.size(), 0.f);
        for (int c = 0; c < w.channels; ++c) {
          for (int ky = 0; ky < kernel; ++ky) {
            for (int kx = 0; kx < kernel; ++kx) {
              const size_t r = (size_t(c) * kernel + ky) * kernel + kx;
              for (int oy = 0; oy < oh; ++oy) {
                for (int ox = 0; ox < ow; ++ox) {
                  const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                  const bool in = iy >= 0 && iy < w.height && ix >= 0 && ix < w.width;
                  const size_t at = (size_t(c) * w.height + iy) * w.width + ix;
                  want[r * cols + oy * ow + ox] = in ? x[at] : 0.f;
                  if (in) want_dx[at] += dcol[r * cols + oy * ow + ox];
                }
              }
            }
          }
        }
        be->Im2Col(x.data(), w, 1, col.data());
        INFO("stride " << stride << " pad " << pad << " kernel " << kernel);
        CHECK(col == want);
        be->Col2Im(dcol.data(), w, 1, dx.data());
        for (size_t i = 0; i < dx.size(); ++i) CHECK(dx[i] == Approx(want_dx[i]).margin(1e-6));
        // Two samples at once: each sample's own columns and adjoint.
        std::vector<float> x2 = x, col2(2 * col.size()), dx2(2 * dx.size(), 0.f);
        x2.insert(x2.end(), x.rbegin(), x.rend());
        be->Im2Col(x2.data(), w, 2, col2.data());
        CHECK(std::equal(col.begin(), col.end(), col2.begin()));
        std::vector<float> col_rev(col.size());
        be->Im2Col(x2.data() + x.size(), w, 1, col_rev.data());
        CHECK(std::equal(col_rev.begin(), col_rev.end(), col2.begin() + col.size()));
        std::vector<float> dcol2 = dcol;
        dcol2.insert(dcol2.end(), dcol.begin(), dcol.end());
        be->Col2Im(dcol2.data(), w, 2, dx2.data());
        CHECK(std::equal(dx.begin(), dx.end(), dx2.begin()));
        CHECK(std::equal(dx.begin(), dx.end(), dx2.begin() + dx.size()));
      }
    }
  }
}

// Windows of every size and stride, the 2x2 one (which has its own loop)
// included, on inputs full of ties: the largest value and the first index
// holding it, by the definition.
TEST_CASE("cpu max-pool matches its definition, ties to the first largest", "[model]") {
  std::unique_ptr<Backend> be = NewCpuBackend();
  std::mt19937 rng(5);
  for (int kernel : {1, 2, 3}) {
    for (int stride : {1, 2, 3}) {
      for (int pad : {0, 1}) {
        const Window2d w = Window7x9(3, kernel, stride, pad);
        if (pad >= kernel || w.out_height() <= 0 || w.out_width() <= 0) continue;
        const int oh = w.out_height(), ow = w.out_width(), batch = 2;
        const size_t plane = size_t(w.height) * w.width, planes = size_t(batch) * w.channels;
        std::vector<float> x(planes * plane);
        for (float& v : x) v = float(int(rng() % 5) - 2);  // -2..2: many ties
        std::vector<float> y(planes * oh * ow, 99.f), want(y.size());
        std::vector<int32_t> arg(y.size(), -7), want_arg(y.size());
        for (size_t p = 0; p < planes; ++p) {
          for (int oy = 0; oy < oh; ++oy) {
            for (int ox = 0; ox < ow; ++ox) {
              int32_t best = -1;
              for (int ky = 0; ky < kernel; ++ky) {
                for (int kx = 0; kx < kernel; ++kx) {
                  const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                  if (iy < 0 || iy >= w.height || ix < 0 || ix >= w.width) continue;
                  const int32_t i = iy * w.width + ix;
                  if (best < 0 || x[p * plane + i] > x[p * plane + best]) best = i;
                }
              }
              const size_t o = (p * oh + oy) * ow + ox;
              want_arg[o] = best;
              want[o] = x[p * plane + best];
            }
          }
        }
        be->MaxPool(x.data(), w, batch, y.data(), arg.data());
        INFO("kernel " << kernel << " stride " << stride << " pad " << pad);
        CHECK(y == want);
        CHECK(arg == want_arg);
      }
    }
  }
}

// The model runs a ReLU followed by an unpadded max-pool as pool then
// ReLU. A second ReLU before the pair keeps one ReLU ahead of the pool
// (relu is idempotent): both orders must give the same loss and
// gradients, bit for bit, on inputs whose windows are often all negative.
TEST_CASE("relu then max-pool gives what max-pool then relu gives", "[model]") {
  for (bool batched : {false, true}) {
    auto backend = NewCpuBackend(batched);
    auto swapped = Model::Create(Small(1, 8, 8,
                                       {LayerSpec::Conv(3, 3, 1), LayerSpec::Relu(),
                                        LayerSpec::MaxPool(2), LayerSpec::Dense(10)}),
                                 backend.get(), 4);
    auto kept = Model::Create(Small(1, 8, 8,
                                    {LayerSpec::Conv(3, 3, 1), LayerSpec::Relu(), LayerSpec::Relu(),
                                     LayerSpec::MaxPool(2), LayerSpec::Dense(10)}),
                              backend.get(), 4);
    REQUIRE(swapped.ok());
    REQUIRE(kept.ok());
    REQUIRE((*swapped)->num_params() == (*kept)->num_params());
    std::vector<float> p = RandomParams(**swapped, 9);
    Batch b = RandomBatch(**swapped, 4, 13);
    std::vector<float> g1(p.size()), g2(p.size());
    REQUIRE((*swapped)->SetParameters(p).ok());
    REQUIRE((*kept)->SetParameters(p).ok());
    auto l1 = (*swapped)->ComputeGradients(b.x.data(), b.y.data(), 4, absl::MakeSpan(g1));
    auto l2 = (*kept)->ComputeGradients(b.x.data(), b.y.data(), 4, absl::MakeSpan(g2));
    REQUIRE(l1.ok());
    REQUIRE(l2.ok());
    INFO("batched convolutions " << batched);
    CHECK(*l1 == *l2);
    CHECK(g1 == g2);
    const size_t zero = size_t(std::count(g1.begin(), g1.end(), 0.f));
    CHECK(zero < g1.size() / 2);  // gradients flowed: the check compared something
  }
}

TEST_CASE("gradient check: max-pool", "[model][gradcheck]") {
  ExpectGradientsMatch(
      Small(1, 6, 6, {LayerSpec::Conv(3, 3, 1), LayerSpec::MaxPool(2), LayerSpec::Dense(10)}), 3,
      200);
}

TEST_CASE("gradient check: lenet5 end to end (sampled)", "[model][gradcheck]") {
  auto spec = BuiltinModel("lenet5");
  REQUIRE(spec.ok());
  ExpectGradientsMatch(*spec, 2, 12);
}

TEST_CASE("built-in models have the documented layouts", "[model]") {
  auto backend = NewCpuBackend();
  struct Want {
    const char* name;
    size_t params;
    size_t tensors;
  };
  for (Want w : {Want{"mlp", 235146, 6}, Want{"mlp-wide", 5824522, 6}, Want{"lenet5", 61706, 10}}) {
    auto spec = BuiltinModel(w.name);
    REQUIRE(spec.ok());
    auto m = Model::Create(*spec, backend.get(), 4);
    REQUIRE(m.ok());
    CHECK((*m)->num_params() == w.params);
    CHECK(*Model::CountParameters(*spec) == w.params);  // without a backend
    CHECK((*m)->tensors().size() == w.tensors);
    size_t next = 0;
    for (const TensorInfo& t : (*m)->tensors()) {
      CHECK(t.offset == next);  // contiguous, in order, no gaps
      size_t prod = 1;
      for (int d : t.shape) prod *= d;
      CHECK(prod == t.size);
      next += t.size;
    }
    CHECK(next == w.params);
  }
  CHECK(BuiltinModel("resnet").status().message().find("unknown model 'resnet'") !=
        std::string::npos);
}

// UseParameters reads the caller's buffer in place on the CPU backend;
// the gradient (written straight into the caller's buffer) is the same
// as after SetParameters, whatever the buffer held before.
TEST_CASE("parameters used in place give the gradients of copied ones", "[model]") {
  std::unique_ptr<Backend> be = NewCpuBackend();
  for (const char* name : {"mlp", "lenet5"}) {
    auto m = Model::Create(*BuiltinModel(name), be.get(), 8);
    REQUIRE(m.ok());
    std::vector<float> params = (*m)->InitialParameters(5);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    std::vector<float> x(8 * 784);
    for (float& v : x) v = u(rng);
    std::vector<uint8_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<float> g1((*m)->num_params(), 7.f), g2((*m)->num_params(), -3.f);
    REQUIRE((*m)->SetParameters(params).ok());
    auto l1 = (*m)->ComputeGradients(x.data(), y.data(), 8, absl::MakeSpan(g1));
    REQUIRE((*m)->UseParameters(params).ok());
    auto l2 = (*m)->ComputeGradients(x.data(), y.data(), 8, absl::MakeSpan(g2));
    REQUIRE(l1.ok());
    REQUIRE(l2.ok());
    CHECK(*l1 == *l2);
    CHECK(g1 == g2);
    std::vector<float> back((*m)->num_params());
    REQUIRE((*m)->GetParameters(absl::MakeSpan(back)).ok());
    CHECK(back == params);
    CHECK_FALSE((*m)->UseParameters(absl::MakeConstSpan(params).subspan(1)).ok());
  }
}

// final_from: a trainer pushes what backward has finished; everything at
// or above the offset it is told must already be the final gradient.
TEST_CASE("backward says which gradients are final, last layers first", "[model]") {
  std::unique_ptr<Backend> be = NewCpuBackend();
  for (const char* name : {"mlp", "lenet5"}) {
    auto m = Model::Create(*BuiltinModel(name), be.get(), 4);
    REQUIRE(m.ok());
    std::vector<float> params = (*m)->InitialParameters(2);
    REQUIRE((*m)->UseParameters(params).ok());
    std::vector<float> x(4 * 784, 0.25f);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.9f;
    std::vector<uint8_t> y = {1, 3, 5, 7};
    std::vector<float> want((*m)->num_params());
    REQUIRE((*m)->ComputeGradients(x.data(), y.data(), 4, absl::MakeSpan(want)).ok());
    std::vector<float> got((*m)->num_params(), 0.f);
    std::vector<size_t> offsets;
    bool prefix_final = true;
    auto on_final = [&](size_t from) {
      offsets.push_back(from);
      for (size_t i = from; i < got.size(); ++i) prefix_final = prefix_final && got[i] == want[i];
    };
    REQUIRE((*m)->ComputeGradients(x.data(), y.data(), 4, absl::MakeSpan(got), on_final).ok());
    INFO(name);
    CHECK(got == want);
    CHECK(prefix_final);
    REQUIRE(offsets.size() >= 2);
    CHECK(std::is_sorted(offsets.rbegin(), offsets.rend()));
    CHECK(offsets.back() > 0);
  }
}

TEST_CASE("initial parameters are deterministic per seed", "[model]") {
  auto backend = NewCpuBackend();
  auto m = Model::Create(*BuiltinModel("mlp"), backend.get(), 1);
  REQUIRE(m.ok());
  auto a = (*m)->InitialParameters(42), b = (*m)->InitialParameters(42),
       c = (*m)->InitialParameters(43);
  CHECK(a == b);
  CHECK(a != c);
  // He-uniform bound of the first layer: sqrt(6 / 784).
  const float limit = std::sqrt(6.f / 784.f);
  CHECK(
      std::all_of(a.begin(), a.begin() + 784 * 256, [&](float v) { return std::abs(v) <= limit; }));
}

TEST_CASE("bad inputs are errors, not crashes", "[model]") {
  auto backend = NewCpuBackend();
  auto m = Model::Create(*BuiltinModel("mlp"), backend.get(), 8);
  REQUIRE(m.ok());
  Model& model = **m;
  std::vector<float> grad(model.num_params());
  Batch b = RandomBatch(model, 9, 1);
  CHECK(model.SetParameters(std::vector<float>(3)).code() == absl::StatusCode::kInvalidArgument);
  CHECK(!model.ComputeGradients(b.x.data(), b.y.data(), 9, absl::MakeSpan(grad)).ok());  // > batch
  CHECK(!model.ComputeGradients(b.x.data(), b.y.data(), 0, absl::MakeSpan(grad)).ok());
  b.y[2] = 10;
  auto bad_label = model.ComputeGradients(b.x.data(), b.y.data(), 4, absl::MakeSpan(grad));
  CHECK(bad_label.status().message().find("label 10") != std::string::npos);
  std::vector<float> short_grad(5);
  CHECK(!model.ComputeGradients(b.x.data(), b.y.data(), 2, absl::MakeSpan(short_grad)).ok());
  CHECK(!Model::Create(*BuiltinModel("mlp"), backend.get(), 0).ok());
  CHECK(!Model::Create(Small(1, 4, 4, {LayerSpec::Dense(7)}), backend.get(), 1).ok());
  CHECK(!Model::Create(Small(1, 4, 4, {LayerSpec::Conv(2, 5, 0), LayerSpec::Dense(10)}),
                       backend.get(), 1)
             .ok());
}

TEST_CASE("mlp learns Fashion-MNIST on the CPU backend", "[model][data]") {
  auto train = LoadFashionMnist("/usr/share/datasets/fashion-mnist", true);
  auto test = LoadFashionMnist("/usr/share/datasets/fashion-mnist", false);
  REQUIRE(train.ok());
  REQUIRE(test.ok());
  auto backend = NewCpuBackend();
  const int batch = 64;
  auto m = Model::Create(*BuiltinModel("mlp"), backend.get(), batch);
  REQUIRE(m.ok());
  Model& model = **m;
  std::vector<float> params = model.InitialParameters(1);
  OptimizerConfig oc;
  oc.learning_rate = 0.05f;
  OptimizerState opt(oc, params.size());
  std::vector<float> grad(params.size());
  const size_t px = train->pixels_per_image();
  std::vector<uint32_t> order = ShardIndices(train->size(), 0, 1, 5);
  std::vector<float> x(batch * px);
  std::vector<uint8_t> y(batch);
  float first_loss = 0, loss = 0;
  for (int step = 0; step < 400; ++step) {
    for (int i = 0; i < batch; ++i) {
      const uint32_t s = order[(step * batch + i) % order.size()];
      std::copy_n(train->pixels.begin() + size_t(s) * px, px, x.begin() + size_t(i) * px);
      y[i] = train->labels[s];
    }
    REQUIRE(model.SetParameters(params).ok());
    auto l = model.ComputeGradients(x.data(), y.data(), batch, absl::MakeSpan(grad));
    REQUIRE(l.ok());
    if (step == 0) first_loss = *l;
    loss = *l;
    opt.Apply(absl::MakeSpan(params), grad);
  }
  REQUIRE(model.SetParameters(params).ok());
  auto eval = model.Evaluate(test->pixels.data(), test->labels.data(), 2000);
  REQUIRE(eval.ok());
  INFO("loss " << first_loss << " -> " << loss << ", test accuracy " << eval->accuracy);
  CHECK(first_loss > 1.5f);
  CHECK(eval->accuracy > 0.75);
  CHECK(eval->samples == 2000);
}

}  // namespace
}  // namespace train
}  // namespace hetps
