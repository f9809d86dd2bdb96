// Runs a model's chain of layers on the CPU: the CPU backend's Forward. fp32 throughout;
// each layer's output is the next one's input, and a residual adds the input of the layer
// its block started at (kept until then, freed after its last use).
#ifndef QMM_KERNELS_CPU_CHAIN_H_
#define QMM_KERNELS_CPU_CHAIN_H_

#include <cstdint>
#include <span>

#include "kernels/activation.h"
#include "kernels/format.h"
#include "kernels/layer_kind.h"

namespace qmm {

// One layer, already checked (features line up; see server/model.h). Pointers are
// borrowed and must stay valid while the chain runs.
struct CpuChainLayer {
  LayerKind kind = LayerKind::kLinear;
  // kEmbedding: {table}; kLinear: {weight}; kGatedMlp: {gate, up, down}.
  const PackedWeight* weights[3] = {nullptr, nullptr, nullptr};
  const float* bias = nullptr;                    // kLinear: [out_features] or nullptr
  float alpha = 0.0f;                             // kDyT
  const float* gamma = nullptr;                   // kDyT, kRmsNorm (its weight): [in_features]
  const float* beta = nullptr;                    // kDyT: [in_features] or nullptr
  float epsilon = 0.0f;                           // kRmsNorm
  Activation activation = Activation::kIdentity;  // kActivation
  // kGatedMlp: act in down(act(gate(x)) * up(x)), SiLU for SwiGLU, GELU for GeGLU; its
  // sub-norm, when gamma is set: down(rmsnorm(act(gate(x)) * up(x))), gamma [the gate's N].
  Activation gate_activation = Activation::kSilu;
  int32_t block_start = -1;  // kResidual
  int64_t in_features = 0;
  int64_t out_features = 0;
};

// y [m, last out_features] = the chain applied to `ids` ([m] token ids in range, when
// layer 0 is an embedding) or to `x` ([m, in_features] fp32, otherwise). The matmuls use
// up to `num_threads` threads (CpuMatMul's convention); every element of y is written.
void CpuRunChain(std::span<const CpuChainLayer> layers, const int32_t* ids, const float* x,
                 int64_t m, float* y, int num_threads);

}  // namespace qmm

#endif  // QMM_KERNELS_CPU_CHAIN_H_
