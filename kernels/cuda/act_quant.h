// Per-row int8 quantization of activations on the device (the W2A8 rule of
// proto/qmm/v1/qmm.proto, bit-identical to QuantizeRowsInt8 in kernels/activation_quant.h
// for the same fp32 values).
#ifndef QMM_KERNELS_CUDA_ACT_QUANT_H_
#define QMM_KERNELS_CUDA_ACT_QUANT_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace qmm::cuda {

// For each of the m rows of x ([m, k] row-major, dtype x_dtype: kF32, kF16 or kBF16):
// scale[r] = max|x[r][:]| / 127 and q[r][c] = round(x[r][c] / scale[r]) (half away from
// zero, clamped to [-127, 127]); a row whose scale is 0 gets q = 0. q is [m, k] int8,
// scale is [m] fp32, both device memory. One block per row; enqueues on `stream` and
// returns the launch error. m == 0 enqueues nothing.
cudaError_t LaunchQuantizeRowsInt8(DType x_dtype, const void* x, int64_t m, int64_t k, int8_t* q,
                                   float* scale, cudaStream_t stream);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_ACT_QUANT_H_
