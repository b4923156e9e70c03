// CPU backend: OpenBLAS sgemm for the matrix products (where nearly all the
// flops are), plain loops the compiler vectorizes for the rest.
//
// OpenBLAS is loaded with dlopen on first use, not linked: a library linked
// at start-up adds its static TLS (OpenBLAS: 60 KB) to every thread's stack,
// and civetweb's /metrics threads have fixed 100 KB stacks; with OpenBLAS
// linked, a scrape overflowed them (SIGSEGV in civetweb-worker). See also
// cuda_backend.cc.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/train/backend.h"

namespace hetps {
namespace train {
namespace {

// The CBLAS ABI (LP64): enums are passed as int.
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;
using SgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);
using SetThreadsFn = void (*)(int);

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_num_threads = nullptr;
};

// Loaded once; a machine without OpenBLAS cannot train on CPU at all, so
// that is a clear fatal error rather than a status every caller must carry.
const OpenBlas& Blas() {
  static const OpenBlas blas = [] {
    OpenBlas b;
    std::string errors;
    void* h = nullptr;
    for (const char* name :
         {"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", dlerror());
    }
    if (h != nullptr) {
      b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      b.set_num_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
    }
    if (b.sgemm == nullptr || b.set_num_threads == nullptr) {
      std::fprintf(
          stderr,
          "hetps: cannot load OpenBLAS (%s); install Debian's libopenblas0 "
          "(tools/bootstrap.sh does)\n",
          h == nullptr ? errors.c_str() : "cblas_sgemm or openblas_set_num_threads missing");
      std::abort();
    }
    return b;
  }();
  return blas;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool batched_conv) : batched_conv_(batched_conv) {}
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  bool batched_conv() const override { return batched_conv_; }

  absl::StatusOr<float*> Alloc(size_t floats) override {
    void* p = AlignedAlloc(floats * sizeof(float));
    if (p == nullptr)
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", floats, " floats"));
    return static_cast<float*>(p);
  }
  absl::StatusOr<int32_t*> AllocInt(size_t ints) override {
    void* p = AlignedAlloc(ints * sizeof(int32_t));
    if (p == nullptr)
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", ints, " ints"));
    return static_cast<int32_t*>(p);
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(float* dst, const float* host, size_t floats) override {
    if (floats > 0) std::memcpy(dst, host, floats * sizeof(float));
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* host, size_t ints) override {
    if (ints > 0) std::memcpy(dst, host, ints * sizeof(int32_t));
  }
  absl::Status CopyToHost(float* host, const float* src, size_t floats) override {
    if (floats > 0) std::memcpy(host, src, floats * sizeof(float));
    return absl::OkStatus();
  }
  void Fill(float* p, size_t floats, float value) override { std::fill(p, p + floats, value); }
  absl::Status Sync() override { return absl::OkStatus(); }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    Blas().sgemm(kCblasRowMajor, trans_a ? kCblasTrans : kCblasNoTrans,
                 trans_b ? kCblasTrans : kCblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc);
  }
  void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, size_t stride_a, const float* b, int ldb,
                          size_t stride_b, float beta, float* c, int ldc, size_t stride_c,
                          int batch) override {
    for (int i = 0; i < batch; ++i) {
      Gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
           c + i * stride_c, ldc);
    }
  }

  void AddBias(float* y, const float* bias, int outer, int channels, int inner) override {
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        float* row = y + (static_cast<size_t>(o) * channels + c) * inner;
        const float b = bias[c];
        for (int i = 0; i < inner; ++i) row[i] += b;
      }
    }
  }
  void BiasGrad(const float* dy, float* dbias, int outer, int channels, int inner) override {
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        const float* row = dy + (static_cast<size_t>(o) * channels + c) * inner;
        // Eight partial sums: a single float accumulator cannot be
        // vectorized without reassociation.
        float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int i = 0;
        for (; i + 8 <= inner; i += 8) {
          for (int k = 0; k < 8; ++k) part[k] += row[i + k];
        }
        float s = 0.f;
        for (; i < inner; ++i) s += row[i];
        for (int k = 0; k < 8; ++k) s += part[k];
        dbias[c] += s;
      }
    }
  }

  // The buffers never overlap (the model's activations): __restrict lets
  // the compiler vectorize without a run-time overlap check.
  void Relu(const float* x, float* y, size_t n) override {
    const float* __restrict in = x;
    float* __restrict out = y;
    for (size_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
  }
  void ReluBackward(const float* y, const float* dy, float* dx, size_t n) override {
    const float* __restrict a = y;
    const float* __restrict g = dy;
    float* __restrict out = dx;
    for (size_t i = 0; i < n; ++i) out[i] = a[i] > 0.f ? g[i] : 0.f;
  }

  // For one kernel offset (ky, kx) the output columns that read inside the
  // input row are the range [lo, hi): the loops below copy (or add) that
  // range without a test per element, which the compiler vectorizes.
  static void InsideRange(const Window2d& w, int kx, int* lo, int* hi) {
    const int ow = w.out_width();
    // ix = ox * stride - pad + kx must lie in [0, width).
    int a = w.pad - kx;  // ox * stride >= a
    *lo = a <= 0 ? 0 : (a + w.stride - 1) / w.stride;
    const int b = w.width + w.pad - kx;  // ox * stride < b
    *hi = b <= 0 ? 0 : std::min(ow, (b + w.stride - 1) / w.stride);
    if (*hi < *lo) *hi = *lo;
  }

  void Im2Col(const float* x, const Window2d& w, int batch, float* col) override {
    const size_t in = static_cast<size_t>(w.channels) * w.height * w.width;
    const size_t cols =
        static_cast<size_t>(w.channels) * w.kernel * w.kernel * w.out_height() * w.out_width();
    for (int s = 0; s < batch; ++s) Im2ColOne(x + s * in, w, col + s * cols);
  }
  void Col2Im(const float* col, const Window2d& w, int batch, float* dx) override {
    const size_t in = static_cast<size_t>(w.channels) * w.height * w.width;
    const size_t cols =
        static_cast<size_t>(w.channels) * w.kernel * w.kernel * w.out_height() * w.out_width();
    for (int s = 0; s < batch; ++s) Col2ImOne(col + s * cols, w, dx + s * in);
  }

  static void Im2ColOne(const float* x, const Window2d& w, float* col) {
    const int oh = w.out_height(), ow = w.out_width();
    for (int c = 0; c < w.channels; ++c) {
      const float* plane = x + static_cast<size_t>(c) * w.height * w.width;
      for (int ky = 0; ky < w.kernel; ++ky) {
        for (int kx = 0; kx < w.kernel; ++kx) {
          float* out = col + ((static_cast<size_t>(c) * w.kernel + ky) * w.kernel + kx) * oh * ow;
          int lo, hi;
          InsideRange(w, kx, &lo, &hi);
          for (int oy = 0; oy < oh; ++oy) {
            float* row = out + static_cast<size_t>(oy) * ow;
            const int iy = oy * w.stride - w.pad + ky;
            if (iy < 0 || iy >= w.height) {
              std::fill(row, row + ow, 0.f);
              continue;
            }
            std::fill(row, row + lo, 0.f);
            if (hi > lo) {
              // The input at ox = lo: inside the plane by InsideRange.
              const float* in =
                  plane + static_cast<size_t>(iy) * w.width + (lo * w.stride - w.pad + kx);
              if (w.stride == 1) {
                std::copy(in, in + (hi - lo), row + lo);
              } else {
                for (int ox = lo; ox < hi; ++ox) row[ox] = in[(ox - lo) * w.stride];
              }
            }
            std::fill(row + hi, row + ow, 0.f);
          }
        }
      }
    }
  }
  static void Col2ImOne(const float* col, const Window2d& w, float* dx) {
    const int oh = w.out_height(), ow = w.out_width();
    for (int c = 0; c < w.channels; ++c) {
      float* plane = dx + static_cast<size_t>(c) * w.height * w.width;
      for (int ky = 0; ky < w.kernel; ++ky) {
        for (int kx = 0; kx < w.kernel; ++kx) {
          const float* in =
              col + ((static_cast<size_t>(c) * w.kernel + ky) * w.kernel + kx) * oh * ow;
          int lo, hi;
          InsideRange(w, kx, &lo, &hi);
          for (int oy = 0; oy < oh; ++oy) {
            const int iy = oy * w.stride - w.pad + ky;
            if (iy < 0 || iy >= w.height) continue;
            if (hi <= lo) continue;
            const float* src = in + static_cast<size_t>(oy) * ow + lo;
            float* out = plane + static_cast<size_t>(iy) * w.width + (lo * w.stride - w.pad + kx);
            if (w.stride == 1) {
              for (int i = 0; i < hi - lo; ++i) out[i] += src[i];
            } else {
              for (int i = 0; i < hi - lo; ++i) out[i * w.stride] += src[i];
            }
          }
        }
      }
    }
  }

  void MaxPool(const float* x, const Window2d& w, int batch, float* y, int32_t* argmax) override {
    const int oh = w.out_height(), ow = w.out_width();
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    if (w.kernel == 2 && w.stride == 2 && w.pad == 0) {
      MaxPool2x2(x, w, planes, y, argmax);
      return;
    }
    for (size_t p = 0; p < planes; ++p) {
      const float* in = x + p * w.height * w.width;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          float best = -std::numeric_limits<float>::infinity();
          int32_t best_i = -1;
          for (int ky = 0; ky < w.kernel; ++ky) {
            const int iy = oy * w.stride - w.pad + ky;
            if (iy < 0 || iy >= w.height) continue;
            for (int kx = 0; kx < w.kernel; ++kx) {
              const int ix = ox * w.stride - w.pad + kx;
              if (ix < 0 || ix >= w.width) continue;
              const float v = in[iy * w.width + ix];
              if (best_i < 0 || v > best) {
                best = v;
                best_i = iy * w.width + ix;
              }
            }
          }
          const size_t o = p * oh * ow + oy * ow + ox;
          y[o] = best;
          argmax[o] = best_i;
        }
      }
    }
  }
  // The common 2x2 window, stride 2, no padding: no bounds tests, and the
  // four candidates compared in the general loop's order (first largest
  // wins), so both give the same outputs and the same argmax.
  static void MaxPool2x2(const float* x, const Window2d& w, size_t planes, float* y,
                         int32_t* argmax) {
    const int oh = w.out_height(), ow = w.out_width(), width = w.width;
    for (size_t p = 0; p < planes; ++p) {
      const float* in = x + p * w.height * width;
      float* out = y + p * oh * ow;
      int32_t* arg = argmax + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        const int r0 = 2 * oy * width, r1 = r0 + width;
        for (int ox = 0; ox < ow; ++ox) {
          const int i0 = r0 + 2 * ox, i1 = i0 + 1, i2 = r1 + 2 * ox, i3 = i2 + 1;
          float best = in[i0];
          int32_t best_i = i0;
          if (in[i1] > best) best = in[i1], best_i = i1;
          if (in[i2] > best) best = in[i2], best_i = i2;
          if (in[i3] > best) best = in[i3], best_i = i3;
          out[oy * ow + ox] = best;
          arg[oy * ow + ox] = best_i;
        }
      }
    }
  }
  void MaxPoolBackward(const float* dy, const int32_t* argmax, const Window2d& w, int batch,
                       float* dx) override {
    const size_t plane_in = static_cast<size_t>(w.height) * w.width;
    const size_t plane_out = static_cast<size_t>(w.out_height()) * w.out_width();
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    std::fill(dx, dx + planes * plane_in, 0.f);
    for (size_t p = 0; p < planes; ++p) {
      for (size_t o = 0; o < plane_out; ++o) {
        const int32_t i = argmax[p * plane_out + o];
        if (i >= 0) dx[p * plane_in + i] += dy[p * plane_out + o];
      }
    }
  }

  void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                           float scale, float* row_loss, float* dlogits) override {
    for (int r = 0; r < batch; ++r) {
      const float* z = logits + static_cast<size_t>(r) * classes;
      float* d = dlogits + static_cast<size_t>(r) * classes;
      float mx = z[0];
      for (int c = 1; c < classes; ++c) mx = std::max(mx, z[c]);
      float sum = 0.f;
      for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - mx);
      const float log_sum = std::log(sum);
      const int y = labels[r];
      row_loss[r] = log_sum - (z[y] - mx);
      for (int c = 0; c < classes; ++c) {
        const float p = std::exp(z[c] - mx - log_sum);
        d[c] = (p - (c == y ? 1.f : 0.f)) * scale;
      }
    }
  }

 private:
  static void* AlignedAlloc(size_t bytes) {
    // 64-byte alignment: full cache lines, aligned AVX-512 loads.
    const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    return std::aligned_alloc(64, rounded);
  }

 private:
  const bool batched_conv_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(bool batched_conv) {
  Blas();  // a missing OpenBLAS fails here, not mid-training
  return std::make_unique<CpuBackend>(batched_conv);
}

void SetCpuThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  Blas().set_num_threads(std::max(1, threads));
}

}  // namespace train
}  // namespace hetps
