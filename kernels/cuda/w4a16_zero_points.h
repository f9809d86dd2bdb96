// The zero-point term of an asymmetric W4A16 weight (WeightShape::zero_points), for the
// kernels that do not take zero points themselves: the mma.sync kernels that a forced K
// split or a device without the wgmma GEMM takes (the decode kernels and the wgmma GEMM
// dequantize to q - z with the layout's zero biases, w4a16_decode.cuh, w4a16_wgmma.cuh).
//
// w = (q - z) * s splits the product into the symmetric one, sum_k x[m][k] * q * s, which
// those kernels compute from the codes and scales as they are, and
//   term[m][n] = sum_g X[m][g] * t[g][n],  X[m][g] = sum_{k in group g} x[m][k],
//   t[g][n] = -z[n][g] * s[n][g]
// (the device layout's zero terms, w4a16_layout.h). The term is computed ahead of the
// matmul into an fp32 buffer, with the caller's residual added, and the W4A16 kernel adds
// that buffer as its residual: the kernels that stream the weights stay the symmetric
// ones, and y is rounded once. A small kernel sums x's groups first, once for every
// column, then one computes the term (a CTA summing its own columns' groups of x measured
// slower at 1-4 rows on an H100, performance-log.md, session 64).
#ifndef QMM_KERNELS_CUDA_W4A16_ZERO_POINTS_H_
#define QMM_KERNELS_CUDA_W4A16_ZERO_POINTS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm_args.h"

namespace qmm::cuda {

// Scratch of the term for m rows: the term [m, n] fp32, then the group sums [m, K/G].
size_t ZeroPointScratchBytes(const WeightShape& shape, int64_t m);

// Enqueues term = X * t (+ args.residual) into ZeroPointTermOf(scratch), reading args.x
// (kF16 or kBF16, 16-byte aligned) and the zero terms of args.weight; `scratch` holds
// ZeroPointScratchBytes and is 256-byte aligned. The kernels are dependent launches
// (dependent_launch.h).
cudaError_t LaunchZeroPointTerm(const GemmArgs& args, void* scratch);

// Where LaunchZeroPointTerm leaves the term: fp32 [m, n] at the start of `scratch`.
float* ZeroPointTermOf(void* scratch);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_W4A16_ZERO_POINTS_H_
