// Device-side conversions between fp32 and the 16-bit activation types, with the
// rounding of kernels/dtype.h (round to nearest even; NaN and Inf preserved).
#ifndef QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_
#define QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// lo and hi as two 16-bit values of type T in one word, lo first in memory.
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t Pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t Pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// base[i] in dtype `dtype` (kF32, kF16 or kBF16), as fp32.
__device__ __forceinline__ float LoadAs(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
  return 0.f;
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

// y[i] = v (+ residual[i], of residual_dtype, where residual is set: GemmArgs::residual,
// added in fp32 before y's rounding).
__device__ __forceinline__ void StoreWithResidual(DType y_dtype, void* y, const void* residual,
                                                  DType residual_dtype, int64_t i, float v) {
  if (residual != nullptr) v += LoadAs(residual_dtype, residual, i);
  StoreAs(y_dtype, y, i, v);
}

// y[0 .. 3] = v in y's type T (float, __half or __nv_bfloat16), one store of 16 or 8
// bytes, to which y must be aligned.
template <typename T>
__device__ __forceinline__ void Store4(T* y, float4 v) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(y) = v;
  } else {
    *reinterpret_cast<uint2*>(y) = make_uint2(Pack2<T>(v.x, v.y), Pack2<T>(v.z, v.w));
  }
}

// Stores v at y[index .. index + 3] in dtype `y_dtype` with one store of 16 bytes (kF32)
// or 8 (kF16, kBF16), to which y + index must be aligned.
__device__ __forceinline__ void StoreAs4(DType y_dtype, void* y, int64_t index, float4 v) {
  switch (y_dtype) {
    case DType::kF32:
      Store4(static_cast<float*>(y) + index, v);
      break;
    case DType::kF16:
      Store4(static_cast<__half*>(y) + index, v);
      break;
    case DType::kBF16:
      Store4(static_cast<__nv_bfloat16*>(y) + index, v);
      break;
  }
}

// base[i .. i + 7] in dtype `dtype`, as fp32, with one load of 16 bytes (kF16, kBF16) or
// two (kF32), to which base + i must be aligned.
__device__ __forceinline__ void LoadAs8(DType dtype, const void* base, int64_t i, float (&v)[8]) {
  if (dtype == DType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 lo = p[0], hi = p[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
    v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    return;
  }
  const uint4 word = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i);
  const uint32_t halves[4] = {word.x, word.y, word.z, word.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint16_t bits = static_cast<uint16_t>(halves[k / 2] >> (16 * (k % 2)));
    v[k] = dtype == DType::kF16 ? __half2float(__ushort_as_half(bits))
                                : __bfloat162float(__ushort_as_bfloat16(bits));
  }
}

// Stores v at base[i .. i + 7] in dtype `dtype` with one store of 16 bytes (kF16, kBF16) or
// two (kF32), to which base + i must be aligned.
__device__ __forceinline__ void StoreAs8(DType dtype, void* base, int64_t i, const float (&v)[8]) {
  if (dtype == DType::kF32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + i);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  uint32_t halves[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    halves[k] = dtype == DType::kF16 ? Pack2<__half>(v[2 * k], v[2 * k + 1])
                                     : Pack2<__nv_bfloat16>(v[2 * k], v[2 * k + 1]);
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + i) =
      make_uint4(halves[0], halves[1], halves[2], halves[3]);
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DTYPE_DEVICE_CUH_
