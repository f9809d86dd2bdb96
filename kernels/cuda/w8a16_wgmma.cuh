// The W8A16 weight format of the wgmma GEMM (wgmma_gemm.cuh). A 128-row group's 128-k
// chunk is, per 16-row tile of the layout (w8a16.h), four consecutive 32-k layout chunks:
// 2 KB; the group's eight row tiles come in one tensor copy. Each warp converts its row
// tile's bytes with the decode kernels' prmt conversion (exact for fp16 and bf16); the
// per-row fp32 scale multiplies the sums at the end, exactly.
#ifndef QMM_KERNELS_CUDA_W8A16_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W8A16_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/gemm_groups.h"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/w8a16_ptx.cuh"
#include "kernels/cuda/wgmma_a16_format.cuh"

namespace qmm::cuda::w8a16 {

struct WgmmaFormat : wgmma_gemm::A16Format {
  static constexpr int kRowTileChunkBytes = 2048;  // 16 rows x 128 k
  static constexpr int kGroupStageBytes = 8 * kRowTileChunkBytes;
  static constexpr int kLayoutChunkBytes = 512;  // 16 rows x 32 k
  // On the H200, permuting in the stages against PermuteKernel's copy (session 38): 32
  // tokens 0.7-10.7% faster, 64 tokens 1-9.6% faster but 4096 x 14336 (+2.2%), 128-token
  // tiles 15-21% slower.
  static constexpr int kStagePermuteTokens = 64;
  // A16Format's costs, but 0.56 where 64-token one-group CTAs split K at most two ways:
  // on the H200 (session 50) 4096 x 14336 at M = 48 / 64 took 21.03 / 22.09 us on 112
  // one-group CTAs, 20.35 / 20.96 on 56 two-group ones split two ways, which 0.56 picks;
  // 4096 x 4096 keeps one group split two ways (0.588 would flip it; 11.80 against
  // 12.12 in session 47).
  static constexpr double OneGroupChunkCost(int nt, int splits, bool /*paired*/) {
    return nt == 64 && splits <= 2 ? 0.56 : 0.65;
  }
  // A CTA's fill and reduction in the plan's count, up to 64 tokens: 5 chunks a one-group
  // CTA, 4 a two-group one. On the H200 (session 54, 23 shapes at 24-64 tokens against 2
  // and 2, and fills of 4 / 4, 6 / 6 and 10 / 6, each plan measured) 2048 x 22016 at 48 /
  // 64 tokens 25.0 -> 18.2 us (two groups unsplit), 4096 x 22016 5.7-12.4% faster, 5120 x
  // 3072 6-13% (one group split four ways), 14336 x 11008 at 48 / 64 7.5-10.3%, 2048 x
  // 4096 / 5120 at 24 / 32 1.5-1.9%; 14336 x 11008 at 24 / 32 5% slower, 5120 x 22016 at
  // 24 / 32 1%. The benchmark shapes keep their plans.
  static constexpr wgmma_gemm::GroupFill GroupFillChunks(int nt) {
    return nt <= 64 ? wgmma_gemm::GroupFill{5, 4} : wgmma_gemm::GroupFill{};
  }

  // In a 64-k block (two 32-k layout chunks), logical core j holds the physical words
  // 16 (j / 4) + j % 4 + 4t: lane t's 8 k of a layout chunk are its k16 steps' fragments.
  __device__ static int CoreWord(int j, int t) { return j / 4 * 16 + j % 4 + 4 * t; }

  struct Params : w4a16::Params {
    // The layout's row tiles as rows of 16 K bytes: a box is a group's chunk, 8 row tiles
    // of 2 KB, in one copy (on the H200 4-26% faster at 64 tokens and 3-9% at 256 than
    // eight bulk copies of 2 KB, 128 KB apart on 8192 x 8192).
    CUtensorMap tiles;
  };

  // Row tiles past the last read as zeros (never stored).
  __device__ static void Load(uint8_t* dst, const Params& p, int64_t group, int64_t chunk,
                              uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    w4a16::BulkTensorCopy(dst, &p.tiles, static_cast<int>(chunk * kRowTileChunkBytes / 8),
                          static_cast<int>(group * 8), bar);
#endif
  }

  // A 64-k block of the warp's row tile: its two 32-k layout chunks.
  struct Raw {
    uint4 w[2];
  };
  __device__ static int2 ThreadOffsets(int warp, int lane) {
    return make_int2(warp * kRowTileChunkBytes + lane * 16, 0);
  }
  __device__ static Raw Fetch(const Params&, const uint8_t* w, const uint8_t*, int blk) {
    const uint8_t* tile = w + 2 * blk * kLayoutChunkBytes;
    return Raw{{*reinterpret_cast<const uint4*>(tile),
                *reinterpret_cast<const uint4*>(tile + kLayoutChunkBytes)}};
  }

  template <bool kBf16>
  __device__ static void Dequant(const Raw& raw, int /*blk*/, uint32_t (*a)[4]) {
    using T = std::conditional_t<kBf16, __nv_bfloat16, __half>;
    w8a16::Dequant<T>(raw.w[0], *reinterpret_cast<uint32_t(*)[2][4]>(&a[0]));
    w8a16::Dequant<T>(raw.w[1], *reinterpret_cast<uint32_t(*)[2][4]>(&a[2]));
  }

  __device__ static w4a16::RowScales LoadRowScales(const Params& p, int64_t group, int warp,
                                                   int lane) {
    const int64_t rows = (p.n + 15) / 16 * 16;
    const int64_t row = group * 128 + warp * 16 + lane / 4;
    const auto* s = reinterpret_cast<const float*>(p.s);
    // Rows past the layout: never stored.
    return w4a16::RowScales{row < rows ? s[row] : 0.f, row + 8 < rows ? s[row + 8] : 0.f};
  }

  __device__ static float4 Finish(const Params& /*p*/, const w4a16::RowScales& s, int64_t /*tok*/,
                                  int /*split*/, const float (&d)[4]) {
    return make_float4(d[0] * s.lo, d[1] * s.lo, d[2] * s.hi, d[3] * s.hi);
  }

  static cudaError_t MakeParams(const GemmArgs& args, Params* p) {
    const WeightShape& shape = args.shape;
    const int64_t rows = (shape.n + 15) / 16 * 16;
    *p = Params{};
    p->w = static_cast<const uint8_t*>(args.weight);
    p->s = p->w + rows * shape.k;
    p->x = args.x;
    p->y = args.y;
    p->m = args.m;
    p->n = shape.n;
    p->k = shape.k;
    p->groups = (shape.n + 127) / 128;
    p->chunks = static_cast<int32_t>(shape.k / 128);
    p->splits = 1;
    p->y_dtype = args.y_dtype;
    p->residual = args.residual;
    p->residual_dtype = args.residual_dtype;
    return EncodeRowsMap(&p->tiles, p->w, rows / 16, 16 * shape.k, 16 * shape.k, kRowTileChunkBytes,
                         8);
  }
};

}  // namespace qmm::cuda::w8a16

#endif  // QMM_KERNELS_CUDA_W8A16_WGMMA_CUH_
