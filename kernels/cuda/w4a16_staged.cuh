// The W4A16 kernel for larger M: a multi-stage shared-memory pipeline.
//
// A CTA of 8 warps owns R groups (8R strips, 128R rows of W), 8T tokens and a contiguous
// range of 128-k chunks. Each chunk (weights, their scales and the activations) is one
// stage (on sm_90 the weights and scales arrive by bulk copy on an mbarrier, the
// activations by cp.async; before sm_90 all by cp.async); every warp multiplies its R
// strips against all 8T tokens, so the activations, staged once, feed 8R strips.
#ifndef QMM_KERNELS_CUDA_W4A16_STAGED_CUH_
#define QMM_KERNELS_CUDA_W4A16_STAGED_CUH_

#include "kernels/cuda/w4a16_common.cuh"

namespace qmm::cuda::w4a16 {

// T tiles of 8 tokens, R groups of 128 rows (R strips per warp).
template <int T, int R>
struct StagedTile {
  // Three chunks in flight while one is computed (deeper pipelines measured no faster on
  // the H200: they cost CTAs per SM).
  static constexpr int kStages = 4;
  static constexpr int kRows = kGroupRows * R;
  static constexpr int kWeightBytes = R * kGroupChunkBytes;
  static constexpr int kScaleBytes = R * kGroupScaleBytes;
  static constexpr int kXBytes = T * 8 * kChunkK * 2;
  static constexpr int kStageBytes = kWeightBytes + kScaleBytes + kXBytes;
  // The stages start after the mbarriers, 128-byte aligned.
  static constexpr int kStagesOffset = 128;
  static_assert(kStages * 8 <= kStagesOffset);
  // The partial sums of the whole CTA (the tile buffer, TileIndex) reuse the stages.
  static constexpr int kReduceBytes = T * 8 * kRows * 4;
  static constexpr int kSmemBytes =
      kStagesOffset + (kStages * kStageBytes > kReduceBytes ? kStages * kStageBytes : kReduceBytes);
};

// Groups past the last one (the tail CTA of N when R > 1) read the last group again:
// their rows are never stored, and every copy stays in bounds.
__device__ inline int64_t ClampGroup(const Params& p, int64_t group) {
  return group < p.groups ? group : p.groups - 1;
}

// Fills `stage` with chunk `chunk`: R groups' weights and scales, 8T tokens of x.
template <int T, int R>
__device__ inline void LoadStage(const Params& p, uint8_t* stage, uint64_t* bar, int chunk,
                                 int64_t group0, int64_t tok0) {
  using Tl = StagedTile<T, R>;
  auto weights = [&](int r) {
    return p.w + ClampGroup(p, group0 + r) * p.w_group_stride + chunk * p.w_chunk_stride;
  };
  auto scales = [&](int r) {
    return p.s + ClampGroup(p, group0 + r) * p.s_group_stride + chunk * p.s_chunk_stride;
  };
#if __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    MbarExpectBytes(bar, Tl::kWeightBytes + Tl::kScaleBytes);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      BulkCopy(stage + r * kGroupChunkBytes, weights(r), kGroupChunkBytes, bar);
      BulkCopy(stage + Tl::kWeightBytes + r * kGroupScaleBytes, scales(r), kGroupScaleBytes, bar);
    }
  }
#else
  (void)bar;
  constexpr int kGroupPieces = kGroupChunkBytes / 16;
  static_assert(Tl::kWeightBytes / 16 % kThreads == 0);
#pragma unroll
  for (int i = 0; i < Tl::kWeightBytes / 16 / kThreads; ++i) {
    const int piece = threadIdx.x + i * kThreads;
    CpAsync16(stage + piece * 16, weights(piece / kGroupPieces) + (piece % kGroupPieces) * 16,
              true);
  }
  constexpr int kScalePieces = Tl::kScaleBytes / 16;
  static_assert(kScalePieces <= kThreads);
  if (threadIdx.x < kScalePieces) {
    constexpr int kPerGroup = kGroupScaleBytes / 16;
    CpAsync16(stage + Tl::kWeightBytes + threadIdx.x * 16,
              scales(threadIdx.x / kPerGroup) + (threadIdx.x % kPerGroup) * 16, true);
  }
#endif
  // Activations: 8T rows of 128 k, stored in fragment order [block][tile][h][g][t] so that
  // lane (g, t) reads k = 16t + 8h .. +7 of token g as one conflict-free 16-byte load.
  constexpr int kXPieces = Tl::kXBytes / 16;
  const auto* x = static_cast<const uint8_t*>(p.x);
#pragma unroll
  for (int i = 0; i < (kXPieces + kThreads - 1) / kThreads; ++i) {
    const int piece = threadIdx.x + i * kThreads;
    if (kXPieces % kThreads == 0 || piece < kXPieces) {
      const int row = piece / 16;
      const int kp = piece % 16;
      const int64_t tok = tok0 + row;
      const bool ok = tok < p.m;
      const int dst = ((((kp / 8) * T + row / 8) * 2 + kp % 2) * 8 + row % 8) * 4 + (kp % 8) / 2;
      const uint8_t* src = x + ((ok ? tok : 0) * p.k + int64_t{chunk} * kChunkK + kp * 8) * 2;
      CpAsync16(stage + Tl::kWeightBytes + Tl::kScaleBytes + dst * 16, src, ok);
    }
  }
}

// acc += scale * (this chunk's product), for the warp's R strips and all 8T tokens.
template <int T, int R, bool kBf16>
__device__ inline void ComputeStage(const uint8_t* stage, float (&acc)[R][T][4]) {
  using Tl = StagedTile<T, R>;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const uint8_t* xs = stage + Tl::kWeightBytes + Tl::kScaleBytes;
  float part[R][T][4] = {};
#pragma unroll
  for (int blk = 0; blk < kChunkBlocks; ++blk) {
    uint4 wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wq[r] = *reinterpret_cast<const uint4*>(stage + (warp * R + r) * kStripChunkBytes +
                                              blk * kBlockBytes + lane * 16);
    }
    uint4 xb[T];
#pragma unroll
    for (int tile = 0; tile < T; ++tile) {
      xb[tile] = *reinterpret_cast<const uint4*>(xs + (((blk * T + tile) * 2) * 32 + lane) * 16);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      MmaStep<T, 0, kBf16>(wq[r].x, xb, part[r]);
      MmaStep<T, 1, kBf16>(wq[r].y, xb, part[r]);
    }
#pragma unroll
    for (int tile = 0; tile < T; ++tile) {
      xb[tile] =
          *reinterpret_cast<const uint4*>(xs + (((blk * T + tile) * 2 + 1) * 32 + lane) * 16);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      MmaStep<T, 0, kBf16>(wq[r].z, xb, part[r]);
      MmaStep<T, 1, kBf16>(wq[r].w, xb, part[r]);
    }
  }
  const int g = lane / 4;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint32_t pair = *reinterpret_cast<const uint32_t*>(
        stage + Tl::kWeightBytes + (warp * R + r) * kStripScaleBytes + g * 4);
    ApplyScale<T>(pair, part[r], acc[r]);
  }
}

// Grid: x = token tiles (fastest, so the CTAs sharing a weight tile run together and
// read it once from HBM), y = sets of R row groups, z = K splits (one cluster).
template <int T, int R, bool kBf16>
__global__ void __launch_bounds__(kThreads) StagedKernel(const __grid_constant__ Params p) {
  using Tl = StagedTile<T, R>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint8_t* stages = smem + Tl::kStagesOffset;
  const int64_t tok0 = int64_t{blockIdx.x} * T * 8;
  const int64_t group0 = int64_t{blockIdx.y} * R;
  const int split = static_cast<int>(blockIdx.z);
  const int c_begin = ChunkBegin(p, split);
  const int count = ChunkBegin(p, split + 1) - c_begin;
  constexpr int kStages = Tl::kStages;
#if __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(&bars[s]);
    FenceBarrierInit();
  }
  __syncthreads();
#endif

  float acc[R][T][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) {
      LoadStage<T, R>(p, stages + s * Tl::kStageBytes, &bars[s], c_begin + s, group0, tok0);
    }
    CpAsyncCommit();
  }
  for (int c = 0; c < count; ++c) {
    const int slot = c % kStages;
    CpAsyncWait<kStages - 2>();
#if __CUDA_ARCH__ >= 900
    MbarWait(&bars[slot], (c / kStages) & 1);
#endif
    // Chunk c is visible to all, and every warp is done with the slot refilled below.
    __syncthreads();
    const int next = c + kStages - 1;
    // The last load is issued in this iteration: a dependent launch after this kernel
    // may take its place (this one is launched without the attribute: w4a16.cu).
    if (c == max(0, count - kStages)) AllowDependentLaunch();
    if (next < count) {
      LoadStage<T, R>(p, stages + (next % kStages) * Tl::kStageBytes, &bars[next % kStages],
                      c_begin + next, group0, tok0);
    }
    CpAsyncCommit();
    ComputeStage<T, R, kBf16>(stages + slot * Tl::kStageBytes, acc);
  }
  CpAsyncWait<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  auto* red = reinterpret_cast<float*>(stages);
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int tile = 0; tile < T; ++tile) {
      PutFragment<Tl::kRows>(
          red, warp * R + r, tile, lane,
          make_float4(acc[r][tile][0], acc[r][tile][1], acc[r][tile][2], acc[r][tile][3]));
    }
  }
  ReduceAndStore<T * 8, Tl::kRows>(p, red, tok0, group0 * kGroupRows, split);
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_STAGED_CUH_
