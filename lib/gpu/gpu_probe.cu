#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_probe.h"

namespace hetps {
namespace gpu {
namespace {

__global__ void AxpyKernel(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

}  // namespace

ProbeResult Probe() {
  ProbeResult result;
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) result.nccl_version = nccl_version;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    result.error = CudaError("cudaGetDeviceCount", err);
    return result;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      result.error = CudaError("cudaGetDeviceProperties", err);
      continue;
    }
    Device d;
    d.index = i;
    d.name = prop.name;
    d.memory_bytes = prop.totalGlobalMem;
    d.compute_capability = prop.major * 10 + prop.minor;
    result.devices.push_back(d);
  }
  if (count == 0) result.error = "no CUDA device";
  return result;
}

std::string SelfTest(int device, int n) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97);
    y[i] = 1.0f;
  }
  float* dx = nullptr;
  float* dy = nullptr;
  size_t bytes = sizeof(float) * static_cast<size_t>(n);
  if ((err = cudaMalloc(&dx, bytes)) != cudaSuccess) return CudaError("cudaMalloc", err);
  if ((err = cudaMalloc(&dy, bytes)) != cudaSuccess) {
    cudaFree(dx);
    return CudaError("cudaMalloc", err);
  }
  std::string failure;
  err = cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    AxpyKernel<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    failure = CudaError("axpy", err);
  } else {
    for (int i = 0; i < n; ++i) {
      float want = 1.0f + 2.0f * static_cast<float>(i % 97);
      if (std::fabs(y[i] - want) > 1e-6f) {
        failure = "axpy mismatch at " + std::to_string(i);
        break;
      }
    }
  }
  cudaFree(dx);
  cudaFree(dy);
  return failure;
}

}  // namespace gpu
}  // namespace hetps
