#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/dtype_device.cuh"

namespace qmm::cuda {
namespace {

template <typename From, typename To>
__global__ void ConvertKernel(const From* __restrict__ src, To* __restrict__ dst, int64_t count,
                              float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = FromF32<To>(ToF32(src[i]) * scale);
  }
}

template <typename From>
cudaError_t LaunchTo(const From* src, DType to, void* dst, int64_t count, float scale,
                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Grid-stride: a few waves of blocks cover any count without a huge grid.
  const int blocks = static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, 8192));
  switch (to) {
    case DType::kF32:
      ConvertKernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<float*>(dst), count, scale);
      break;
    case DType::kF16:
      ConvertKernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<__half*>(dst), count, scale);
      break;
    case DType::kBF16:
      ConvertKernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), count,
                                                     scale);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchConvert(DType from, const void* src, DType to, void* dst, int64_t count,
                          float scale, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  switch (from) {
    case DType::kF32:
      return LaunchTo(static_cast<const float*>(src), to, dst, count, scale, stream);
    case DType::kF16:
      return LaunchTo(static_cast<const __half*>(src), to, dst, count, scale, stream);
    case DType::kBF16:
      return LaunchTo(static_cast<const __nv_bfloat16*>(src), to, dst, count, scale, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace qmm::cuda
