// The W2A8 weight format of the wgmma GEMM (wgmma_gemm.cuh), for many tokens on sm_90a.
// The prologue (w2a8_prologue.cuh) has quantized the activations to int8 straight into
// the order of wgmma's B operand (PermuteKernel's), so no permute kernel runs. A 128-row
// group's 128-k chunk is four consecutive row groups' units (w2a8_layout.h): 1 KB each,
// all four in one tensor copy. Field j of a lane's four words is the A fragment of k32 step j
// (codes c = t + 1 in 0..2, unsigned), so dequantizing is one shift and one AND per
// register; the tensor cores multiply u8 codes by s8 activations into int32, exact. The
// sum over k of c x is the wanted t x plus the row's activation sum, which Finish
// subtracts (once, in the CTA of split 0) before both scales.
#ifndef QMM_KERNELS_CUDA_W2A8_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W2A8_WGMMA_CUH_

#include "kernels/cuda/gemm_groups.h"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/w2a8_layout.h"
#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_gemm.cuh"
#include "kernels/cuda/wgmma_layout.h"

namespace qmm::cuda::w2a8 {

// Where the wgmma path puts the permuted int8 activations: after the launch workspace
// of w2a8_layout.h.
constexpr int64_t WgmmaXOffset(const Geometry& g, int64_t m) { return Workspace(g, m).total; }
constexpr int64_t WgmmaWorkspaceBytes(const Geometry& g, int64_t m) {
  return WgmmaXOffset(g, m) + PermutedXBytes(m, g.k) / 2;
}

struct WgmmaFormat {
  struct Params : w4a16::Params {
    const float* x_scale;
    const int32_t* x_sum;
    int64_t row_groups;
    // The layout's row groups as rows of K / 128 units: a box is a 128-row group's chunk,
    // 4 units of 1 KB, in one copy (on the H200 up to 12% faster at 64 and 256 tokens
    // than four bulk copies).
    CUtensorMap units;
  };
  using Acc = int;
  static constexpr int kXBytes = 1;
  static constexpr bool kXPermuted = true;
  static constexpr int kStagePermuteTokens = 0;
  static constexpr int kSteps = 4;
  // Up to twelve stages: with six, its consumers spent 28% of their samples waiting for a
  // full stage (ncu, 8192 x 8192, 64 tokens); twelve took 8192 x 8192 and 14336 x 4096
  // 5-9% faster at 17-32 tokens, the other cells 0-2% (H200, docs/performance-log.md,
  // session 33).
  static constexpr int kMaxStages = 12;
  // One stage's weights before the kernel's wait (wgmma_gemm.cuh), the rest after it with
  // their activations. The GEMM's CTAs start only after the prologue's (at its exit) or
  // beside them, so little of the wait is left to fill, and a whole ring of weights ahead
  // of the activations held back the first stage: on the H200 (session 48) one stage
  // took 1.6-7.1% off at 48-256 tokens on the five benchmark shapes (8192x28672 at 64
  // 37.38 -> 35.09 us, 4096x4096 13.58 -> 12.62) and 12.8% off 4096x14336 at 32; the other
  // 32-token cells moved within 0.5%.
  static constexpr int PreWaitStages(int /*nt*/) { return 1; }
  // A one-group CTA's batch is a whole chunk (its A registers are 16 a chunk): twice the
  // wgmmas in flight at each wait took W2A8 beyond 16 tokens 1-2.6% faster on the H200
  // (8192 x 28672 at M = 64: 49.2 -> 47.9 us), 4096 x 4096 at M = 17 1.6% slower.
  static constexpr bool kWholeChunks = true;
  // 256-token tiles, six stages of 36 KB.
  static constexpr bool kWideTiles = true;
  // K splits in powers of two only: any count (A16Format::kAnySplits) took W2A8 at 64
  // tokens 4-9% longer on 11008-28672 x 4096 (H100, session 74).
  static constexpr bool kAnySplits = false;
  static constexpr int kGroupStageBytes = 4 * kUnitBytes;
  // What a one-group CTA's chunk costs against a two-group one's (wgmma_gemm_launch.cuh
  // Plan). One-group tiles run two CTAs an SM (`paired` where the plan puts two on an SM
  // at once, which its cost counts one after the other). H200, both forced, session 46
  // (the epilogue of session 45): paired 64-token tiles took 1.04-1.14x the time of
  // two-group ones (8192 x 28672 at M = 64: 41.31 against 38.05 us; 16384 x 28672 72.41
  // against 63.33; 4096 x 28672 26.08 against 25.16; 8192 x 22016 at M = 48 40.41
  // against 36.73), so 0.55 a chunk in the plan's count. Paired 32-token tiles took
  // 0.96x (4096 x 28672) to 1.06x (16384 x 28672) of it in session 46, and in session 52
  // 1.07x on 8192 x 28672 (30.7-32.0 against 28.3-30.0 us at 17-32 tokens) and 1.01x on
  // 4096 x 28672 (17.5-18.4 against 17.3-18.3), so 0.5 there, where a tie takes two
  // groups (0.45 since session 33, fitted at 0.91x on 8192 x 28672). One group a CTA
  // alone on its SM: 0.5 for 64-token tiles, by which 4096 x 14336 at M = 48 / 64 takes
  // 112 one-group CTAs (16.73 / 17.02 us in session 46) rather than 112 two-group ones
  // split two ways (18.33 / 18.53); 0.65 for 32-token tiles, which session 33 measured
  // 2-6% slower there and faster on 8192 x 8192 at M = 32 (19.5 against 22.3 us).
  static constexpr double OneGroupChunkCost(int nt, int /*splits*/, bool paired) {
    if (nt >= 64) return paired ? 0.55 : 0.5;
    return paired ? 0.5 : 0.65;
  }
  // A CTA's fill and reduction in the plan's count, up to 64 tokens: 10 of a one-group
  // CTA's chunks, 6 of a two-group one's (which cost about twice as much: the factor
  // above), so about the same time either way. On the H200 (session 54, 22
  // shapes at 24-64 tokens against 2 and 2) every plan this moves measured faster: 4096
  // x 22016 at 24 / 32 tokens 23.7 / 24.8 -> 17.0 / 17.1 us and 8192 x 22016 32.7 / 34.3
  // -> 28.0 (two groups unsplit, not split four ways), 14336 x 11008 13-23%, 4096 x 57344
  // at 48 / 64 13%, 2048 x 5120 at 24 / 32 9% (one group); 12 for both (an offline fit)
  // also moved 8192-28672 x 3072 to one group split four ways, 12-45% slower there.
  static constexpr wgmma_gemm::GroupFill GroupFillChunks(int nt) {
    return nt <= 64 ? wgmma_gemm::GroupFill{10, 6} : wgmma_gemm::GroupFill{};
  }

  // Logical core c (16 k) of step c / 2 holds the physical words 16 (c % 2) + 4t + c / 2.
  __device__ static int CoreWord(int c, int t) { return c % 2 * 16 + 4 * t + c / 2; }
  // Where physical word w (0..31) of token tok's chunk `chunk` goes in the permuted
  // activations of nt-token tiles: position w % 16 / 4 of core 2 (w % 4) + w / 16, the
  // inverse of CoreWord. The prologue writes the words there itself
  // (kXPermuted), which spares the launch the permute kernel.
  __device__ static int64_t PermutedWordOffset(int64_t tok, int nt, int64_t chunks, int64_t chunk,
                                               int w) {
    return wgmma_gemm::PermutedPieceOffset(tok, nt, wgmma_gemm::kChunkK, chunks, chunk, 0,
                                           2 * (w % 4) + w / 16) +
           w % 16 / 4 * 4;
  }

  // Row groups past the last read as zeros (never stored).
  __device__ static void Load(uint8_t* dst, const Params& p, int64_t group, int64_t chunk,
                              uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    w4a16::BulkTensorCopy(dst, &p.units, static_cast<int>(chunk * kUnitBytes / 8),
                          static_cast<int>(group * 4), bar);
#endif
  }

  // The warp's strip is row block warp % 2 of the group's row group warp / 2; both
  // halves of the chunk are fields of the same 16 bytes.
  using Raw = uint4;
  __device__ static int2 ThreadOffsets(int warp, int lane) {
    return make_int2(warp / 2 * kUnitBytes + warp % 2 * kBytesPerRowBlock + lane * 16, 0);
  }
  __device__ static Raw Fetch(const Params&, const uint8_t* w, const uint8_t*, int /*half*/) {
    return *reinterpret_cast<const uint4*>(w);
  }

  template <bool>
  __device__ static void Dequant(const Raw& w, int half, uint32_t (*a)[4]) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int shift = 2 * (2 * half + s);
      a[s][0] = w.x >> shift & 0x03030303u;
      a[s][1] = w.y >> shift & 0x03030303u;
      a[s][2] = w.z >> shift & 0x03030303u;
      a[s][3] = w.w >> shift & 0x03030303u;
    }
  }

  template <int J, bool>
  __device__ static void Mma(int (&d)[J][4], const uint32_t (&a)[4], uint64_t desc,
                             bool accumulate) {
#ifdef QMM_WGMMA
    wgmma::MmaRsU8S8<J>(d, a, desc, accumulate);
#endif
  }

  __device__ static w4a16::RowScales LoadRowScales(const Params& p, int64_t group, int warp,
                                                   int lane) {
    const int64_t rows = p.row_groups * kRowsPerGroup;
    const int64_t row = group * 128 + warp * 16 + lane / 4;
    const auto* ws = reinterpret_cast<const float*>(p.s);
    // Rows past the layout: never stored.
    return w4a16::RowScales{row < rows ? ws[row] : 0.f, row + 8 < rows ? ws[row + 8] : 0.f};
  }

  __device__ static float4 Finish(const Params& p, const w4a16::RowScales& rs, int64_t tok,
                                  int split, const int (&d)[4]) {
    const float lo = rs.lo;
    const float hi = rs.hi;
    // Tokens past M are never stored; read the last one's terms instead.
    const int64_t t0 = tok < p.m ? tok : p.m - 1;
    const int64_t t1 = tok + 1 < p.m ? tok + 1 : p.m - 1;
    const float sum0 = split == 0 ? static_cast<float>(p.x_sum[t0]) : 0.f;
    const float sum1 = split == 0 ? static_cast<float>(p.x_sum[t1]) : 0.f;
    const float s0 = p.x_scale[t0];
    const float s1 = p.x_scale[t1];
    return make_float4(
        (static_cast<float>(d[0]) - sum0) * s0 * lo, (static_cast<float>(d[1]) - sum1) * s1 * lo,
        (static_cast<float>(d[2]) - sum0) * s0 * hi, (static_cast<float>(d[3]) - sum1) * s1 * hi);
  }

  // args.workspace is the launch workspace of w2a8_layout.h followed by the permuted
  // activations.
  static uint8_t* PermutedX(const GemmArgs& args) {
    const Geometry g(args.shape.n, args.shape.k);
    return static_cast<uint8_t*>(args.workspace) + WgmmaXOffset(g, args.m);
  }
  static cudaError_t MakeParams(const GemmArgs& args, Params* p) {
    const Geometry g(args.shape.n, args.shape.k);
    const Workspace ws(g, args.m);
    auto* base = static_cast<uint8_t*>(args.workspace);
    *p = Params{};
    p->w = static_cast<const uint8_t*>(args.weight);
    p->s = p->w + g.code_bytes();
    p->x = args.x;
    p->y = args.y;
    p->m = args.m;
    p->n = args.shape.n;
    p->k = args.shape.k;
    p->groups = (args.shape.n + 127) / 128;
    p->chunks = static_cast<int32_t>(g.k_blocks);
    p->splits = 1;
    p->y_dtype = args.y_dtype;
    p->residual = args.residual;
    p->residual_dtype = args.residual_dtype;
    p->x_scale = reinterpret_cast<const float*>(base + ws.x_scale);
    p->x_sum = reinterpret_cast<const int32_t*>(base + ws.x_sum);
    p->row_groups = g.row_groups;
    const int64_t row_bytes = g.k_blocks * kUnitBytes;
    return EncodeRowsMap(&p->units, p->w, g.row_groups, row_bytes, row_bytes, kUnitBytes, 4);
  }
};

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_WGMMA_CUH_
