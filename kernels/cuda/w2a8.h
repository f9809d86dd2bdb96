// W2A8: ternary weights (2-bit codes c = t + 1) times int8 activations, int32 accumulation
// on tensor cores (mma.m16n8k32 u8 x s8 with the weights in the M slot, so 1..8 tokens
// fill one n8 tile), both scales applied at the end. The device layout is in
// w2a8_layout.h.
//
// One launch is two kernels on the stream: a prologue that quantizes each activation row
// to int8 (the proto's rule, bit-identical to QuantizeRowsInt8), sums it and zeroes the
// mma.sync GEMM's split-K workspace, and the matmul, which on sm_90 starts early through
// programmatic dependent launch and streams its first weight bytes while the prologue still runs.
// Up to 16 tokens, the decode kernel (w2a8_decode.cuh): a persistent grid streaming the
// weight units through registers, the warps of a CTA sharing each row group's K and
// summing their partial sums in shared memory. Beyond, on sm_90a, the wgmma GEMM of the
// 16-bit schemes (wgmma_gemm.cuh) with the W2A8 format (w2a8_wgmma.cuh: u8 x s8 wgmma,
// int32 sums, the prologue writing the int8 activations in the order of wgmma's B
// operand, so that no permute kernel runs as for the 16-bit schemes). On
// other devices, or with a forced k split, the mma.sync GEMM (w2a8_gemm.cuh): each warp
// takes 64 tokens and the four warps of a CTA four neighbouring row groups, so that
// activations loaded once serve four warps from L1, and CTAs split K only as far as it
// takes to fill the GPU.
#ifndef QMM_KERNELS_CUDA_W2A8_H_
#define QMM_KERNELS_CUDA_W2A8_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cuda/gemm_args.h"
#include "kernels/format.h"

namespace qmm::cuda {

// Canonical packed W2A8 (scheme kW2A8, from ViewPacked) -> device layout bytes.
std::vector<uint8_t> RepackW2A8(const PackedWeight& packed);

// The workspace of one launch of m rows: 4*m*N bytes of partial sums plus the quantized
// activations (m*K bytes), their copy permuted for the wgmma GEMM (m rounded up to 128,
// times K bytes) and small per-row and per-row-group arrays.
size_t W2A8WorkspaceBytes(const WeightShape& shape, int64_t m);

// Enqueues y = x * W^T, or DyT(x) * W^T with args.dyt (applied in fp32 before the
// quantization, bit for bit as LaunchDyT's fp32 output would be quantized), or
// RMSNorm(x) * W^T with args.rms_norm (weight * x quantized, the row's norm scale
// multiplied into its activation scale; not with a DyT), plus args.residual when set (in
// fp32, before y's rounding). x_dtype kF16,
// kBF16 or kF32, y_dtype kF32, kF16 or kBF16, m >= 1,
// args.x 16-byte aligned and args.workspace W2A8WorkspaceBytes(shape, m) bytes (both
// 256-byte aligned as cudaMalloc returns them). Never synchronizes.
cudaError_t LaunchW2A8(const GemmArgs& args);

// The most rows LaunchW2A8Glu takes (two token tiles of the decode kernel, a row set each).
inline constexpr int64_t kW2A8GluMaxM = 16;

// A gated MLP's gate and up projections and act(gate) * up in one launch: args.weight is
// the gate and `up` the up weight of the same shape (device layout, 16-byte aligned),
// args.y [m, n] gets act(x W_gate^T) * (x W_up^T), with args.dyt or args.rms_norm applied
// to x once for both; m <= kW2A8GluMaxM. No residual. Otherwise as LaunchW2A8.
cudaError_t LaunchW2A8Glu(const GemmArgs& args, const void* up, Activation act);

// Tuning knobs for tests and benchmarks; a default-constructed value is what LaunchW2A8
// uses.
struct W2A8Options {
  // M <= 8: units (k blocks) of weights per slot of the decode kernel, 1 or 2; 0 picks
  // from the shape and the device.
  int decode_units = 0;
  // M <= 8: row groups per row set of the decode kernel, 1 or 2 (two take one-unit slots,
  // so not with decode_units 2, and no clusters); 0 picks from the shape and the device.
  int decode_groups = 0;
  // M <= 16: CTAs (a cluster) sharing each row group of the decode kernel's one-unit
  // tiles, 1, 2 or 4; 0 picks (more than one where the row groups are fewer than the
  // SMs). More than 1 needs sm_90 (cudaErrorInvalidValue before).
  int decode_cluster = 0;
  // M <= 16: the stream-K grid of the decode kernel (decode_stream.cuh), which needs
  // args.sync: 0 lets the launch choose (where the row groups outnumber the CTAs that fit
  // and whole groups per CTA would leave many idle), 1 never, 2 wherever the decode
  // kernel runs.
  int decode_stream = 0;
  // Forces the mma.sync GEMM (at every M where the wgmma GEMM does not run) with this
  // many CTAs splitting the K of each four row groups (clamped to K / 128). 0 lets the
  // launch choose the kernel and the split.
  int64_t k_splits = 0;
  // 1 or 2 forces the wgmma GEMM (with that many 128-row groups per CTA) at every M
  // where it runs (sm_90a); 0 lets the launch choose. A nonzero k_splits alone keeps
  // the kernels above beyond 16 tokens.
  int wgmma_groups = 0;
  // The wgmma GEMM's K split (1, 2, 4 or 8; clamped to the chunks); 0 lets the launch
  // choose.
  int wgmma_splits = 0;
  // The wgmma GEMM's token tile: 64 up to 64 tokens, or beyond 128 tokens 128 or 256 (0
  // lets the launch choose).
  int wgmma_tokens = 0;
};
cudaError_t LaunchW2A8(const GemmArgs& args, const W2A8Options& options);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_W2A8_H_
