// The workspace of the wgmma GEMM (wgmma_gemm.cuh): the activations of m tokens,
// permuted into whole tiles of up to 128 tokens, 2 bytes per value.
#ifndef QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_
#define QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_

#include <cstdint>

namespace qmm::cuda {

constexpr int64_t PermutedXBytes(int64_t m, int64_t k) { return (m + 127) / 128 * 128 * k * 2; }

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_WGMMA_LAYOUT_H_
