// Device-side conversions between fp32 and the 16-bit activation types, with the
// rounding of kernels/dtype.h (round to nearest even; NaN and Inf preserved).
#ifndef QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_
#define QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/dtype.h"

namespace qmm::cuda {

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Stores v at y[index] in dtype `y_dtype` (kF32, kF16 or kBF16).
__device__ __forceinline__ void StoreAs(DType y_dtype, void* y, int64_t index, float v) {
  switch (y_dtype) {
    case DType::kF32:
      static_cast<float*>(y)[index] = v;
      break;
    case DType::kF16:
      static_cast<__half*>(y)[index] = __float2half_rn(v);
      break;
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(y)[index] = __float2bfloat16_rn(v);
      break;
  }
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_
