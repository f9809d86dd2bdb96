// The W4A16 kernel for few tokens on small weights: every warp streams one strip's
// weights from HBM straight into registers, two chunks ahead, with no shared memory and
// no block barrier in the main loop; the few activations come through L1. It needs no
// pipeline fill, which is what small (launch-bound) weights pay for most.
#ifndef QMM_KERNELS_CUDA_W4A16_DIRECT_CUH_
#define QMM_KERNELS_CUDA_W4A16_DIRECT_CUH_

#include "kernels/cuda/w4a16_common.cuh"

namespace qmm::cuda::w4a16 {

// Grid: x = token tiles, y = groups of 128 rows (one strip per warp), z = K splits (one
// cluster). T tiles of 8 tokens; lanes whose token is past M read no x and use zeros.
template <int T, bool kBf16>
__global__ void __launch_bounds__(kThreads) DirectKernel(const __grid_constant__ Params p) {
  // Chunks in flight per warp: more registers per thread cost warps per SM, which
  // measured slower on the H200 (depth 3 and 4 no faster, 6 slower).
  constexpr int kDepth = 2;
  // A dependent launch (dependent_launch.h) that simply waits: this kernel takes the small
  // weights, where the overlap would be small too.
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  __shared__ __align__(16) float red[T * 8 * kGroupRows];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int64_t tok0 = int64_t{blockIdx.x} * T * 8;
  const int64_t group = blockIdx.y;
  const int split = static_cast<int>(blockIdx.z);
  const int c_begin = ChunkBegin(p, split);
  const int count = ChunkBegin(p, split + 1) - c_begin;

  const uint8_t* wp = p.w + group * p.w_group_stride + c_begin * p.w_chunk_stride +
                      warp * kStripChunkBytes + lane * 16;
  const uint8_t* sp =
      p.s + group * p.s_group_stride + c_begin * p.s_chunk_stride + warp * kStripScaleBytes + g * 4;
  // This lane's k range of its tokens' rows: k = 16t .. 16t + 15 of each block.
  const uint8_t* xr[T];
#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    const int64_t tok = tok0 + tile * 8 + g;
    xr[tile] = tok < p.m ? static_cast<const uint8_t*>(p.x) +
                               (tok * p.k + int64_t{c_begin} * kChunkK + 16 * t) * 2
                         : nullptr;
  }

  uint4 wq[kDepth][kChunkBlocks];
  uint32_t sq[kDepth];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    if (i < count) {
      wq[i][0] = LoadStream(wp + i * p.w_chunk_stride);
      wq[i][1] = LoadStream(wp + i * p.w_chunk_stride + kBlockBytes);
      sq[i] = __ldg(reinterpret_cast<const uint32_t*>(sp + i * p.s_chunk_stride));
    }
  }
  float acc[T][4] = {};
  for (int base = 0; base < count; base += kDepth) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const int c = base + i;
      if (c >= count) break;
      const uint4 w0 = wq[i][0];
      const uint4 w1 = wq[i][1];
      const uint32_t scale = sq[i];
      if (c + kDepth < count) {
        const int64_t ahead = int64_t{c + kDepth};
        wq[i][0] = LoadStream(wp + ahead * p.w_chunk_stride);
        wq[i][1] = LoadStream(wp + ahead * p.w_chunk_stride + kBlockBytes);
        sq[i] = __ldg(reinterpret_cast<const uint32_t*>(sp + ahead * p.s_chunk_stride));
      }
      // x[blk][h][tile]: this chunk's activations (L1 hits after the first warp).
      uint4 xb[kChunkBlocks][2][T];
#pragma unroll
      for (int blk = 0; blk < kChunkBlocks; ++blk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int tile = 0; tile < T; ++tile) {
            xb[blk][h][tile] =
                xr[tile] != nullptr
                    ? __ldg(reinterpret_cast<const uint4*>(
                          xr[tile] + (int64_t{c} * kChunkK + blk * kBlockK + 8 * h) * 2))
                    : make_uint4(0, 0, 0, 0);
          }
        }
      }
      float part[T][4] = {};
      MmaStep<T, 0, kBf16>(w0.x, xb[0][0], part);
      MmaStep<T, 1, kBf16>(w0.y, xb[0][0], part);
      MmaStep<T, 0, kBf16>(w0.z, xb[0][1], part);
      MmaStep<T, 1, kBf16>(w0.w, xb[0][1], part);
      MmaStep<T, 0, kBf16>(w1.x, xb[1][0], part);
      MmaStep<T, 1, kBf16>(w1.y, xb[1][0], part);
      MmaStep<T, 0, kBf16>(w1.z, xb[1][1], part);
      MmaStep<T, 1, kBf16>(w1.w, xb[1][1], part);
      ApplyScale<T>(scale, part, acc);
    }
  }

#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    PutFragment<kGroupRows>(red, warp, tile, lane,
                            make_float4(acc[tile][0], acc[tile][1], acc[tile][2], acc[tile][3]));
  }
  ReduceAndStore<T * 8, kGroupRows>(p, red, tok0, group * kGroupRows, split);
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_DIRECT_CUH_
