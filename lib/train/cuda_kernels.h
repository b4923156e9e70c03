// CUDA kernels behind CudaBackend (see backend.h for each operation's
// contract). Compiled by nvcc; this header is plain C++ so the backend itself
// builds with the host compiler. Every launch is asynchronous on `stream`;
// launch errors surface through cudaGetLastError at the backend's next sync.
#ifndef HETPS_LIB_TRAIN_CUDA_KERNELS_H_
#define HETPS_LIB_TRAIN_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hetps {
namespace train {
namespace cuda {

void Fill(float* p, size_t n, float value, cudaStream_t stream);
void AddBias(float* y, const float* bias, int outer, int channels, int inner, cudaStream_t stream);
void BiasGrad(const float* dy, float* dbias, int outer, int channels, int inner,
              cudaStream_t stream);
void Relu(const float* x, float* y, size_t n, cudaStream_t stream);
void ReluBackward(const float* y, const float* dy, float* dx, size_t n, cudaStream_t stream);
// Window geometry is passed flat so this header needs nothing from backend.h.
// Im2Col and Col2Im run over `batch` consecutive samples in one launch.
void Im2Col(const float* x, int channels, int height, int width, int kernel, int stride, int pad,
            int batch, float* col, cudaStream_t stream);
void Col2Im(const float* col, int channels, int height, int width, int kernel, int stride, int pad,
            int batch, float* dx, cudaStream_t stream);
void MaxPool(const float* x, int planes, int height, int width, int kernel, int stride, int pad,
             float* y, int32_t* argmax, cudaStream_t stream);
void MaxPoolBackward(const float* dy, const int32_t* argmax, int planes, int height, int width,
                     int out_plane, float* dx, cudaStream_t stream);
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                         float scale, float* row_loss, float* dlogits, cudaStream_t stream);

}  // namespace cuda
}  // namespace train
}  // namespace hetps

#endif  // HETPS_LIB_TRAIN_CUDA_KERNELS_H_
