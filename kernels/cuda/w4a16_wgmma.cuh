// The W4A16 kernel for many tokens on sm_90a: warpgroup MMA (wgmma) with the weights as
// the A operand, dequantized and scaled in registers, and the activations as the B
// operand in shared memory (mma.sync cannot keep Hopper's tensor cores busy). Two
// kernels per launch:
//
// PermuteKernel writes the activations into the workspace in exactly the bytes a stage
// of the matmul holds: per NT-token tile and 128-k chunk, per 64-k block and 8 tokens a
// 128-byte-swizzled atom (wgmma.cuh) whose 16-byte chunk j of a token's row holds the 8
// logical k of core j. That applies the layout's k permutation (w4a16_layout.h): logical
// core j of a block holds the physical words j, j + 8, j + 16, j + 24. Done once per
// launch, it spares every CTA a permutation of every chunk it reads (4-byte copies or a
// pass through shared memory measured 600 instructions per warp and chunk, the
// tensor cores busy a quarter of the time).
//
// WgmmaKernel: a CTA of two warpgroups owns G 128-row groups (G = 1 or 2; warp w on
// strip w of each: warpgroup 0 rows 0-63, warpgroup 1 rows 64-127), NT tokens and a
// contiguous range of 128-k chunks (K split across the CTAs of a cluster, reduced
// through distributed shared memory as in the other cluster kernels). Every CTA reads
// the whole activation chunk from L2, so G sets that traffic against the weights' (at
// M = 64 and G = 1 it equals twice the weight bytes). Per chunk, kAhead chunks ahead in
// a ring of kStages, thread 0 fills a stage by bulk copies on the stage's mbarrier: the
// groups' weights and scales (8.25 KB per group; the first ones before the kernel waits
// for its prerequisite grid) and the permuted activation tile. The chunk's work is two
// batches (G = 2: one group each; G = 1: one 64-k block each): each warp dequantizes its
// strip of a batch into A registers, scales them in 16 bits (the chunk's per-row scale,
// as Marlin does) and its warpgroup issues the batch's wgmmas, accumulating straight
// into the fp32 results. Two register sets take turns, so a batch is dequantized while
// the tensor cores run the one before it. Per-row scales (one per row for all of K)
// multiply the fp32 results at the end instead.
// Measured on the H200: see docs/PERFORMANCE.md (session 12).
#ifndef QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_

#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace qmm::cuda::w4a16 {

template <int NT, int G>
struct WgmmaTile {
  static_assert(NT == 32 || NT == 64 || NT == 128);
  static_assert(G == 1 || G == 2);
  static constexpr int kGroups = G;
  static constexpr int kAtomBytes = 1024;
  // A stage: the B tiles ([block][token / 8] atoms), then the groups' weights and scales.
  static constexpr int kXBytes = NT * kChunkK * 2;
  static constexpr int kGroupStageBytes = kGroupChunkBytes + kGroupScaleBytes;
  static constexpr int kStageBytes = (kXBytes + G * kGroupStageBytes + 1023) / 1024 * 1024;
  // As many stages as fit in 200 KB, at most 6.
  static constexpr int kStages = 200 * 1024 / kStageBytes < 6 ? 200 * 1024 / kStageBytes : 6;
  static constexpr int kStagesOffset = 1024;  // after the mbarriers, atom-aligned
  static constexpr int kJ = NT / 8;           // n8 tiles per wgmma
  static constexpr int kBatchSteps = G * 4;   // k16 steps of one batch
  static constexpr int kStrips = G * kGroupStrips;
  static constexpr int kReduceBytes = kStrips * kJ * 32 * 16;
  static constexpr int kRingBytes =
      kStages * kStageBytes > kReduceBytes ? kStages* kStageBytes : kReduceBytes;
  // 1024 bytes of slack: the dynamic shared memory is only 16-byte aligned.
  static constexpr int kSmemBytes = 1024 + kStagesOffset + kRingBytes;
};

// Workspace <- x permuted for WgmmaKernel<NT, *> (above); zeros past M. Grid: x = NT-token
// tiles, y = chunks; each thread writes 16-byte pieces, consecutive threads consecutive
// pieces, gathering 4 words of one token's 64-k block (8 threads read the whole block).
template <int NT>
__global__ void __launch_bounds__(kThreads)
    PermuteKernel(const void* x, uint8_t* out, int64_t m, int64_t k) {
  constexpr int kPieces = NT * kChunkK * 2 / 16;
  // The previous kernel may be writing x; the matmul after this one prefetches weights.
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  const int64_t chunks = k / kChunkK;
  const int64_t tile = blockIdx.x;
  const int64_t chunk = blockIdx.y;
  uint4* dst = reinterpret_cast<uint4*>(out + (tile * chunks + chunk) * (NT * kChunkK * 2));
  for (int q = threadIdx.x; q < kPieces; q += kThreads) {
    const int atom = q / 64;
    const int row = q / 8 % 8;
    const int core = (q % 8) ^ row;
    const int blk = atom / (NT / 8);
    const int64_t tok = tile * NT + atom % (NT / 8) * 8 + row;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (tok < m) {
      const auto* src = reinterpret_cast<const uint32_t*>(
          static_cast<const uint8_t*>(x) + (tok * k + chunk * kChunkK + blk * kBlockK) * 2);
      v = make_uint4(src[core], src[core + 8], src[core + 16], src[core + 24]);
    }
    dst[q] = v;
  }
}

// A strip's scales for one chunk in the activation type, both halves of each register
// the same: lo = s[row g], hi = s[row g + 8]. bf16 keeps the fp16 scale as a sum of two
// bf16 values (the rounded scale and what rounding dropped), so that only the product is
// rounded, once, and not the scale the same way for every weight of the row.
struct ChunkScales {
  uint32_t lo, hi;
  uint32_t lo_rest, hi_rest;  // bf16 only
};

// fp16 (1, 1): the scale pair of per-row-scaled weights inside the loop.
inline constexpr uint32_t kOnePair = 0x3c003c00;

// `pair` is the layout's fp16 (s[row g], s[row g + 8]).
template <bool kBf16>
__device__ inline ChunkScales SplatScales(uint32_t pair) {
  const __half2 s = *reinterpret_cast<const __half2*>(&pair);
  ChunkScales out;
  if constexpr (kBf16) {
    const float l = __low2float(s);
    const float h = __high2float(s);
    const __nv_bfloat162 lb = __float2bfloat162_rn(l);
    const __nv_bfloat162 hb = __float2bfloat162_rn(h);
    const __nv_bfloat162 lr = __float2bfloat162_rn(l - __low2float(lb));
    const __nv_bfloat162 hr = __float2bfloat162_rn(h - __low2float(hb));
    out.lo = *reinterpret_cast<const uint32_t*>(&lb);
    out.hi = *reinterpret_cast<const uint32_t*>(&hb);
    out.lo_rest = *reinterpret_cast<const uint32_t*>(&lr);
    out.hi_rest = *reinterpret_cast<const uint32_t*>(&hr);
  } else {
    const __half2 l = __low2half2(s);
    const __half2 h = __high2half2(s);
    out.lo = *reinterpret_cast<const uint32_t*>(&l);
    out.hi = *reinterpret_cast<const uint32_t*>(&h);
  }
  return out;
}

// The four A registers of one k16 step of a strip (w4a16_layout.h) times the chunk's
// scales (registers 0 and 2 hold row g, 1 and 3 row g + 8).
template <bool kBf16>
__device__ inline void DequantScaled(uint32_t w, const ChunkScales& s, uint32_t (&a)[4]) {
  Dequant<kBf16>(w, a);
  if constexpr (kBf16) {
    a[0] = Fma2<true>(a[0], s.lo, Fma2<true>(a[0], s.lo_rest, 0));
    a[1] = Fma2<true>(a[1], s.hi, Fma2<true>(a[1], s.hi_rest, 0));
    a[2] = Fma2<true>(a[2], s.lo, Fma2<true>(a[2], s.lo_rest, 0));
    a[3] = Fma2<true>(a[3], s.hi, Fma2<true>(a[3], s.hi_rest, 0));
  } else {
    a[0] = Fma2<false>(a[0], s.lo, 0);
    a[1] = Fma2<false>(a[1], s.hi, 0);
    a[2] = Fma2<false>(a[2], s.lo, 0);
    a[3] = Fma2<false>(a[3], s.hi, 0);
  }
}

// Threads of the matmul kernel: two consumer warpgroups and one producer warp.
inline constexpr int kWgmmaThreads = kThreads + 32;

// Grid: x = token tiles of NT, y = sets of G 128-row groups, z = K splits (one cluster).
template <int NT, int G, bool kBf16>
__global__ void __launch_bounds__(kWgmmaThreads, 1) WgmmaKernel(const __grid_constant__ Params p) {
#ifdef QMM_WGMMA
  using Tl = WgmmaTile<NT, G>;
  constexpr int kStages = Tl::kStages;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (-static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023);
  // full[s]: stage s holds its chunk (the producer's bytes); empty[s]: every consumer
  // warp is done with it.
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kStages;
  uint8_t* stages = smem + Tl::kStagesOffset;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int64_t tok0 = int64_t{blockIdx.x} * NT;
  const int64_t group0 = int64_t{blockIdx.y} * G;
  const int split = static_cast<int>(blockIdx.z);
  const int c_begin = ChunkBegin(p, split);
  const int count = ChunkBegin(p, split + 1) - c_begin;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], kWarps);
    }
    FenceBarrierInit();
  }
  __syncthreads();

  if (warp == kWarps) {
    // The producer: one lane fills the ring, a stage as soon as every consumer warp has
    // released it. The weights are never written by another kernel, so the first ones
    // are fetched while the previous kernel drains (a dependent launch,
    // dependent_launch.h); the activations only after it completed.
    if (lane == 0) {
      // This CTA's token tile of the permuted activations (PermuteKernel).
      const uint8_t* xp =
          static_cast<const uint8_t*>(p.x) + int64_t{blockIdx.x} * p.chunks * Tl::kXBytes;
      auto load_weights = [&](int c) {
        uint8_t* w = stages + (c % kStages) * Tl::kStageBytes + Tl::kXBytes;
        const int64_t chunk = c_begin + c;
        uint64_t* bar = &full[c % kStages];
        MbarExpectBytes(bar, Tl::kXBytes + G * Tl::kGroupStageBytes);
#pragma unroll
        for (int r = 0; r < G; ++r) {
          // A group past the last reads the last again (never stored).
          const int64_t group = group0 + r < p.groups ? group0 + r : p.groups - 1;
          uint8_t* dst = w + r * Tl::kGroupStageBytes;
          BulkCopy(dst, p.w + group * p.w_group_stride + chunk * p.w_chunk_stride, kGroupChunkBytes,
                   bar);
          BulkCopy(dst + kGroupChunkBytes,
                   p.s + group * p.s_group_stride + chunk * p.s_chunk_stride, kGroupScaleBytes,
                   bar);
        }
      };
      auto load_x = [&](int c) {
        BulkCopy(stages + (c % kStages) * Tl::kStageBytes,
                 xp + (c_begin + int64_t{c}) * Tl::kXBytes, Tl::kXBytes, &full[c % kStages]);
      };
      const int first = count < kStages ? count : kStages;
      for (int c = 0; c < first; ++c) load_weights(c);
      WaitForPrerequisiteGrid();
      AllowDependentLaunch();
      for (int c = 0; c < first; ++c) load_x(c);
      for (int c = kStages; c < count; ++c) {
        MbarWait(&empty[c % kStages], (c / kStages - 1) & 1);
        load_weights(c);
        load_x(c);
      }
    } else {
      WaitForPrerequisiteGrid();
      AllowDependentLaunch();
    }
    // Every consumer is done with the ring before it becomes the reduction buffer.
    __syncthreads();
    ReduceAndStore<Tl::kJ, Tl::kStrips>(p, reinterpret_cast<float4*>(stages), tok0, group0, split);
    return;
  }
  // The consumers write y only after the previous kernel completed (it may read y).
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();

  // Written first by the wgmmas of chunk 0 (every CTA has at least one chunk): zeroing
  // them beforehand would make ptxas serialize the wgmmas.
  float acc[G][Tl::kJ][4];
  uint32_t a[2][Tl::kBatchSteps][4];
  // Dequantizes batch b of the chunk in `stage` into a[b].
  // Per-row scales (no chunk stride) multiply the fp32 results at the end instead: exact,
  // where bf16 would round each scale and product to 8 bits the same way in every chunk.
  const bool per_row = p.s_chunk_stride == 0;
  auto dequant = [&](const uint8_t* stage, int b) {
    const uint8_t* gs = stage + Tl::kXBytes + (G == 2 ? b * Tl::kGroupStageBytes : 0);
    const ChunkScales sc =
        SplatScales<kBf16>(per_row ? kOnePair
                                   : *reinterpret_cast<const uint32_t*>(
                                         gs + kGroupChunkBytes + warp * kStripScaleBytes + g * 4));
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const int blk = G == 2 ? h : b;
      const uint4 w = *reinterpret_cast<const uint4*>(gs + warp * kStripChunkBytes +
                                                      blk * kBlockBytes + lane * 16);
      DequantScaled<kBf16>(w.x, sc, a[b][4 * h + 0]);
      DequantScaled<kBf16>(w.y, sc, a[b][4 * h + 1]);
      DequantScaled<kBf16>(w.z, sc, a[b][4 * h + 2]);
      DequantScaled<kBf16>(w.w, sc, a[b][4 * h + 3]);
    }
  };
  // Issues batch b's wgmmas on the chunk's B tiles and commits them as one group; `first`:
  // chunk 0, whose first step of each accumulator overwrites it.
  auto issue = [&](const uint8_t* xs, int b, bool first) {
    wgmma::Fence();
#pragma unroll
    for (int i = 0; i < Tl::kBatchSteps; ++i) {
      // Step st = 4 blk + s covers cores 2s and 2s + 1 of block blk: bytes 32s of the
      // rows of atoms (blk, *).
      const int st = G == 2 ? i : 4 * b + i;
      const uint64_t desc =
          wgmma::SmemDescSw128(xs + st / 4 * NT / 8 * Tl::kAtomBytes + st % 4 * 32, Tl::kAtomBytes);
      wgmma::MmaRs<Tl::kJ, kBf16>(acc[G == 2 ? b : 0], a[b][i], desc,
                                  !(first && i == 0 && (G == 2 || b == 0)));
    }
    wgmma::Commit();
  };

  for (int c = 0; c < count; ++c) {
    const uint8_t* stage = stages + (c % kStages) * Tl::kStageBytes;
    MbarWait(&full[c % kStages], (c / kStages) & 1);
    dequant(stage, 0);  // a[0] is free: batch 0 of chunk c - 1 completed below
    issue(stage, 0, c == 0);
    wgmma::Wait<1>();  // batch 1 of chunk c - 1: a[1] and chunk c - 1's stage are free
    if (c > 0 && lane == 0) MbarArrive(&empty[(c - 1) % kStages]);
    dequant(stage, 1);
    issue(stage, 1, c == 0);
    wgmma::Wait<1>();  // batch 0 of chunk c
  }
  wgmma::Wait<0>();
  // Every warp is done with the stages before they become the reduction buffer.
  __syncthreads();

  auto* red = reinterpret_cast<float4*>(stages);
#pragma unroll
  for (int r = 0; r < G; ++r) {
    float s_lo = 1.f, s_hi = 1.f;
    if (per_row) {
      const int64_t group = group0 + r < p.groups ? group0 + r : p.groups - 1;
      const __half2 s = *reinterpret_cast<const __half2*>(p.s + group * p.s_group_stride +
                                                          warp * kStripScaleBytes + g * 4);
      s_lo = __low2float(s);
      s_hi = __high2float(s);
    }
#pragma unroll
    for (int j = 0; j < Tl::kJ; ++j) {
      red[((r * kGroupStrips + warp) * Tl::kJ + j) * 32 + lane] = make_float4(
          acc[r][j][0] * s_lo, acc[r][j][1] * s_lo, acc[r][j][2] * s_hi, acc[r][j][3] * s_hi);
    }
  }
  ReduceAndStore<Tl::kJ, Tl::kStrips>(p, red, tok0, group0, split);
#endif  // QMM_WGMMA
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
