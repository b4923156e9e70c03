// CUDA backend: cuBLAS for sgemm, cuda_kernels.cu for the rest, one stream.
// cudaError_t / cublasStatus_t become absl::Status here and nowhere else.
//
// cuBLAS is loaded with dlopen when the first CudaBackend is created, not
// linked: libcublasLt carries ~94 KB of static TLS, and a library linked at
// start-up adds its static TLS to every thread's stack, so threads created
// with small explicit stacks fail (civetweb's, behind the /metrics server,
// use 100 KB and then cannot start: "Cannot create first worker thread").
// Loaded later, its TLS is dynamic and costs other threads nothing.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/train/backend.h"
#include "lib/train/cuda_kernels.h"

namespace hetps {
namespace train {
namespace {

// The cuBLAS entry points the backend uses, resolved at run time.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
};

absl::StatusOr<const CublasApi*> LoadCublas() {
  static const absl::StatusOr<const CublasApi*> api = []() -> absl::StatusOr<const CublasApi*> {
    void* h = nullptr;
    std::string errors;
    for (const char* name :
         {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", dlerror());
    }
    if (h == nullptr)
      return absl::UnavailableError(absl::StrCat("cuda: cannot load cuBLAS: ", errors));
    auto* a = new CublasApi;
    bool ok = true;
    auto sym = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(h, name));
      ok = ok && *fn != nullptr;
    };
    sym(&a->create, "cublasCreate_v2");
    sym(&a->destroy, "cublasDestroy_v2");
    sym(&a->set_stream, "cublasSetStream_v2");
    sym(&a->set_math_mode, "cublasSetMathMode");
    sym(&a->sgemm, "cublasSgemm_v2");
    sym(&a->sgemm_strided_batched, "cublasSgemmStridedBatched");
    if (!ok) return absl::UnavailableError("cuda: cuBLAS lacks an expected entry point");
    return a;
  }();
  return api;
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(int device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return CudaStatus(e, "no usable GPU (cudaGetDeviceCount)");
    if (device < 0 || device >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda: device ", device, " requested but ", count, " GPU(s) present"));
    }
    absl::StatusOr<const CublasApi*> api = LoadCublas();
    if (!api.ok()) return api.status();
    auto b = std::unique_ptr<CudaBackend>(new CudaBackend(device));
    b->api_ = *api;
    if (auto s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
    if (auto s = CudaStatus(cudaStreamCreate(&b->stream_), "cudaStreamCreate"); !s.ok()) return s;
    if (b->api_->create(&b->blas_) != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cuda: cublasCreate failed");
    }
    b->api_->set_stream(b->blas_, b->stream_);
    // Strict FP32 (no TF32): the CPU and CUDA backends must agree closely.
    b->api_->set_math_mode(b->blas_, CUBLAS_PEDANTIC_MATH);
    return std::unique_ptr<Backend>(std::move(b));
  }

  ~CudaBackend() override {
    if (blas_ != nullptr) api_->destroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }
  bool batched_conv() const override { return true; }

  absl::StatusOr<float*> Alloc(size_t floats) override {
    if (!sticky_.ok()) return sticky_;
    void* p = nullptr;
    if (auto s =
            CudaStatus(cudaMalloc(&p, std::max<size_t>(1, floats) * sizeof(float)), "cudaMalloc");
        !s.ok())
      return s;
    return static_cast<float*>(p);
  }
  absl::StatusOr<int32_t*> AllocInt(size_t ints) override {
    if (!sticky_.ok()) return sticky_;
    void* p = nullptr;
    if (auto s =
            CudaStatus(cudaMalloc(&p, std::max<size_t>(1, ints) * sizeof(int32_t)), "cudaMalloc");
        !s.ok())
      return s;
    return static_cast<int32_t*>(p);
  }
  void Free(void* p) override {
    if (p != nullptr) cudaFree(p);
  }
  void CopyToDevice(float* dst, const float* host, size_t floats) override {
    Note(cudaMemcpyAsync(dst, host, floats * sizeof(float), cudaMemcpyHostToDevice, stream_),
         "copy to device");
    // The host buffer may be reused as soon as we return.
    Note(cudaStreamSynchronize(stream_), "copy to device");
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* host, size_t ints) override {
    Note(cudaMemcpyAsync(dst, host, ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
         "copy to device");
    Note(cudaStreamSynchronize(stream_), "copy to device");
  }
  absl::Status CopyToHost(float* host, const float* src, size_t floats) override {
    Note(cudaMemcpyAsync(host, src, floats * sizeof(float), cudaMemcpyDeviceToHost, stream_),
         "copy to host");
    return Sync();
  }
  bool PinHost(void* p, size_t bytes) override {
    if (p == nullptr || bytes == 0) return false;
    // A refusal is not the backend's error: keep any earlier one sticky,
    // then clear the runtime's last error, which Sync() would report.
    Note(cudaPeekAtLastError(), "kernel launch");
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
  void UnpinHost(void* p) override {
    Note(cudaPeekAtLastError(), "kernel launch");
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  }
  void Fill(float* p, size_t floats, float value) override {
    cuda::Fill(p, floats, value, stream_);
  }
  absl::Status Sync() override {
    Note(cudaStreamSynchronize(stream_), "stream synchronize");
    Note(cudaGetLastError(), "kernel launch");
    return sticky_;
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
    // same buffers, operands swapped.
    const cublasStatus_t s =
        api_->sgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc);
    if (s != CUBLAS_STATUS_SUCCESS && sticky_.ok()) {
      sticky_ = absl::InternalError(absl::StrCat("cuda: cublasSgemm failed with status ", s));
    }
  }
  void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, size_t stride_a, const float* b, int ldb,
                          size_t stride_b, float beta, float* c, int ldc, size_t stride_c,
                          int batch) override {
    // Operands swapped as in Gemm.
    const cublasStatus_t s = api_->sgemm_strided_batched(
        blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
        &alpha, b, ldb, static_cast<long long>(stride_b), a, lda, static_cast<long long>(stride_a),
        &beta, c, ldc, static_cast<long long>(stride_c), batch);
    if (s != CUBLAS_STATUS_SUCCESS && sticky_.ok()) {
      sticky_ = absl::InternalError(
          absl::StrCat("cuda: cublasSgemmStridedBatched failed with status ", s));
    }
  }
  void AddBias(float* y, const float* bias, int outer, int channels, int inner) override {
    cuda::AddBias(y, bias, outer, channels, inner, stream_);
  }
  void BiasGrad(const float* dy, float* dbias, int outer, int channels, int inner) override {
    cuda::BiasGrad(dy, dbias, outer, channels, inner, stream_);
  }
  void Relu(const float* x, float* y, size_t n) override { cuda::Relu(x, y, n, stream_); }
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n) override {
    cuda::ReluBackward(y, dy, dx, n, stream_);
  }
  void Im2Col(const float* x, const Window2d& w, int batch, float* col) override {
    cuda::Im2Col(x, w.channels, w.height, w.width, w.kernel, w.stride, w.pad, batch, col, stream_);
  }
  void Col2Im(const float* col, const Window2d& w, int batch, float* dx) override {
    cuda::Col2Im(col, w.channels, w.height, w.width, w.kernel, w.stride, w.pad, batch, dx, stream_);
  }
  void MaxPool(const float* x, const Window2d& w, int batch, float* y, int32_t* argmax) override {
    cuda::MaxPool(x, batch * w.channels, w.height, w.width, w.kernel, w.stride, w.pad, y, argmax,
                  stream_);
  }
  void MaxPoolBackward(const float* dy, const int32_t* argmax, const Window2d& w, int batch,
                       float* dx) override {
    cuda::MaxPoolBackward(dy, argmax, batch * w.channels, w.height, w.width,
                          w.out_height() * w.out_width(), dx, stream_);
  }
  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                           float scale, float* row_loss, float* dlogits) override {
    cuda::SoftmaxCrossEntropy(logits, labels, batch, classes, scale, row_loss, dlogits, stream_);
  }

 private:
  explicit CudaBackend(int device) : device_(device) {}

  void Note(cudaError_t e, const char* what) {
    if (e != cudaSuccess && sticky_.ok()) sticky_ = CudaStatus(e, what);
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  const CublasApi* api_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  absl::Status sticky_;
};

}  // namespace

absl::Status LoadCublasLibrary() { return LoadCublas().status(); }

absl::StatusOr<BackendKind> ParseBackendKind(const std::string& s) {
  if (s == "auto") return BackendKind::kAuto;
  if (s == "cpu") return BackendKind::kCpu;
  if (s == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", s, "' (expected auto, cpu or cuda)"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device) {
  switch (kind) {
    case BackendKind::kCpu:
      return NewCpuBackend();
    case BackendKind::kCuda:
      return CudaBackend::Create(device);
    case BackendKind::kAuto: {
      auto cuda = CudaBackend::Create(device);
      if (cuda.ok()) return cuda;
      return NewCpuBackend();
    }
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

}  // namespace train
}  // namespace hetps
