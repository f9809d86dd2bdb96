// The W2A8 mma.sync matmul kernel for many tokens where the wgmma GEMM does not run (the
// second kernel of a launch; see w2a8.h for the scheme and w2a8_layout.h for the byte
// order it reads).
#ifndef QMM_KERNELS_CUDA_W2A8_GEMM_CUH_
#define QMM_KERNELS_CUDA_W2A8_GEMM_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/w2a8_layout.h"
#include "kernels/cuda/w2a8_operands.h"
#include "kernels/cuda/w2a8_ptx.cuh"
#include "kernels/dtype.h"

namespace qmm::cuda::w2a8 {

inline constexpr int kGemmWarps = 4;
inline constexpr int kGemmThreads = kGemmWarps * 32;
// Longest run of k blocks a warp sums in registers before it flushes its partial sums.
inline constexpr int kMaxSegmentBlocks = 2048;
// n8 token tiles per warp.
inline constexpr int kGemmTiles = 8;

struct GemmParams : Operands {
  int32_t* acc;        // [m, padded_rows], zeroed when a row group's K is split
  uint32_t* counters;  // [token groups, row_groups], zeroed likewise
  int padded_rows;
  int k_splits;  // CTAs per row group quad
};

// The four warps of a CTA take four consecutive row groups over the same k blocks, so
// the activation bytes one warp loads serve the other three from L1; `k_splits` CTAs
// share each group's K. One warp: its row group's units of its K share times 64 tokens
// (token group blockIdx.y); kDepth units of weights are in flight per warp while it
// computes. The warps sharing a row group add their int32 partial sums with atomics and
// the last one to finish applies the scales; a warp that covers a whole row group writes
// its result directly.
template <int kDepth>
__global__ void __launch_bounds__(kGemmThreads, 2) W2A8GemmKernel(const GemmParams p) {
  constexpr int kTiles = kGemmTiles;
  constexpr int kGroupTokens = kTiles * kTokensPerTile;
  constexpr int kUnitVectors = kUnitBytes / 16;          // 64 16-byte vectors per unit
  constexpr int kBlockVectors = kBytesPerRowBlock / 16;  // 32, one per lane
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // Unit, row and token indices fit in int (N, K <= 2^20, so units <= 2^28).
  const int split = blockIdx.x % p.k_splits;
  const int row_group = blockIdx.x / p.k_splits * kGemmWarps + warp;
  if (row_group >= p.row_groups) return;
  const int u_begin = row_group * p.k_blocks + p.k_blocks * split / p.k_splits;
  const int u_end = row_group * p.k_blocks + p.k_blocks * (split + 1) / p.k_splits;
  if (u_begin >= u_end) return;
  const int token_group = blockIdx.y;
  const int tok0 = token_group * kGroupTokens;
  const int tok_end = min(p.m, tok0 + kGroupTokens);

  const uint4* wp = p.codes + lane;
  auto unit_ptr = [&](int u, int r) {
    return reinterpret_cast<const uint8_t*>(wp + int64_t{u} * kUnitVectors + r * kBlockVectors);
  };
  uint4 buf[kDepth][kBlocksPerGroup] = {};
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (u_begin + d < u_end) {
#pragma unroll
      for (int r = 0; r < kBlocksPerGroup; ++r) buf[d][r] = LoadStream(unit_ptr(u_begin + d, r));
    }
  }
  // Everything below reads what the prologue wrote (or zeroed).
  WaitForPrerequisiteGrid();

  // This lane's activations (B fragment column g) in token tile 0; tile tt is 8 rows on.
  const int8_t* x_lane = p.xq + int64_t{tok0 + g} * p.k + t * 16;

  // acc[r][tt]: D fragments.
  int32_t acc[kBlocksPerGroup][kTiles][4] = {};
  int group = u_begin / p.k_blocks;
  int kb = u_begin - group * p.k_blocks;
  int seg_begin = u_begin;
  auto segment_end = [&](int begin) {
    return min(min((group + 1) * p.k_blocks, u_end), begin + kMaxSegmentBlocks);
  };
  int seg_end = segment_end(seg_begin);
  // Refills slot d with the unit kDepth ahead of u.
  auto prefetch = [&](int u, int d) {
    if (u + kDepth < u_end) {
#pragma unroll
      for (int r = 0; r < kBlocksPerGroup; ++r) buf[d][r] = LoadStream(unit_ptr(u + kDepth, r));
    }
  };
  // Activations of tile tt for k block kb: 16 bytes at k 16t and at 64 + 16t (zeros for
  // tokens past m).
  auto load_b = [&](int tt, uint32_t(&lo)[4], uint32_t(&hi)[4]) {
    uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
    if (tok0 + tt * kTokensPerTile + g < tok_end) {
      const int8_t* src = x_lane + int64_t{tt} * kTokensPerTile * p.k + kb * kKPerBlock;
      v0 = __ldg(reinterpret_cast<const uint4*>(src));
      v1 = __ldg(reinterpret_cast<const uint4*>(src + 64));
    }
    lo[0] = v0.x, lo[1] = v0.y, lo[2] = v0.z, lo[3] = v0.w;
    hi[0] = v1.x, hi[1] = v1.y, hi[2] = v1.z, hi[3] = v1.w;
  };

  for (int base = u_begin; base < u_end; base += kDepth) {
    // This round's prefetches are the warp's last: the next kernel may take its place.
    if (base + 2 * kDepth >= u_end) AllowDependentLaunch();
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int u = base + d;
      if (u >= u_end) break;
      // Every A fragment decoded once, then the tiles one by one.
      uint32_t a[kBlocksPerGroup][4][4];
#pragma unroll
      for (int r = 0; r < kBlocksPerGroup; ++r) {
        const uint32_t words[4] = {buf[d][r].x, buf[d][r].y, buf[d][r].z, buf[d][r].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[r][j][i] = (words[i] >> (2 * j)) & 0x03030303u;
        }
      }
      prefetch(u, d);
#pragma unroll
      for (int tt = 0; tt < kTiles; ++tt) {
        uint32_t b_lo[4], b_hi[4];
        load_b(tt, b_lo, b_hi);
#pragma unroll
        for (int r = 0; r < kBlocksPerGroup; ++r) {
#pragma unroll
          for (int j = 0; j < 4; ++j) MmaU8S8(acc[r][tt], a[r][j], b_lo[j], b_hi[j]);
        }
      }
      ++kb;
      if (u + 1 == seg_end) {
        // sum over the segment's k of c * xq for this lane's rows and tokens (c = t + 1).
        int32_t sum[kBlocksPerGroup][kTiles][4];
#pragma unroll
        for (int r = 0; r < kBlocksPerGroup; ++r) {
#pragma unroll
          for (int tt = 0; tt < kTiles; ++tt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              sum[r][tt][i] = acc[r][tt][i];
              acc[r][tt][i] = 0;
            }
          }
        }
        const int seg_blocks = seg_end - seg_begin;
        if (seg_blocks == p.k_blocks) {
          // This warp alone covers the row group: scale and store straight away.
#pragma unroll
          for (int r = 0; r < kBlocksPerGroup; ++r) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int row = group * kRowsPerGroup + r * kRowsPerBlock + g + 8 * (i / 2);
              if (row >= p.n) continue;
              const float s = p.w_scale[row];
#pragma unroll
              for (int tt = 0; tt < kTiles; ++tt) {
                const int token = tok0 + tt * kTokensPerTile + 2 * t + i % 2;
                if (token >= tok_end) continue;
                const int32_t dot = sum[r][tt][i] - p.x_sum[token];
                StoreResult(p, token, row, p.x_scale[token] * s * static_cast<float>(dot));
              }
            }
          }
        } else {
#pragma unroll
          for (int r = 0; r < kBlocksPerGroup; ++r) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int row = group * kRowsPerGroup + r * kRowsPerBlock + g + 8 * (i / 2);
#pragma unroll
              for (int tt = 0; tt < kTiles; ++tt) {
                const int token = tok0 + tt * kTokensPerTile + 2 * t + i % 2;
                if (token < tok_end) {
                  atomicAdd(p.acc + int64_t{token} * p.padded_rows + row, sum[r][tt][i]);
                }
              }
            }
          }
          // Classic last-block-done: every lane's adds are visible device-wide before lane
          // 0 counts this segment in; the warp that completes the row group reads them all.
          __threadfence();
          __syncwarp();
          uint32_t before = 0;
          uint32_t* counter = p.counters + int64_t{token_group} * p.row_groups + group;
          if (lane == 0) before = atomicAdd(counter, static_cast<uint32_t>(seg_blocks));
          before = __shfl_sync(0xffffffffu, before, 0);
          if (before + seg_blocks == p.k_blocks) {
            __threadfence();
            const int row = group * kRowsPerGroup + lane;
            if (row < p.n) {
              const float s = p.w_scale[row];
              for (int token = tok0; token < tok_end; ++token) {
                const int32_t dot =
                    __ldcg(p.acc + int64_t{token} * p.padded_rows + row) - p.x_sum[token];
                StoreResult(p, token, row, p.x_scale[token] * s * static_cast<float>(dot));
              }
            }
          }
        }
        if (kb == p.k_blocks) {
          ++group;
          kb = 0;
        }
        seg_begin = seg_end;
        seg_end = segment_end(seg_begin);
      }
    }
  }
}

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_GEMM_CUH_
