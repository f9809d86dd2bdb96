// What both W2A8 matmul kernels (w2a8_decode.cuh, w2a8_gemm.cuh) read and write: the
// weight in its device layout (w2a8_layout.h), the prologue's int8 activations and the
// result, with the residual it adds; their parameter structs extend it. StoreResult is
// how both store an element of y.
#ifndef QMM_KERNELS_CUDA_W2A8_OPERANDS_H_
#define QMM_KERNELS_CUDA_W2A8_OPERANDS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dtype_device.cuh"
#include "kernels/dtype.h"

namespace qmm::cuda::w2a8 {

struct Operands {
  const uint4* codes;    // device layout, unit order
  const float* w_scale;  // [padded_rows]
  const int8_t* xq;      // [m, k], the prologue's
  const float* x_scale;  // [m]
  const int32_t* x_sum;  // [m]
  void* y;               // [m, n] of y_dtype
  DType y_dtype;
  const void* residual;  // [m, n] of residual_dtype, added to y (GemmArgs::residual), or nullptr
  DType residual_dtype;
  int m;
  int n;
  int k;
  int row_groups;
  int k_blocks;
};

// y[token][row] = v (+ the residual, in fp32 before y's rounding).
__device__ __forceinline__ void StoreResult(const Operands& o, int64_t token, int64_t row,
                                            float v) {
  StoreWithResidual(o.y_dtype, o.y, o.residual, o.residual_dtype, token * o.n + row, v);
}

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_OPERANDS_H_
