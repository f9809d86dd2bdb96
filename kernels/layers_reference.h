// Float64 references of the model layers, written independently of the CPU and CUDA
// kernels, for tests: a model's Forward is checked against the composition of these and
// ReferenceMatMul (kernels/reference.h). Activations are double, [rows, features]
// row-major; parameters come as the fp32 values the server holds.
#ifndef QMM_KERNELS_LAYERS_REFERENCE_H_
#define QMM_KERNELS_LAYERS_REFERENCE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cpu/chain.h"
#include "kernels/format.h"

namespace qmm {

// Rows ids[i] of an FP16 or BF16 table [N, K], read straight from the packed bytes.
// Every id must be in [0, N).
std::vector<double> ReferenceEmbedding(const PackedWeight& table, std::span<const int32_t> ids);

// gamma[j] * tanh(alpha * x[i][j]) + beta[j]; beta empty means zero. x has f columns.
std::vector<double> ReferenceDyT(std::span<const double> x, int64_t f, double alpha,
                                 std::span<const float> gamma, std::span<const float> beta);

// weight[j] * x[i][j] / sqrt(mean_j x[i][j]^2 + epsilon); x has f columns.
std::vector<double> ReferenceRmsNorm(std::span<const double> x, int64_t f,
                                     std::span<const float> weight, double epsilon);

// One activation of one value.
double ReferenceActivation(Activation act, double x);

// act(x[i][j] + bias[j]); bias empty means zero. x has n columns.
std::vector<double> ReferenceBiasActivation(Activation act, std::span<const double> x, int64_t n,
                                            std::span<const float> bias);

// act(gate[i]) * up[i] (SwiGLU with kSilu).
std::vector<double> ReferenceGlu(Activation act, std::span<const double> gate,
                                 std::span<const double> up);

// a[i] + b[i].
std::vector<double> ReferenceAdd(std::span<const double> a, std::span<const double> b);

// x * W^T for m rows of double activations: x is rounded to fp32 (what the server's
// matmul kernels receive), then ReferenceMatMul.
std::vector<double> ReferenceLinear(const PackedWeight& w, std::span<const double> x, int64_t m);

// A whole chain (the descriptors the CPU backend runs), composed from the references
// above in float64: ids for a chain that starts with an embedding, x [m, in_features]
// otherwise. [m, last out_features].
std::vector<double> ReferenceChain(std::span<const CpuChainLayer> layers,
                                   std::span<const int32_t> ids, std::span<const float> x,
                                   int64_t m);

}  // namespace qmm

#endif  // QMM_KERNELS_LAYERS_REFERENCE_H_
