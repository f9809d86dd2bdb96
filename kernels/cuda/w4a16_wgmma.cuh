// The W4A16 kernel for many tokens (M > 16) on sm_90a: warpgroup MMA (wgmma) with the
// weights as the A operand, dequantized in registers, and the activations as the B
// operand in shared memory (mma.sync cannot keep Hopper's tensor cores busy).
//
// A CTA of two warpgroups owns two 128-row groups (warp w on strip w of each: warpgroup 0
// rows 0-63 of both, warpgroup 1 rows 64-127), NT tokens and a contiguous range of 128-k
// chunks (K split across the CTAs of a cluster, reduced through distributed shared memory
// as in the other cluster kernels). Every CTA reads the whole activation chunk from L2,
// so rows per CTA set that traffic: at M = 64 and 128 rows it was twice the weight bytes
// and L2-bound (ncu, H200). Per chunk, kStages - 1 chunks ahead:
//   - the groups' weights and scales (16.5 KB) arrive by bulk copy on the stage's
//     mbarrier, the activations (256 bytes per token) by 16-byte cp.async, whole sectors;
//   - one chunk ahead, after a barrier, each thread permutes activation pieces into one of
//     two buffers in the order wgmma reads B: per 64-k block and 8 tokens a 128-byte-
//     swizzled atom (wgmma.cuh), whose 16-byte chunk j of a token's row holds the 8
//     logical k of core j. This applies the layout's k permutation (w4a16_layout.h):
//     logical core 2s + h (step s, half h) of a block holds the physical words
//     8t + 2s + h, t = 0..3;
//   - each warp dequantizes its two strips' 8 k16 steps and its warpgroup issues 2 x 8
//     wgmmas into per-chunk partial sums (exact integer-weight products), which the
//     chunk's scales then add into the fp32 accumulators, as in the other kernels.
// Measured on the H200 against the mma.sync kernel it replaced (w4a16_staged.cuh, 32
// tokens x 256 rows): 8192 x 28672 at M = 64 91 us (was 137), M = 256 331 us (was 443).
#ifndef QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_

#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace qmm::cuda::w4a16 {

// Word i (0..3) of v; i is a constant after unrolling.
__device__ inline uint32_t WordAt(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int NT>
struct WgmmaTile {
  static_assert(NT == 32 || NT == 64);
  // Row groups per CTA: each warp owns its strip of both, so the activation chunk staged
  // once feeds 256 rows (the L2 traffic of re-reading it per CTA is what limits M = 64).
  static constexpr int kGroups = 2;
  // Chunks in flight: three ahead of the one computed.
  static constexpr int kStages = 4;
  // A stage: the groups' weights and scales (bulk copies), then the raw activations, one
  // 256-byte row per token padded to 272 so that 8 lanes reading 8 tokens' rows hit
  // distinct banks.
  static constexpr int kXRowBytes = kChunkK * 2 + 16;
  static constexpr int kGroupStageBytes = kGroupChunkBytes + kGroupScaleBytes;
  static constexpr int kRawXOffset = kGroups * kGroupStageBytes;
  static constexpr int kStageBytes = kRawXOffset + NT * kXRowBytes;
  static_assert(kStageBytes % 128 == 0);
  static constexpr int kXBytes = NT * kChunkK * 2;  // one permuted buffer
  static constexpr int kStagesOffset = 128;         // after the mbarriers
  // The permuted buffers are 1024-byte aligned (swizzle atoms) relative to a base that
  // the kernel aligns at run time (the dynamic shared memory is only 16-byte aligned).
  static constexpr int kXOffset = (kStagesOffset + kStages * kStageBytes + 1023) / 1024 * 1024;
  static constexpr int kAtomBytes = 1024;
  // n8 tiles per wgmma (4 for NT = 32, else 8).
  static constexpr int kJ = NT / 8;
  // Raw activation pieces (16 bytes) per chunk, copied with consecutive threads on
  // consecutive pieces of a token's row (whole sectors).
  static constexpr int kXPieces = NT * kChunkK * 2 / 16;
  static constexpr int kXPiecesPerThread = (kXPieces + kThreads - 1) / kThreads;
  // Pieces a thread permutes: (token, 64-k block, half of the steps), 4 x 16 bytes.
  static constexpr int kXTasks = NT * kChunkBlocks * 2;
  static constexpr int kXTasksPerThread = (kXTasks + kThreads - 1) / kThreads;
  static constexpr int kStrips = kGroups * kGroupStrips;
  static constexpr int kReduceBytes = kStrips * NT / 8 * 32 * 16;
  static constexpr int kSmemBytes =
      1024 + (kXOffset + 2 * kXBytes > kStagesOffset + kReduceBytes ? kXOffset + 2 * kXBytes
                                                                    : kStagesOffset + kReduceBytes);
};

// Grid: x = token tiles of NT, y = pairs of 128-row groups, z = K splits (one cluster).
template <int NT, bool kBf16>
__global__ void __launch_bounds__(kThreads, 1) WgmmaKernel(const __grid_constant__ Params p) {
#ifdef QMM_WGMMA
  // A dependent launch (dependent_launch.h) that simply waits: at these M the launch gap
  // is a small part of the time.
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  using Tl = WgmmaTile<NT>;
  constexpr int kStages = Tl::kStages;
  constexpr int kGroups = Tl::kGroups;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (-static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint8_t* stages = smem + Tl::kStagesOffset;
  uint8_t* xbuf = smem + Tl::kXOffset;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int64_t tok0 = int64_t{blockIdx.x} * NT;
  const int64_t group0 = int64_t{blockIdx.y} * kGroups;
  const int split = static_cast<int>(blockIdx.z);
  const int c_begin = ChunkBegin(p, split);
  const int count = ChunkBegin(p, split + 1) - c_begin;
  const auto* x = static_cast<const uint8_t*>(p.x);

  // Stage <- chunk c: the groups' weights and scales by bulk copy (thread 0; a group past
  // the last reads the last again, never stored), this thread's raw activation pieces
  // by cp.async (zeros past M). Commits one cp.async group.
  auto load = [&](int c) {
    uint8_t* stage = stages + (c % kStages) * Tl::kStageBytes;
    const int64_t chunk = c_begin + c;
    if (threadIdx.x == 0) {
      uint64_t* bar = &bars[c % kStages];
      MbarExpectBytes(bar, kGroups * Tl::kGroupStageBytes);
#pragma unroll
      for (int r = 0; r < kGroups; ++r) {
        const int64_t group = group0 + r < p.groups ? group0 + r : p.groups - 1;
        uint8_t* dst = stage + r * Tl::kGroupStageBytes;
        BulkCopy(dst, p.w + group * p.w_group_stride + chunk * p.w_chunk_stride, kGroupChunkBytes,
                 bar);
        BulkCopy(dst + kGroupChunkBytes, p.s + group * p.s_group_stride + chunk * p.s_chunk_stride,
                 kGroupScaleBytes, bar);
      }
    }
#pragma unroll
    for (int i = 0; i < Tl::kXPiecesPerThread; ++i) {
      const int piece = static_cast<int>(threadIdx.x) + i * kThreads;
      if (Tl::kXPieces % kThreads != 0 && piece >= Tl::kXPieces) continue;
      const int tok = piece / 16;
      const bool ok = tok0 + tok < p.m;
      const uint8_t* src =
          x + ((ok ? tok0 + tok : 0) * p.k + chunk * kChunkK) * 2 + piece % 16 * 16;
      CpAsync16(stage + Tl::kRawXOffset + tok * Tl::kXRowBytes + piece % 16 * 16, src, ok);
    }
    CpAsyncCommit();
  };
  // Permuted buffer <- stage `c`'s activations (after a barrier: other threads copied
  // them). Task (tok, blk, half) holds pieces t = 0..3 at 32t + 16 half of the block
  // (words 8t + 4 half .. + 3); core j = 2s + h of the block, token tok = word
  // 2(s % 2) + h of those pieces for s = 2 half, 2 half + 1, written to row tok % 8,
  // chunk j ^ (tok % 8) of atom (blk, tok / 8).
  auto permute = [&](int c, uint8_t* dst) {
    const uint8_t* raw = stages + (c % kStages) * Tl::kStageBytes + Tl::kRawXOffset;
#pragma unroll
    for (int i = 0; i < Tl::kXTasksPerThread; ++i) {
      const int task = static_cast<int>(threadIdx.x) + i * kThreads;
      if (Tl::kXTasks % kThreads != 0 && task >= Tl::kXTasks) continue;
      const int tok = task % NT;
      const int blk = task / NT % kChunkBlocks;
      const int half = task / (NT * kChunkBlocks);
      const uint8_t* src = raw + tok * Tl::kXRowBytes + blk * kBlockK * 2 + half * 16;
      uint4 q[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) q[t] = *reinterpret_cast<const uint4*>(src + t * 32);
      uint8_t* atom = dst + (blk * NT / 8 + tok / 8) * Tl::kAtomBytes + tok % 8 * 128;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int core = 4 * half + j;  // 2s + h with s = 2 half + j / 2, h = j % 2
        *reinterpret_cast<uint4*>(atom + (core ^ (tok % 8)) * 16) =
            make_uint4(WordAt(q[0], j), WordAt(q[1], j), WordAt(q[2], j), WordAt(q[3], j));
      }
    }
    wgmma::FenceProxyAsync();
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) MbarInit(&bars[s]);
    FenceBarrierInit();
  }
  __syncthreads();
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < count) {
      load(c);
    } else {
      CpAsyncCommit();
    }
  }
  CpAsyncWait<kStages - 2>();  // chunk 0's pieces
  __syncthreads();
  if (count > 0) permute(0, xbuf);

  float acc[kGroups][Tl::kJ][4] = {};
  float part[kGroups][Tl::kJ][4];
  for (int c = 0; c < count; ++c) {
    // Every thread's pieces of chunk c + 1 have landed (kStages - 1 groups were committed
    // ahead of it, one per chunk), chunk c's permuted activations are stored and fenced,
    // every warp has read the stage refilled below, and the wgmmas of chunk c - 1 (the
    // readers of the buffer permuted into below) are complete.
    CpAsyncWait<kStages - 3>();
    __syncthreads();
    if (c + kStages - 1 < count) {
      load(c + kStages - 1);
    } else {
      CpAsyncCommit();
    }

    const uint8_t* stage = stages + (c % kStages) * Tl::kStageBytes;
    MbarWait(&bars[c % kStages], (c / kStages) & 1);
    uint32_t a[kGroups][8][4];
    uint32_t pair[kGroups];
#pragma unroll
    for (int r = 0; r < kGroups; ++r) {
      const uint8_t* gs = stage + r * Tl::kGroupStageBytes;
      const uint4 w0 = *reinterpret_cast<const uint4*>(gs + warp * kStripChunkBytes + lane * 16);
      const uint4 w1 =
          *reinterpret_cast<const uint4*>(gs + warp * kStripChunkBytes + kBlockBytes + lane * 16);
      pair[r] = *reinterpret_cast<const uint32_t*>(gs + kGroupChunkBytes + warp * kStripScaleBytes +
                                                   g * 4);
      Dequant<kBf16>(w0.x, a[r][0]);
      Dequant<kBf16>(w0.y, a[r][1]);
      Dequant<kBf16>(w0.z, a[r][2]);
      Dequant<kBf16>(w0.w, a[r][3]);
      Dequant<kBf16>(w1.x, a[r][4]);
      Dequant<kBf16>(w1.y, a[r][5]);
      Dequant<kBf16>(w1.z, a[r][6]);
      Dequant<kBf16>(w1.w, a[r][7]);
    }

    // The chunk's integer-weight products, exact in fp32, into `part`.
    const uint8_t* xs = xbuf + (c % 2) * Tl::kXBytes;
    wgmma::Fence();
#pragma unroll
    for (int r = 0; r < kGroups; ++r) {
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        // Step st = 4 blk + s covers cores 2s and 2s + 1 of block blk: bytes 32s of the
        // rows of atoms (blk, *).
        const uint64_t desc = wgmma::SmemDescSw128(
            xs + st / 4 * NT / 8 * Tl::kAtomBytes + st % 4 * 32, Tl::kAtomBytes);
        wgmma::MmaRs<Tl::kJ, kBf16>(part[r], a[r][st], desc, st > 0);
      }
    }
    wgmma::Commit();
    // Permute chunk c + 1's activations while the tensor cores work.
    if (c + 1 < count) permute(c + 1, xbuf + ((c + 1) % 2) * Tl::kXBytes);
    wgmma::Wait<0>();
#pragma unroll
    for (int r = 0; r < kGroups; ++r) ApplyScale<Tl::kJ>(pair[r], part[r], acc[r]);
  }
  CpAsyncWait<0>();
  // Every warp is done with the stages before they become the reduction buffer.
  __syncthreads();

  auto* red = reinterpret_cast<float4*>(stages);
  constexpr int kTiles = NT / 8;
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
#pragma unroll
    for (int j = 0; j < Tl::kJ; ++j) {
      red[((r * kGroupStrips + warp) * kTiles + j) * 32 + lane] =
          make_float4(acc[r][j][0], acc[r][j][1], acc[r][j][2], acc[r][j][3]);
    }
  }
  ReduceAndStore<kTiles, Tl::kStrips>(p, red, tok0, group0, split);
#endif  // QMM_WGMMA
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
