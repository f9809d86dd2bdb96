// The few PTX instructions the W2A8 kernels use that CUDA C++ does not expose.
#ifndef QMM_KERNELS_CUDA_W2A8_PTX_CUH_
#define QMM_KERNELS_CUDA_W2A8_PTX_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/load_device.cuh"

namespace qmm::cuda::w2a8 {

// d += a * b for a 16x32 unsigned 8-bit A tile (weights) and a 32x8 signed 8-bit B tile
// (activations), int32 accumulation.
__device__ __forceinline__ void MmaU8S8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_PTX_CUH_
