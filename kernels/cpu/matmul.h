// The CPU backend's matmul kernels: y = x * W^T straight from the canonical packed form.
#ifndef QMM_KERNELS_CPU_MATMUL_H_
#define QMM_KERNELS_CPU_MATMUL_H_

#include <cstdint>

#include "kernels/format.h"

namespace qmm {

// y[i][n] = sum_k x[i][k] * w[n][k] for i < m, with fp32 accumulation. x is [m, K] fp32,
// y is [m, N] fp32, both row-major; every element of y is written. W2A8 quantizes x per
// row with QuantizeRowsInt8, accumulates in int32 and applies both scales at the end.
// `w` must come from ViewPacked (valid shape and size). m >= 1. The work is split over N
// across up to `num_threads` threads (<= 0 means hardware concurrency); the call blocks
// until done and is safe to run concurrently with other calls.
void CpuMatMul(const PackedWeight& w, const float* x, int64_t m, float* y, int num_threads);

}  // namespace qmm

#endif  // QMM_KERNELS_CPU_MATMUL_H_
