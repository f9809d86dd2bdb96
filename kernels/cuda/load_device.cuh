// The weight-stream load the W4A16 and W8A16 kernels share.
#ifndef QMM_KERNELS_CUDA_LOAD_DEVICE_CUH_
#define QMM_KERNELS_CUDA_LOAD_DEVICE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace qmm::cuda {

// 16 bytes of read-only data that are read once: skip L1. Volatile, so that loads issued
// before WaitForPrerequisiteGrid (dependent_launch.cuh) stay before it.
__device__ __forceinline__ uint4 LoadStream(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_LOAD_DEVICE_CUH_
