// A float64 reference matmul, written independently of the fast kernels, for tests and
// for qmmctl's --verify check.
#ifndef QMM_KERNELS_REFERENCE_H_
#define QMM_KERNELS_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "kernels/format.h"

namespace qmm {

// y[i][n] = sum_k x[i][k] * w[n][k] in double, [m, N] row-major, from the packed weight
// dequantized in double. For W2A8 the activations are first quantized per the proto rule
// (computed in double), then y = a[i] * s[n] * sum_k xq[i][k] * t[n][k].
std::vector<double> ReferenceMatMul(const PackedWeight& w, const float* x, int64_t m);

}  // namespace qmm

#endif  // QMM_KERNELS_REFERENCE_H_
