// model_bench: one trainer's compute per iteration (UseParameters, forward,
// backward, as BspWorker runs them) for each built-in model, batch 64,
// synthetic inputs: the part of an iteration the network cannot hide. On
// the CPU backend with one BLAS thread by default; --backend cuda times the
// GPU path, parameters in and gradients out through host memory as the
// trainer moves them. bench/ddp_fashion.py --compute-only times PyTorch's
// forward, backward and step on the same models for comparison.
//
//   bazel run --config=opt //bench:model_bench -- [--iterations 200]
//       [--backend cpu|cuda|auto] [--model NAME] [--pageable]
// --pageable leaves the host buffers pageable (the trainer page-locks
// them: Backend::PinHost), to see what that is worth.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "lib/train/backend.h"
#include "lib/train/model.h"

int main(int argc, char** argv) {
  int iterations = 200;
  std::string backend_name = "cpu";
  std::string only;  // one model, or every builtin one
  bool pin = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      backend_name = argv[++i];
    } else if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--pageable") == 0) {
      pin = false;
    } else {
      std::fprintf(stderr,
                   "usage: model_bench [--iterations N] [--backend cpu|cuda|auto] [--model NAME] "
                   "[--pageable]\n");
      return 2;
    }
  }
  if (iterations < 1) iterations = 1;
  auto kind = hetps::train::ParseBackendKind(backend_name);
  if (!kind.ok()) {
    std::fprintf(stderr, "model_bench: %s\n", std::string(kind.status().message()).c_str());
    return 2;
  }
  hetps::train::SetCpuThreads(1);
  auto created = hetps::train::CreateBackend(*kind);
  if (!created.ok()) {
    std::fprintf(stderr, "model_bench: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<hetps::train::Backend> backend = std::move(*created);
  std::printf("backend %s\n", backend->name().c_str());
  const int batch = 64;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  std::vector<float> x(size_t(batch) * 784);
  for (float& v : x) v = pixel(rng);
  std::vector<uint8_t> y(batch);
  for (uint8_t& v : y) v = uint8_t(rng() % 10);
  std::printf("%-10s %12s %14s\n", "model", "params", "ms/iteration");
  std::vector<std::string> names = hetps::train::BuiltinModelNames();
  if (!only.empty()) names = {only};
  for (const std::string& name : names) {
    auto spec = hetps::train::BuiltinModel(name);
    if (!spec.ok()) {
      std::fprintf(stderr, "model_bench: %s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    auto model = hetps::train::Model::Create(*spec, backend.get(), batch);
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(model.status().message()).c_str());
      return 1;
    }
    std::vector<float> params = (*model)->InitialParameters(1);
    std::vector<float> grad(params.size());
    // As the trainer does (BspWorker): its buffers are page-locked.
    hetps::train::HostPin pin_params, pin_grad;
    if (pin) {
      pin_params = {backend.get(), params.data(), params.size() * sizeof(float)};
      pin_grad = {backend.get(), grad.data(), grad.size() * sizeof(float)};
    }
    const int n = name == "mlp-wide" ? std::max(1, iterations / 8) : iterations;
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (int it = 0; it < n; ++it) {
        if (!(*model)->UseParameters(params).ok()) return 1;
        if (!(*model)->ComputeGradients(x.data(), y.data(), batch, absl::MakeSpan(grad)).ok()) {
          return 1;
        }
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count() /
          n;
      best = std::min(best, ms);
    }
    std::printf("%-10s %12zu %14.3f\n", name.c_str(), params.size(), best);
  }
  return 0;
}
