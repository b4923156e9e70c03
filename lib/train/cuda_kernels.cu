#include <cfloat>

#include "cuda_kernels.h"

namespace hetps {
namespace train {
namespace cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535u * 8) b = 65535u * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b == 0 ? 1 : b);
}

__global__ void FillKernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(blockDim.x) * gridDim.x)
    p[i] = v;
}

__global__ void AddBiasKernel(float* y, const float* bias, size_t total, int channels, int inner) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(blockDim.x) * gridDim.x)
    y[i] += bias[(i / inner) % channels];
}

// One block per channel; a fixed-order tree reduction keeps it deterministic.
__global__ void BiasGradKernel(const float* dy, float* dbias, int outer, int channels, int inner) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  const size_t count = size_t(outer) * inner;
  float s = 0.f;
  for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
    const size_t o = j / inner, i = j % inner;
    s += dy[(o * channels + c) * inner + i];
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[c] += partial[0];
}

__global__ void ReluKernel(const float* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(blockDim.x) * gridDim.x)
    y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(blockDim.x) * gridDim.x)
    dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

__global__ void Im2ColKernel(const float* x, int channels, int height, int width, int kernel,
                             int stride, int pad, int oh, int ow, int batch, float* col) {
  const size_t per = size_t(channels) * kernel * kernel * oh * ow;
  const size_t total = per * batch;
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < total;
       j += size_t(blockDim.x) * gridDim.x) {
    const size_t sample = j / per, i = j % per;
    const float* xs = x + sample * channels * height * width;
    const int ox = i % ow;
    const int oy = (i / ow) % oh;
    const size_t row = i / (size_t(oh) * ow);  // (c * k + ky) * k + kx
    const int kx = row % kernel;
    const int ky = (row / kernel) % kernel;
    const int c = row / (size_t(kernel) * kernel);
    const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
    col[j] = (iy >= 0 && iy < height && ix >= 0 && ix < width)
                 ? xs[(size_t(c) * height + iy) * width + ix]
                 : 0.f;
  }
}

// Gather form of the adjoint: one thread per input pixel, no atomics.
__global__ void Col2ImKernel(const float* col, int channels, int height, int width, int kernel,
                             int stride, int pad, int oh, int ow, int batch, float* dx) {
  const size_t per = size_t(channels) * height * width;
  const size_t total = per * batch;
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < total;
       j += size_t(blockDim.x) * gridDim.x) {
    const size_t sample = j / per, i = j % per;
    const float* cs = col + sample * size_t(channels) * kernel * kernel * oh * ow;
    const int ix = i % width;
    const int iy = (i / width) % height;
    const int c = i / (size_t(width) * height);
    float s = 0.f;
    for (int ky = 0; ky < kernel; ++ky) {
      const int ty = iy + pad - ky;
      if (ty < 0 || ty % stride != 0) continue;
      const int oy = ty / stride;
      if (oy >= oh) continue;
      for (int kx = 0; kx < kernel; ++kx) {
        const int tx = ix + pad - kx;
        if (tx < 0 || tx % stride != 0) continue;
        const int ox = tx / stride;
        if (ox >= ow) continue;
        s += cs[((size_t(c) * kernel + ky) * kernel + kx) * oh * ow + size_t(oy) * ow + ox];
      }
    }
    dx[j] += s;
  }
}

__global__ void MaxPoolKernel(const float* x, int planes, int height, int width, int kernel,
                              int stride, int pad, int oh, int ow, float* y, int32_t* argmax) {
  const size_t total = size_t(planes) * oh * ow;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(blockDim.x) * gridDim.x) {
    const int ox = i % ow;
    const int oy = (i / ow) % oh;
    const size_t p = i / (size_t(oh) * ow);
    const float* in = x + p * height * width;
    float best = -FLT_MAX;
    int32_t best_i = -1;
    for (int ky = 0; ky < kernel; ++ky) {
      const int iy = oy * stride - pad + ky;
      if (iy < 0 || iy >= height) continue;
      for (int kx = 0; kx < kernel; ++kx) {
        const int ix = ox * stride - pad + kx;
        if (ix < 0 || ix >= width) continue;
        const float v = in[iy * width + ix];
        if (best_i < 0 || v > best) {
          best = v;
          best_i = iy * width + ix;
        }
      }
    }
    y[i] = best;
    argmax[i] = best_i;
  }
}

__global__ void MaxPoolBackwardKernel(const float* dy, const int32_t* argmax, int planes,
                                      int plane_in, int plane_out, float* dx) {
  const size_t total = size_t(planes) * plane_out;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(blockDim.x) * gridDim.x) {
    const int32_t a = argmax[i];
    if (a >= 0) atomicAdd(&dx[(i / plane_out) * plane_in + a], dy[i]);
  }
}

__global__ void SoftmaxCrossEntropyKernel(const float* logits, const int32_t* labels, int batch,
                                          int classes, float scale, float* row_loss,
                                          float* dlogits) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  const float* z = logits + size_t(r) * classes;
  float* d = dlogits + size_t(r) * classes;
  float mx = z[0];
  for (int c = 1; c < classes; ++c) mx = fmaxf(mx, z[c]);
  float sum = 0.f;
  for (int c = 0; c < classes; ++c) sum += expf(z[c] - mx);
  const float log_sum = logf(sum);
  const int y = labels[r];
  row_loss[r] = log_sum - (z[y] - mx);
  for (int c = 0; c < classes; ++c)
    d[c] = (expf(z[c] - mx - log_sum) - (c == y ? 1.f : 0.f)) * scale;
}

}  // namespace

void Fill(float* p, size_t n, float v, cudaStream_t s) {
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(p, n, v);
}
void AddBias(float* y, const float* bias, int outer, int channels, int inner, cudaStream_t s) {
  const size_t total = size_t(outer) * channels * inner;
  AddBiasKernel<<<Blocks(total), kThreads, 0, s>>>(y, bias, total, channels, inner);
}
void BiasGrad(const float* dy, float* dbias, int outer, int channels, int inner, cudaStream_t s) {
  BiasGradKernel<<<channels, kThreads, 0, s>>>(dy, dbias, outer, channels, inner);
}
void Relu(const float* x, float* y, size_t n, cudaStream_t s) {
  ReluKernel<<<Blocks(n), kThreads, 0, s>>>(x, y, n);
}
void ReluBackward(const float* y, const float* dy, float* dx, size_t n, cudaStream_t s) {
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(y, dy, dx, n);
}
void Im2Col(const float* x, int channels, int height, int width, int kernel, int stride, int pad,
            int batch, float* col, cudaStream_t s) {
  const int oh = (height + 2 * pad - kernel) / stride + 1,
            ow = (width + 2 * pad - kernel) / stride + 1;
  Im2ColKernel<<<Blocks(size_t(channels) * kernel * kernel * oh * ow * batch), kThreads, 0, s>>>(
      x, channels, height, width, kernel, stride, pad, oh, ow, batch, col);
}
void Col2Im(const float* col, int channels, int height, int width, int kernel, int stride, int pad,
            int batch, float* dx, cudaStream_t s) {
  const int oh = (height + 2 * pad - kernel) / stride + 1,
            ow = (width + 2 * pad - kernel) / stride + 1;
  Col2ImKernel<<<Blocks(size_t(channels) * height * width * batch), kThreads, 0, s>>>(
      col, channels, height, width, kernel, stride, pad, oh, ow, batch, dx);
}
void MaxPool(const float* x, int planes, int height, int width, int kernel, int stride, int pad,
             float* y, int32_t* argmax, cudaStream_t s) {
  const int oh = (height + 2 * pad - kernel) / stride + 1,
            ow = (width + 2 * pad - kernel) / stride + 1;
  MaxPoolKernel<<<Blocks(size_t(planes) * oh * ow), kThreads, 0, s>>>(
      x, planes, height, width, kernel, stride, pad, oh, ow, y, argmax);
}
void MaxPoolBackward(const float* dy, const int32_t* argmax, int planes, int height, int width,
                     int out_plane, float* dx, cudaStream_t s) {
  cudaMemsetAsync(dx, 0, size_t(planes) * height * width * sizeof(float), s);
  MaxPoolBackwardKernel<<<Blocks(size_t(planes) * out_plane), kThreads, 0, s>>>(
      dy, argmax, planes, height * width, out_plane, dx);
}
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                         float scale, float* row_loss, float* dlogits, cudaStream_t s) {
  SoftmaxCrossEntropyKernel<<<(batch + 127) / 128, 128, 0, s>>>(logits, labels, batch, classes,
                                                                scale, row_loss, dlogits);
}

}  // namespace cuda
}  // namespace train
}  // namespace hetps
