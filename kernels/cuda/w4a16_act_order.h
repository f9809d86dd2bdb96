// The inputs of a W4A16 weight in activation order (WeightShape::act_order).
//
// Such a weight stores its columns sorted by group (GPTQ's desc_act scatters each group
// over the inputs), so stored column j multiplies input feature perm[j]. A small kernel
// gathers x into that order, x'[m][j] = x[m][perm[j]], ahead of the matmul, which then
// runs on x' as on any weight's inputs: every W4A16 kernel stays the one it is. The order
// is weight data, which no kernel writes, so the gather reads it before waiting on the
// kernel that writes x (dependent_launch.h).
#ifndef QMM_KERNELS_CUDA_W4A16_ACT_ORDER_H_
#define QMM_KERNELS_CUDA_W4A16_ACT_ORDER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm_args.h"

namespace qmm::cuda {

// Bytes of the gathered inputs of m rows: [m, K] of x's 2-byte dtype, 256-byte aligned.
size_t ActOrderScratchBytes(const WeightShape& shape, int64_t m);

// Enqueues out[m][j] = args.x[m][perm[j]] with perm from args.weight's device layout
// (w4a16_layout.h); `out` holds ActOrderScratchBytes and is 16-byte aligned, args.x is
// kF16 or kBF16. A dependent launch (dependent_launch.h).
cudaError_t LaunchGatherInputs(const GemmArgs& args, void* out);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_W4A16_ACT_ORDER_H_
