// One DyT value, gamma * tanh(alpha * x) + beta in fp32, shared by the DyT layer kernel
// (layers.cu) and the W2A8 prologue that applies DyT to its input (w2a8_prologue.cuh).
#ifndef QMM_KERNELS_CUDA_DYT_VALUE_CUH_
#define QMM_KERNELS_CUDA_DYT_VALUE_CUH_

#include <cuda_runtime.h>

namespace qmm::cuda {

// The explicit roundings keep the bits the same in every kernel that calls this, so a
// fused DyT gives exactly what the DyT kernel's fp32 output would.
__device__ __forceinline__ float DyTValue(float x, float alpha, float gamma, float beta) {
  return __fmaf_rn(gamma, tanhf(__fmul_rn(alpha, x)), beta);
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DYT_VALUE_CUH_
