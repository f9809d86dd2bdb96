// W8A16: int8 weights with one fp32 scale per output row, times fp16 or bf16 activations,
// fp32 accumulation, on tensor cores (mma.sync m16n8k16).
//
// The weights sit in the MMA's M slot (16 output rows per tile) and the tokens in its N
// slot (8 per tile), so M = 1..8 costs one n8 tile, not a padded 16 or 64. Every weight
// byte is read from HBM once per 64 tokens (once in all for M <= 64) with 16-byte copies
// (cp.async through a per-warp shared-memory ring, several groups in flight) that give a
// lane its whole A fragment for two k16 steps, and is converted in registers:
// stored biased (q + 128), one prmt + one sub.f16x2 give two fp16 values, or fp32 magic
// numbers for bf16. The row scale is applied once to the fp32 sums.
//
// Device layout (RepackW8A16), with RT = ceil(N / 16) row tiles and C = K / 32 chunks:
//   values: [RT][C][32 lanes][16 bytes]; lane L = 4g + t holds, for rows r0 = 16*rt + g
//           and r1 = r0 + 8 and k0 = 32*c + 8*t, the words
//             (r0, k0..k0+3), (r1, k0..k0+3), (r0, k0+4..k0+7), (r1, k0+4..k0+7),
//           each byte q + 128 (rows >= N hold q = 0). The MMA's k order inside a chunk is
//           permuted so that the same lane's activations are x[token][k0..k0+7], one
//           16-byte copy; the permutation is the same for both operands, so the sum over
//           k is unchanged.
//   scales: RT * 16 fp32 (0 for rows >= N).
//
// Up to 16 tokens the decode kernel (w8a16_decode.cuh) runs where it is faster: a
// persistent one-wave grid whose warps stream the weights straight into registers, split
// K inside each CTA (or a cluster of two) and reduce through shared memory, on any sm_80+
// device; its CTAs take whole row sets where those fit at once (up to K = 8192 a CTA of 8
// warps, 16384 of 16), else split the sets by work on a stream-K grid; LaunchDecode and
// TileBeatsDecode (tile_splits.h) say where the tile kernel takes over. Beyond 16 tokens
// on sm_90a with K % 128 == 0, the wgmma GEMM shared with W4A16 (wgmma_gemm.cuh, format
// in w8a16_wgmma.cuh), beyond 64 after a small kernel that permutes the activations into
// the workspace. Otherwise (or with a forced split count), launch picks the token tile
// from M (8, 16, 32 or 64 tokens per CTA; M > 64 runs 64-token groups side by side, whose
// weight re-reads can hit L2) and, on sm_90, splits K over the CTAs of a thread-block
// cluster, reduced through distributed shared memory, so that every SM streams even when
// N is small. H200 timings and what is still missing: docs/PERFORMANCE.md.
//
// Shape constraints: none beyond ValidateShape (K % 64 == 0, any N, any M >= 1). x must
// be 16-byte aligned (cudaMalloc'd buffers are).
#ifndef QMM_KERNELS_CUDA_W8A16_H_
#define QMM_KERNELS_CUDA_W8A16_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cuda/gemm_args.h"
#include "kernels/format.h"

namespace qmm::cuda {

// Bytes of the device layout for `shape`.
int64_t W8A16DeviceBytes(const WeightShape& shape);

// Canonical packed W8A16 (from ViewPacked) -> device layout bytes.
std::vector<uint8_t> RepackW8A16(const PackedWeight& packed);

// The wgmma GEMM's permuted activations (wgmma_layout.h); the split-K reduction stays
// in shared memory.
size_t W8A16WorkspaceBytes(const WeightShape& shape, int64_t m);

// Enqueues y = x * W^T (+ args.residual when set). x_dtype kF16 or kBF16; y_dtype and
// residual_dtype kF32, kF16 or kBF16. Never synchronizes.
cudaError_t LaunchW8A16(const GemmArgs& args);

// Tuning knobs for tests and benchmarks; a default-constructed value is what
// LaunchW8A16(args) uses.
struct W8A16Options {
  // CTAs that split K: 1 to 8 (with wgmma_groups: 1, 2, 4 or 8), or 0 to pick the kernel
  // and the split from M, the shape and the device. A nonzero value forces the cluster
  // kernel, also for M <= 16. More than 1 needs sm_90 (cluster launch):
  // cudaErrorInvalidValue before that.
  int splits = 0;
  // 128-row groups per CTA of the wgmma GEMM (1 or 2; 0 lets the launch choose). A
  // nonzero value forces the wgmma GEMM at every M where it runs (sm_90a, K % 128 == 0),
  // with `splits` if that is set too.
  int wgmma_groups = 0;
  // Row tiles per warp of the decode kernel up to 8 tokens (1 or 2; 0 lets the launch
  // choose), where that kernel runs; tests and tuning.
  int decode_rows = 0;
  // CTAs (a cluster) sharing each row set of the decode kernel's two-row-tile tiles (1, 2
  // or 4; 0 lets the launch choose: more than one where the row sets are fewer than the
  // SMs), where those run; tests and tuning. More than 1 needs sm_90
  // (cudaErrorInvalidValue before).
  int decode_cluster = 0;
  // Warps per CTA of the decode kernel where its CTAs have one row set each: 8, or 16 for
  // the wide CTAs (w8a16_decode.cuh kWideWarps); 0 lets the launch choose (the wide CTAs
  // wherever they can); tests and tuning. Any value keeps the decode kernel where the
  // launch would give the tile kernel the shape (TileBeatsDecode, tile_splits.h); 8 also
  // keeps the stream-K grid and the clusters of 16-warp CTAs off, and the one-row-tile
  // tile on 8 warps.
  int decode_warps = 0;
  // The stream-K grid of the decode kernel's two-row-tile tiles on 16-warp CTAs
  // (decode_stream.cuh), which needs args.sync: 0 lets the launch choose (W8A16StreamPays,
  // decode_plan.h), 1 never, 2 wherever those tiles run without a cluster and with wide
  // CTAs allowed; tests and tuning.
  int decode_stream = 0;
  // The split-K tile kernel up to 16 tokens, with the launch's split (or `splits`), where
  // the launch would take the decode kernel; tests and tuning.
  bool tile = false;
};
cudaError_t LaunchW8A16(const GemmArgs& args, const W8A16Options& options);

// A gated MLP's gate and up projections and their product in one launch:
// y = act(x * W_gate^T) * (x * W_up^T), elementwise, with args.weight = W_gate and `up`
// the device layout of W_up (same shape). Both weights stream once through the decode
// kernel, and the two products stay in fp32 until y is stored. No residual. For m <=
// kW8A16GluMaxM (cudaErrorInvalidValue beyond, and for what LaunchW8A16 rejects): beyond 8
// rows a row set a token tile, since the two-token-tile tiles streamed slower than gate
// and up apart on the H200 (the Llama-3-8B pair: 46.2 us against 17.7 + 17.7 at M = 9).
inline constexpr int64_t kW8A16GluMaxM = 16;
cudaError_t LaunchW8A16Glu(const GemmArgs& args, const void* up, Activation act);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_W8A16_H_
