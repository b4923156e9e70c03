#include <catch2/catch.hpp>
#include <vector>

#include "lib/gpu/gpu_probe.h"
#include "lib/train/backend.h"

namespace hetps {
namespace train {
namespace {

TEST_CASE("auto picks CUDA exactly when a GPU is usable, CPU otherwise", "[backend]") {
  const bool have_gpu = !gpu::Probe().devices.empty();
  auto b = CreateBackend(BackendKind::kAuto);
  REQUIRE(b.ok());
  CHECK((*b)->name() == (have_gpu ? "cuda:0" : "cpu"));
  auto cuda = CreateBackend(BackendKind::kCuda);
  CHECK(cuda.ok() == have_gpu);
  if (!have_gpu) CHECK(cuda.status().message().find("cuda:") != std::string::npos);
  CHECK((*CreateBackend(BackendKind::kCpu))->name() == "cpu");
  CHECK(!CreateBackend(BackendKind::kCuda, 99).ok());
}

// Without a GPU, this still checks the dlopen path that the GPU-tagged tests
// exercise: the CUDA toolkit is installed on every machine that builds hetps.
TEST_CASE("cuBLAS loads with dlopen and has every entry point the CUDA backend uses", "[backend]") {
  const absl::Status s = LoadCublasLibrary();
  INFO(s.ToString());
  CHECK(s.ok());
}

TEST_CASE("backend names parse", "[backend]") {
  CHECK(ParseBackendKind("auto").value() == BackendKind::kAuto);
  CHECK(ParseBackendKind("cpu").value() == BackendKind::kCpu);
  CHECK(ParseBackendKind("cuda").value() == BackendKind::kCuda);
  CHECK(ParseBackendKind("tpu").status().message().find("tpu") != std::string::npos);
}

TEST_CASE("cpu gemm honours transposes and strides", "[backend]") {
  auto b = NewCpuBackend();
  // A = [[1,2,3],[4,5,6]] (2x3), B = [[1,0],[0,1],[1,1]] (3x2): A B = [[4,5],[10,11]].
  const float a[] = {1, 2, 3, 4, 5, 6}, bm[] = {1, 0, 0, 1, 1, 1};
  float c[4] = {1, 1, 1, 1};
  b->Gemm(false, false, 2, 2, 3, 1.f, a, 3, bm, 2, 0.f, c, 2);
  CHECK(std::vector<float>(c, c + 4) == std::vector<float>{4, 5, 10, 11});
  // A^T A (3x3) first row: [17, 22, 27].
  float d[9];
  b->Gemm(true, false, 3, 3, 2, 1.f, a, 3, a, 3, 0.f, d, 3);
  CHECK(std::vector<float>(d, d + 3) == std::vector<float>{17, 22, 27});
}

TEST_CASE("the cpu backend pins nothing: its buffers are host memory already", "[backend]") {
  auto b = NewCpuBackend();
  std::vector<float> v(16, 1.f);
  HostPin pin(b.get(), v.data(), v.size() * sizeof(float));
  CHECK(!pin.pinned());
  HostPin moved = std::move(pin);
  CHECK(!moved.pinned());
}

}  // namespace
}  // namespace train
}  // namespace hetps
