#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/dtype_device.cuh"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 65535;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsKernel(const T* __restrict__ x, int64_t m, int64_t k, int8_t* __restrict__ q,
                       float* __restrict__ scale) {
  __shared__ float warp_max[kThreads / 32];
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* xr = x + row * k;
    int8_t* qr = q + row * k;
    float max_abs = 0.0f;
    for (int64_t c = threadIdx.x; c < k; c += kThreads)
      max_abs = fmaxf(max_abs, fabsf(ToF32(xr[c])));
    for (int offset = 16; offset > 0; offset >>= 1) {
      max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
    }
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = max_abs;
    __syncthreads();
    max_abs = warp_max[0];
    for (int w = 1; w < kThreads / 32; ++w) max_abs = fmaxf(max_abs, warp_max[w]);
    // The same fp32 division as the CPU rule, so that both give the same scale bits.
    const float s = max_abs / 127.0f;
    if (threadIdx.x == 0) scale[row] = s;
    for (int64_t c = threadIdx.x; c < k; c += kThreads) {
      const float v = s == 0.0f ? 0.0f : fminf(fmaxf(roundf(ToF32(xr[c]) / s), -127.0f), 127.0f);
      qr[c] = static_cast<int8_t>(v);
    }
    // warp_max is rewritten for the next row only after every thread has read it.
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchQuantizeRowsInt8(DType x_dtype, const void* x, int64_t m, int64_t k, int8_t* q,
                                   float* scale, cudaStream_t stream) {
  if (m < 0 || k < 1) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>(m, kMaxBlocks));
  switch (x_dtype) {
    case DType::kF32:
      QuantizeRowsKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x), m, k, q,
                                                          scale);
      break;
    case DType::kF16:
      QuantizeRowsKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(x), m, k, q,
                                                          scale);
      break;
    case DType::kBF16:
      QuantizeRowsKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), m,
                                                          k, q, scale);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace qmm::cuda
