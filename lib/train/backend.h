// Compute backend for training: the handful of dense kernels the models need
// (row-major sgemm, bias, ReLU, im2col/col2im, max-pool, softmax
// cross-entropy), over buffers that live on the backend's device.
//
// Two implementations: CpuBackend (OpenBLAS sgemm plus vectorizable loops) and
// CudaBackend (cuBLAS plus kernels). CreateBackend(kAuto) picks CUDA when a
// GPU is usable at run time, else CPU, so one binary serves both machines.
//
// Error policy: kernels are fire-and-forget (the CUDA ones are asynchronous);
// the first failure is sticky and reported by the next Sync(), CopyToHost()
// or Alloc(). Callers check at the end of each step. Shapes are internal
// invariants (the model builds them), not untrusted input.
//
// A backend is used by one thread at a time.
#ifndef HETPS_LIB_TRAIN_BACKEND_H_
#define HETPS_LIB_TRAIN_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hetps {
namespace train {

// Geometry of a 2-D convolution or pooling window over one NCHW sample.
struct Window2d {
  int channels = 0;
  int height = 0;
  int width = 0;
  int kernel = 0;  // square kernel
  int stride = 1;
  int pad = 0;
  int out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // True when "device" buffers are host memory the model may read and
  // write through host pointers (the CPU backend): no copies needed.
  virtual bool host_memory() const { return false; }
  // True when a convolution should run over the whole batch in a few large
  // calls (a GPU, where each call costs a launch of several microseconds
  // and small ones leave it idle); false to run it sample by sample, whose
  // columns stay in a CPU's caches between the calls that use them.
  virtual bool batched_conv() const { return false; }

  // Device memory. Buffers are owned by the caller and released with Free.
  virtual absl::StatusOr<float*> Alloc(size_t floats) = 0;
  virtual absl::StatusOr<int32_t*> AllocInt(size_t ints) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyToDevice(float* dst, const float* host, size_t floats) = 0;
  virtual void CopyIntToDevice(int32_t* dst, const int32_t* host, size_t ints) = 0;
  // Blocks until the copy is done; returns the sticky error, if any.
  virtual absl::Status CopyToHost(float* host, const float* src, size_t floats) = 0;
  virtual void Fill(float* p, size_t floats, float value) = 0;
  // Page-locks [p, p + bytes) of host memory so that copies to and from it
  // go straight to the device (CUDA: cudaHostRegister; from pageable
  // memory the driver copies through a staging buffer of its own, which
  // took most of a large model's step). False where that is not done (the
  // CPU backend, or the driver refused): copies still work, only slower.
  // Use through HostPin.
  virtual bool PinHost(void* p, size_t bytes) { return false; }
  virtual void UnpinHost(void* p) {}
  // Waits for queued work; returns the sticky error, if any.
  virtual absl::Status Sync() = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major; op(A) is
  // m x k, op(B) is k x n; lda/ldb/ldc are the row strides of A, B, C as stored.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) = 0;
  // `batch` independent Gemm calls; call i uses a + i*stride_a, b + i*stride_b
  // and c + i*stride_c (a stride of 0 shares that operand). The C matrices
  // must not overlap.
  virtual void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                  const float* a, int lda, size_t stride_a, const float* b, int ldb,
                                  size_t stride_b, float beta, float* c, int ldc, size_t stride_c,
                                  int batch) = 0;

  // y[o][c][i] += bias[c] for o < outer, c < channels, i < inner.
  virtual void AddBias(float* y, const float* bias, int outer, int channels, int inner) = 0;
  // dbias[c] += sum over o, i of dy[o][c][i].
  virtual void BiasGrad(const float* dy, float* dbias, int outer, int channels, int inner) = 0;

  // y = max(x, 0) (may alias); dx = dy * (y > 0) (dx may alias dy).
  virtual void Relu(const float* x, float* y, size_t n) = 0;
  virtual void ReluBackward(const float* y, const float* dy, float* dx, size_t n) = 0;

  // Per sample: col[(c*k + ky)*k + kx][oy*OW + ox] = x[c][oy*s - p + ky][ox*s - p + kx]
  // (zero outside the image), for `batch` consecutive NCHW samples into as
  // many consecutive column matrices. Col2Im accumulates the adjoint into
  // dx, which the caller zeroes first.
  virtual void Im2Col(const float* x, const Window2d& w, int batch, float* col) = 0;
  virtual void Col2Im(const float* col, const Window2d& w, int batch, float* dx) = 0;

  // Max-pool over `batch` NCHW samples; argmax (per output element, index
  // into that sample's channel plane) drives the backward scatter into dx,
  // which MaxPoolBackward zeroes first.
  virtual void MaxPool(const float* x, const Window2d& w, int batch, float* y, int32_t* argmax) = 0;
  virtual void MaxPoolBackward(const float* dy, const int32_t* argmax, const Window2d& w, int batch,
                               float* dx) = 0;

  // Softmax cross-entropy over `batch` rows of `classes` logits. Writes the
  // per-row loss to row_loss[batch] and dlogits = (softmax - onehot) * scale.
  // Labels outside [0, classes) are an internal error (validated at load).
  virtual void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                                   int classes, float scale, float* row_loss, float* dlogits) = 0;
};

// Keeps host memory page-locked for a backend's copies while it lives
// (Backend::PinHost). The memory must neither move nor be freed before
// it, and the backend must outlive it.
class HostPin {
 public:
  HostPin() = default;
  HostPin(Backend* backend, void* p, size_t bytes)
      : backend_(backend), p_(backend->PinHost(p, bytes) ? p : nullptr) {}
  HostPin(HostPin&& o) noexcept : backend_(o.backend_), p_(std::exchange(o.p_, nullptr)) {}
  HostPin& operator=(HostPin&& o) noexcept {
    if (this != &o) {
      Release();
      backend_ = o.backend_;
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  HostPin(const HostPin&) = delete;
  HostPin& operator=(const HostPin&) = delete;
  ~HostPin() { Release(); }
  bool pinned() const { return p_ != nullptr; }

 private:
  void Release() {
    if (p_ != nullptr) backend_->UnpinHost(std::exchange(p_, nullptr));
  }
  Backend* backend_ = nullptr;
  void* p_ = nullptr;
};

enum class BackendKind { kAuto, kCpu, kCuda };

absl::StatusOr<BackendKind> ParseBackendKind(const std::string& s);

// kCpu always works; kCuda fails with a clear error where no usable GPU
// exists; kAuto picks CUDA when usable, else CPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device = 0);

// batched_conv: run convolutions over the whole batch as the GPU does
// (Backend::batched_conv) rather than sample by sample, so that path is
// checked on machines without a GPU too.
std::unique_ptr<Backend> NewCpuBackend(bool batched_conv = false);

// Loads cuBLAS with dlopen and resolves every entry point the CUDA backend
// uses, without touching a GPU (the CUDA backend does this on creation).
// OK, or why it cannot be loaded.
absl::Status LoadCublasLibrary();

// Threads OpenBLAS may use (process-wide; 0 = one per core). Several
// trainers sharing a host should split the cores rather than oversubscribe.
void SetCpuThreads(int threads);

}  // namespace train
}  // namespace hetps

#endif  // HETPS_LIB_TRAIN_BACKEND_H_
