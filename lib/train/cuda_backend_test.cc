// CUDA backend against the CPU backend: every primitive on random data, and
// every built-in model's loss and gradients, plus a few optimizer steps.
// Tagged "gpu": runs only where a GPU is usable. docs/build.md records where
// and when it last ran.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "lib/gpu/gpu_probe.h"
#include "lib/train/model.h"
#include "lib/train/optimizer.h"

namespace hetps {
namespace train {
namespace {

std::unique_ptr<Backend> Cuda() {
  auto b = CreateBackend(BackendKind::kCuda);
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  return std::move(*b);
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// max |a - b| / max(1, max |b|)
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

// Runs `op` on both backends over the same inputs; returns both outputs.
struct Pair {
  std::unique_ptr<Backend> cpu = NewCpuBackend();
  std::unique_ptr<Backend> gpu = Cuda();
  std::vector<float*> gpu_bufs;
  ~Pair() {
    for (float* p : gpu_bufs) gpu->Free(p);
  }
  float* Up(const std::vector<float>& host) {
    float* p = *gpu->Alloc(host.size());
    gpu->CopyToDevice(p, host.data(), host.size());
    gpu_bufs.push_back(p);
    return p;
  }
  std::vector<float> Down(const float* p, size_t n) {
    std::vector<float> h(n);
    REQUIRE(gpu->CopyToHost(h.data(), p, n).ok());
    return h;
  }
};

TEST_CASE("device is reported", "[cuda]") {
  auto probe = gpu::Probe();
  REQUIRE(!probe.devices.empty());
  WARN("GPU: " << probe.devices[0].name << " (sm_" << probe.devices[0].compute_capability << ")");
  CHECK(Cuda()->name() == "cuda:0");
}

TEST_CASE("pinned host buffers copy both ways and unpin", "[cuda]") {
  auto gpu = Cuda();
  const std::vector<float> data = Random(1 << 20, 7);
  std::vector<float> up = data, down(data.size(), 0.f);
  float* dev = *gpu->Alloc(data.size());
  {
    HostPin a(gpu.get(), up.data(), up.size() * sizeof(float));
    HostPin b(gpu.get(), down.data(), down.size() * sizeof(float));
    CHECK(a.pinned());
    CHECK(b.pinned());
    // Pinning the same memory twice is refused, and is not an error of
    // the backend's work.
    HostPin again(gpu.get(), up.data(), up.size() * sizeof(float));
    CHECK(!again.pinned());
    HostPin moved = std::move(b);
    CHECK(moved.pinned());
    CHECK(!b.pinned());
    gpu->CopyToDevice(dev, up.data(), up.size());
    REQUIRE(gpu->CopyToHost(down.data(), dev, down.size()).ok());
    CHECK(down == data);
  }
  // Unpinned again: the same memory pins afresh, and pageable copies work.
  HostPin c(gpu.get(), up.data(), up.size() * sizeof(float));
  CHECK(c.pinned());
  std::vector<float> pageable(data.size(), 0.f);
  REQUIRE(gpu->CopyToHost(pageable.data(), dev, pageable.size()).ok());
  CHECK(pageable == data);
  CHECK(gpu->Sync().ok());
  gpu->Free(dev);
}

TEST_CASE("cuda primitives match cpu", "[cuda]") {
  Pair p;
  SECTION("gemm, all transposes") {
    const int m = 33, n = 17, k = 65;
    auto a = Random(m * k, 1), b = Random(k * n, 2);
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        std::vector<float> c_cpu(m * n, 0.5f);
        p.cpu->Gemm(ta, tb, m, n, k, 1.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.25f,
                    c_cpu.data(), n);
        float* c = p.Up(std::vector<float>(m * n, 0.5f));
        p.gpu->Gemm(ta, tb, m, n, k, 1.5f, p.Up(a), ta ? m : k, p.Up(b), tb ? k : n, 0.25f, c, n);
        CHECK(RelErr(p.Down(c, m * n), c_cpu) < 1e-5);
      }
    }
  }
  SECTION("strided batched gemm, a shared operand") {
    const int m = 6, n = 25, k = 19, batch = 4;
    auto a = Random(m * k, 11), b = Random(size_t(batch) * k * n, 12);
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<float> c_cpu(size_t(batch) * m * n, 0.5f);
      p.cpu->GemmStridedBatched(false, tb, m, n, k, 1.5f, a.data(), k, 0, b.data(), tb ? k : n,
                                size_t(k) * n, 0.25f, c_cpu.data(), n, size_t(m) * n, batch);
      float* c = p.Up(std::vector<float>(c_cpu.size(), 0.5f));
      p.gpu->GemmStridedBatched(false, tb, m, n, k, 1.5f, p.Up(a), k, 0, p.Up(b), tb ? k : n,
                                size_t(k) * n, 0.25f, c, n, size_t(m) * n, batch);
      CHECK(RelErr(p.Down(c, c_cpu.size()), c_cpu) < 1e-5);
    }
  }
  SECTION("bias, bias gradient, relu") {
    const int outer = 5, ch = 7, inner = 13;
    auto y = Random(outer * ch * inner, 3), bias = Random(ch, 4);
    auto y_cpu = y;
    p.cpu->AddBias(y_cpu.data(), bias.data(), outer, ch, inner);
    float* yg = p.Up(y);
    p.gpu->AddBias(yg, p.Up(bias), outer, ch, inner);
    CHECK(RelErr(p.Down(yg, y.size()), y_cpu) < 1e-6);
    std::vector<float> db_cpu(ch, 0.f);
    p.cpu->BiasGrad(y.data(), db_cpu.data(), outer, ch, inner);
    float* dbg = p.Up(std::vector<float>(ch, 0.f));
    p.gpu->BiasGrad(p.Up(y), dbg, outer, ch, inner);
    CHECK(RelErr(p.Down(dbg, ch), db_cpu) < 1e-5);
    std::vector<float> r_cpu(y.size()), dr_cpu(y.size());
    p.cpu->Relu(y.data(), r_cpu.data(), y.size());
    p.cpu->ReluBackward(r_cpu.data(), y_cpu.data(), dr_cpu.data(), y.size());
    float* rg = p.Up(y);
    p.gpu->Relu(rg, rg, y.size());
    float* drg = p.Up(y_cpu);
    p.gpu->ReluBackward(rg, drg, drg, y.size());
    CHECK(p.Down(rg, y.size()) == r_cpu);
    CHECK(p.Down(drg, y.size()) == dr_cpu);
  }
  SECTION("im2col, col2im, max-pool") {
    Window2d w;
    w.channels = 3;
    w.height = 9;
    w.width = 8;
    w.kernel = 3;
    w.stride = 2;
    w.pad = 1;
    const int samples = 3;  // several in one launch
    const size_t cols = size_t(samples) * w.channels * 9 * w.out_height() * w.out_width();
    auto x = Random(size_t(samples) * w.channels * w.height * w.width, 5);
    std::vector<float> col_cpu(cols);
    p.cpu->Im2Col(x.data(), w, samples, col_cpu.data());
    float* colg = p.Up(std::vector<float>(cols));
    p.gpu->Im2Col(p.Up(x), w, samples, colg);
    CHECK(p.Down(colg, cols) == col_cpu);
    std::vector<float> dx_cpu(x.size(), 0.f);
    p.cpu->Col2Im(col_cpu.data(), w, samples, dx_cpu.data());
    float* dxg = p.Up(std::vector<float>(x.size(), 0.f));
    p.gpu->Col2Im(colg, w, samples, dxg);
    CHECK(RelErr(p.Down(dxg, x.size()), dx_cpu) < 1e-6);

    Window2d pool = w;
    pool.kernel = 2;
    pool.stride = 2;
    pool.pad = 0;
    const int batch = 2;
    auto xb = Random(size_t(batch) * w.channels * w.height * w.width, 6);
    const size_t outs = size_t(batch) * pool.channels * pool.out_height() * pool.out_width();
    std::vector<float> y_cpu(outs);
    std::vector<int32_t> am_cpu(outs);
    p.cpu->MaxPool(xb.data(), pool, batch, y_cpu.data(), am_cpu.data());
    float* yg = p.Up(std::vector<float>(outs));
    int32_t* amg = *p.gpu->AllocInt(outs);
    p.gpu->MaxPool(p.Up(xb), pool, batch, yg, amg);
    CHECK(p.Down(yg, outs) == y_cpu);
    auto dy = Random(outs, 7);
    std::vector<float> dxb_cpu(xb.size());
    p.cpu->MaxPoolBackward(dy.data(), am_cpu.data(), pool, batch, dxb_cpu.data());
    float* dxbg = p.Up(std::vector<float>(xb.size(), 9.f));  // must be zeroed by the op
    p.gpu->MaxPoolBackward(p.Up(dy), amg, pool, batch, dxbg);
    CHECK(p.Down(dxbg, xb.size()) == dxb_cpu);
    p.gpu->Free(amg);
  }
  SECTION("softmax cross-entropy") {
    const int batch = 37, classes = 10;
    auto z = Random(batch * classes, 8);
    for (auto& v : z) v *= 8.f;
    std::vector<int32_t> labels(batch);
    for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % classes;
    std::vector<float> loss_cpu(batch), d_cpu(z.size());
    p.cpu->SoftmaxCrossEntropy(z.data(), labels.data(), batch, classes, 1.f / batch,
                               loss_cpu.data(), d_cpu.data());
    int32_t* lg = *p.gpu->AllocInt(batch);
    p.gpu->CopyIntToDevice(lg, labels.data(), batch);
    float* lossg = p.Up(std::vector<float>(batch));
    float* dg = p.Up(std::vector<float>(z.size()));
    p.gpu->SoftmaxCrossEntropy(p.Up(z), lg, batch, classes, 1.f / batch, lossg, dg);
    CHECK(RelErr(p.Down(lossg, batch), loss_cpu) < 1e-5);
    CHECK(RelErr(p.Down(dg, z.size()), d_cpu) < 1e-5);
    p.gpu->Free(lg);
  }
  REQUIRE(p.gpu->Sync().ok());
}

TEST_CASE("cuda models match cpu: loss, gradients, and 5 SGD steps", "[cuda]") {
  for (const std::string& name : BuiltinModelNames()) {
    INFO(name);
    auto spec = *BuiltinModel(name);
    const int batch = 32;
    auto cpu = NewCpuBackend();
    auto gpu = Cuda();
    auto mc = *Model::Create(spec, cpu.get(), batch);
    auto mg = *Model::Create(spec, gpu.get(), batch);
    auto x = Random(batch * mc->input_size(), 10);
    for (auto& v : x) v = 0.5f * (v + 1.f);  // pixel-like [0, 1]
    std::vector<uint8_t> y(batch);
    for (int i = 0; i < batch; ++i) y[i] = static_cast<uint8_t>((i * 3) % 10);
    std::vector<float> pc = mc->InitialParameters(3), pg = pc;
    std::vector<float> gc(pc.size()), gg(pc.size());
    OptimizerConfig oc;
    oc.learning_rate = 0.05f;
    OptimizerState oc_cpu(oc, pc.size()), oc_gpu(oc, pc.size());
    for (int step = 0; step < 5; ++step) {
      REQUIRE(mc->SetParameters(pc).ok());
      REQUIRE(mg->SetParameters(pg).ok());
      auto lc = mc->ComputeGradients(x.data(), y.data(), batch, absl::MakeSpan(gc));
      auto lg = mg->ComputeGradients(x.data(), y.data(), batch, absl::MakeSpan(gg));
      REQUIRE(lc.ok());
      INFO(lg.status().ToString());
      REQUIRE(lg.ok());
      CHECK(std::abs(*lc - *lg) <= 1e-5 * std::max(1.f, std::abs(*lc)));
      CHECK(RelErr(gg, gc) < 1e-4);
      oc_cpu.Apply(absl::MakeSpan(pc), gc);
      oc_gpu.Apply(absl::MakeSpan(pg), gg);
    }
    CHECK(RelErr(pg, pc) < 1e-4);
    auto ec = mc->Evaluate(x.data(), y.data(), batch);
    auto eg = mg->Evaluate(x.data(), y.data(), batch);
    REQUIRE(ec.ok());
    REQUIRE(eg.ok());
    CHECK(ec->accuracy == eg->accuracy);
  }
}

}  // namespace
}  // namespace train
}  // namespace hetps
