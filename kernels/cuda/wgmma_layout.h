// The workspace of the wgmma GEMM (wgmma_gemm.cuh): the activations of m tokens,
// permuted into whole tiles of up to 128 tokens (256 beyond 128 tokens), 2 bytes per
// value.
#ifndef QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_
#define QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_

#include <cstdint>

namespace qmm::cuda {

constexpr int64_t PermutedXBytes(int64_t m, int64_t k) {
  const int64_t tile = m <= 128 ? 128 : 256;
  return (m + tile - 1) / tile * tile * k * 2;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_
