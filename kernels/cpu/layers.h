// The CPU backend's non-matmul layer kernels: embedding gather, DyT, RMSNorm, activations
// with an optional bias, SwiGLU's gate * up, and the residual add. fp32 in, fp32 math, fp32
// out; every output element is written. Unless noted, y may alias x (the kernels are
// element-wise, RMSNorm row by row), and the calls are safe to run concurrently on
// different buffers.
#ifndef QMM_KERNELS_CPU_LAYERS_H_
#define QMM_KERNELS_CPU_LAYERS_H_

#include <cstdint>

#include "kernels/activation.h"
#include "kernels/format.h"

namespace qmm {

// y[i][:] = table[ids[i]][:] for i < m. `table` is a packed FP16 or BF16 weight used as a
// [vocab = N, dim = K] table; every id must be in [0, N) (the caller checks). y is [m, K]
// and must not alias the table.
void CpuEmbedding(const PackedWeight& table, const int32_t* ids, int64_t m, float* y);

// y[i][j] = gamma[j] * tanh(alpha * x[i][j]) + beta[j] over [m, f]; beta may be nullptr
// (zero).
void CpuDyT(const float* x, int64_t m, int64_t f, float alpha, const float* gamma,
            const float* beta, float* y);

// y[i][j] = weight[j] * x[i][j] / sqrt(mean_j x[i][j]^2 + epsilon) over [m, f], the mean
// of squares summed in double (epsilon > 0).
void CpuRmsNorm(const float* x, int64_t m, int64_t f, const float* weight, float epsilon, float* y);

// y[i][j] = act(x[i][j] + bias[j]) over [m, n]; bias may be nullptr (zero).
void CpuBiasActivation(Activation act, const float* x, const float* bias, int64_t m, int64_t n,
                       float* y);

// y[i] = act(gate[i]) * up[i] for i < count (y may alias either input): a gated MLP's
// product, SwiGLU with kSilu, GeGLU with kGeluTanh.
void CpuGlu(Activation act, const float* gate, const float* up, int64_t count, float* y);

// y[i] = a[i] + b[i] for i < count (y may alias either input).
void CpuAdd(const float* a, const float* b, int64_t count, float* y);

}  // namespace qmm

#endif  // QMM_KERNELS_CPU_LAYERS_H_
