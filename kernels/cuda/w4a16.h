// W4A16: int4 weights (symmetric, fp16 scales per 128 k or per row) times fp16/bf16
// activations, fp32 accumulation, on tensor cores (the weights in the M slot, so 1..8
// tokens fill one n8 tile of mma.m16n8k16; the scale is applied to each 128-k partial sum
// in fp32). The device layout is in w4a16_layout.h; four kernels read it. Up to 16
// tokens the decode kernel (w4a16_decode.cuh): a persistent one-wave grid whose warps
// stream the weights straight into registers, split K inside each CTA and reduce through
// shared memory, on any sm_80+ device (up to 8 tokens only when its CTAs cover all rows
// at once); given GemmArgs::sync, its grid splits the rows' work evenly over every CTA
// that fits (decode_stream.cuh) where whole row sets per CTA would leave CTAs idle.
// Beyond 16 tokens on sm_90a the wgmma kernel (w4a16_wgmma.cuh), beyond 32 after a
// small kernel that permutes the activations into the workspace. Otherwise (or
// with a forced split count) one of two mma.sync cluster kernels: one streaming the
// weights through registers (w4a16_direct.cuh) and one through a shared-memory pipeline
// fed by bulk copies (w4a16_staged.cuh). All but the decode kernel split K across the
// CTAs of a thread-block cluster (reduced through distributed shared memory) on sm_90;
// before sm_90 every CTA covers all of K.
#ifndef QMM_KERNELS_CUDA_W4A16_H_
#define QMM_KERNELS_CUDA_W4A16_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cuda/gemm_args.h"
#include "kernels/format.h"

namespace qmm::cuda {

// Canonical packed W4A16 (scheme kW4A16, from ViewPacked) -> device layout bytes.
std::vector<uint8_t> RepackW4A16(const PackedWeight& packed);

// The wgmma kernel's permuted activations (m rounded up to 64, times K, 2 bytes each);
// the split-K reduction stays in shared memory. With zero points, the scratch of their
// term (w4a16_zero_points.h) follows, at W4A16ZeroPointScratchOffset; in activation
// order, the gathered inputs (w4a16_act_order.h), at W4A16GatherOffset.
size_t W4A16WorkspaceBytes(const WeightShape& shape, int64_t m);
size_t W4A16ZeroPointScratchOffset(const WeightShape& shape, int64_t m);
size_t W4A16GatherOffset(const WeightShape& shape, int64_t m);

// Enqueues y = x * W^T (+ args.residual, kF32, kF16 or kBF16, when set). args.x must be
// 16-byte aligned (cudaMalloc'd buffers are), x_dtype kF16 or kBF16, y_dtype kF32, kF16 or
// kBF16, m >= 1. A weight with zero points needs args.workspace: the decode kernels and the
// wgmma GEMM take them in their dequantization; for the mma.sync kernels (a forced split,
// or no wgmma) their term (w4a16_zero_points.h) is computed there first and added as the
// kernel's residual. So does one in activation order: its inputs are gathered there first
// (w4a16_act_order.h).
// Never synchronizes.
cudaError_t LaunchW4A16(const GemmArgs& args);

// Tuning knobs for tests and benchmarks; a default-constructed value is what
// LaunchW4A16 uses.
struct W4A16Options {
  // CTAs that split K (1, 2, 4 or 8; 0 picks the kernel and the split from M, the shape
  // and the device). A nonzero value forces the mma.sync cluster kernels at every M. More
  // than 1 needs sm_90 (cluster launch); the launch fails with cudaErrorInvalidValue
  // before that.
  int splits = 0;
  // 128-row groups per CTA of the wgmma kernel (1 or 2; 0 lets the launch choose). A
  // nonzero value forces the wgmma kernel at every M on a device that runs it (sm_90a),
  // with `splits` if that is set too.
  int wgmma_groups = 0;
  // The wgmma kernel's token tile: 64 up to 64 tokens, or beyond 128 tokens 128 or 256
  // (0 lets the launch choose); tests and tuning.
  int wgmma_tokens = 0;
  // Strips per warp of the decode kernel up to 8 tokens (1 or 2; 0 lets the launch
  // choose), where that kernel runs (one strip: its grid covers the row sets at once;
  // two: in at most 4 turns); tests and tuning.
  int decode_strips = 0;
  // CTAs (a cluster) sharing each row set of the decode kernel's two-strip tiles (1, 2 or
  // 4; 0 lets the launch choose: more than one where the row sets are fewer than the
  // SMs), where those run; tests and tuning. More than 1 needs sm_90 (cudaErrorInvalidValue
  // before).
  int decode_cluster = 0;
  // The stream-K grid of the decode kernel's two-strip tiles (decode_stream.cuh), which
  // needs args.sync: 0 lets the launch choose (StreamPays, decode_plan.h), 1 never, 2
  // wherever those tiles run; tests and tuning.
  int decode_stream = 0;
  // Warps a CTA of the decode kernel (8, or 16: all of them on one row set of one strip,
  // two CTAs an SM; 0 lets the launch choose), where that kernel runs; tests and tuning.
  int decode_warps = 0;
};
cudaError_t LaunchW4A16(const GemmArgs& args, const W4A16Options& options);

// A gated MLP's gate and up projections and their product in one launch:
// y = act(x * W_gate^T) * (x * W_up^T), elementwise (SwiGLU with kSilu, GeGLU with
// kGeluTanh...), with args.weight = W_gate and `up` the device layout of W_up (same shape,
// group size and zero points or none). Both weights stream once, the two products stay in
// fp32 until y is stored. No residual. For m <= kW4A16GluMaxM (decode sizes;
// cudaErrorInvalidValue beyond, for weights in activation order, and for what LaunchW4A16
// rejects).
inline constexpr int64_t kW4A16GluMaxM = 16;
cudaError_t LaunchW4A16Glu(const GemmArgs& args, const void* up, Activation act);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_W4A16_H_
