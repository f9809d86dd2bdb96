// The quantized-weight GEMM for many tokens on sm_90a, shared by W4A16, W8A16 and W2A8:
// warpgroup MMA (wgmma) with the weights as the A operand, dequantized in registers, and
// the activations as the B operand in shared memory (mma.sync cannot keep Hopper's
// tensor cores busy). A weight format F (w4a16_wgmma.cuh, w8a16_wgmma.cuh on
// wgmma_a16_format.cuh; w2a8_wgmma.cuh) says how a 128-row group's 128-k chunk is copied
// into a stage, dequantized into the A registers of one warp's 16 rows, and scaled; the
// rest is here.
//
// A stage's activations: per 64-k block and 8 tokens a 128-byte-swizzled atom (wgmma.cuh)
// whose 16-byte chunk j of a token's row holds the 8 logical k of core j, the physical
// words F::CoreWord(j, 0..3) of the block: the format's k permutation (chosen so that the
// decode kernels' lanes own contiguous k). They get there one of three ways:
// - W2A8's prologue writes them in that order (F::kXPermuted);
// - up to F::kStagePermuteTokens tokens (kStagePermute: W8A16 up to 64, W4A16 up to 32),
//   the copier brings the caller's rows and producer warps of this kernel permute them in
//   place (XPermute), so that one kernel makes the launch (on the H200 up to 11% faster at
//   32 tokens than a permute kernel ahead; session 38);
// - else PermuteKernel writes them into the workspace in the stages' bytes first (one
//   kernel more, one dependency between grids more: 5-17% of the GEMM at 32-64 tokens;
//   permuting 128-token tiles in the stages measured 11-21% slower, not profiled).
// Permuting in every CTA from the consumer warps had been slower still (4-byte copies or
// a pass through shared memory: 600 instructions per warp and chunk, the tensor cores
// busy a quarter of the time).
//
// GemmKernel: a CTA of two consumer warpgroups and producer warps owns G 128-row groups
// (G = 1 or 2; consumer warp w on the 16 rows 16w.. of each: warpgroup 0 rows 0-63,
// warpgroup 1 rows 64-127), NT tokens and a contiguous range of 128-k chunks (K split
// across the CTAs of a cluster, reduced through distributed shared memory). Every CTA
// reads the whole activation chunk from L2, so G sets that traffic against the weights'.
// The first producer warp's one lane (the copier) fills a ring of stages by bulk and
// tensor copies on each stage's full mbarrier (with kStagePermute: the activations on its
// rows mbarrier, and the permuting warps arrive on the full one), a stage again once
// every consumer warp arrived on its empty mbarrier; the weights of the first
// F::PreWaitStages stages before the kernel waits for its prerequisite grid. A chunk's
// work is two batches (G = 2: one group each; G = 1: one 64-k block each, or the whole
// chunk one batch where the format asks, F::kWholeChunks): each consumer warp dequantizes
// its rows of a batch into A registers and its warpgroup issues the batch's wgmmas,
// accumulating straight into the results; two register sets take turns, so a batch is
// dequantized while the tensor cores run the one before it, and its bytes are read from
// the stage before that one's wait. Nothing but the stage barriers couples the
// warpgroups. Tiles of 256 tokens (formats with F::kWideTiles) issue two 128-token wgmmas
// a step on the same A registers and give the consumers the producer warpgroup's
// registers (setmaxnreg).
// Measured on the H200: docs/PERFORMANCE.md; how it got there: docs/performance-log.md.
#ifndef QMM_KERNELS_CUDA_WGMMA_GEMM_CUH_
#define QMM_KERNELS_CUDA_WGMMA_GEMM_CUH_

#include <cuda.h>

#include <type_traits>

#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace qmm::cuda::wgmma_gemm {

// The geometry the formats share with the W4A16 cluster kernels: 16-row strips, 8 per
// 128-row group, 128-k chunks of two 64-k blocks, and their launch parameters and
// split-K epilogue (w4a16_common.cuh).
using w4a16::kChunkK;
using w4a16::kGroupStrips;
using w4a16::Params;

inline constexpr int kConsumerWarps = w4a16::kWarps;

template <typename F, int NT, int G>
struct Tile {
  static_assert(NT == 32 || NT == 64 || NT == 128 || (NT == 256 && F::kWideTiles));
  static_assert(G == 1 || G == 2);
  // Producer warps: one that copies the stages, and where they take the caller's rows of
  // activations (kStagePermute: not F::kXPermuted, at most F::kStagePermuteTokens tokens)
  // one more for each 32 tokens that permutes them (XPermute, below).
  static constexpr bool kStagePermute = !F::kXPermuted && NT <= F::kStagePermuteTokens;
  static constexpr int kPermuteWarps = kStagePermute ? NT / 32 : 0;
  // 256-token tiles need more registers than 288 threads leave a consumer thread (168:
  // the accumulators alone are 128): their producers are a whole warpgroup, which hands
  // its registers to the consumers (setmaxnreg), three of its warps idle.
  static constexpr bool kMaxNreg = NT == 256;
  static constexpr int kProducerWarps = kMaxNreg ? 4 : 1 + kPermuteWarps;
  // Registers a thread after setmaxnreg: 384 threads start with 168 (the register file,
  // 64 K, over 12 warps), all of which these give out again.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(!kMaxNreg || 256 * kConsumerRegs + 128 * kProducerRegs <= 384 * 168);
  // Threads of GemmKernel: two consumer warpgroups and the producer warps.
  static constexpr int kThreads = w4a16::kThreads + 32 * kProducerWarps;
  static constexpr int kAtomBytes = 1024;
  // A stage: the B tiles ([block][token / 8] atoms of 128 bytes of k per token), then the
  // groups' weight bytes.
  static constexpr int kXBytes = NT * kChunkK * F::kXBytes;
  static constexpr int kStageBytes = (kXBytes + G * F::kGroupStageBytes + 1023) / 1024 * 1024;
  // Two CTAs share an SM where both fit with six stages each (W2A8's one-group tiles of
  // up to 64 tokens, W4A16's of 32: 112 registers a thread and half the shared memory),
  // so that one's wgmmas run while the other waits for its stages (W2A8 on the H200: up
  // to 15% faster; the 16-bit formats' tiles that fit only with 3-4 stages measured up to
  // 50% slower); else one CTA an SM with up to 200 KB of stages, and 256-token tiles (73
  // KB a W4A16 stage) all that a CTA may have (227 KB, less the barriers' KB and the
  // alignment's): their third stage took W4A16 7-15% off against two (H200, session 44).
  static constexpr int kHalfRing = 111 * 1024;
  static constexpr int kCtasPerSm = G == 1 && NT <= 64 && 6 * kStageBytes <= kHalfRing ? 2 : 1;
  static constexpr int kRingBudget = kCtasPerSm == 2 ? kHalfRing
                                     : NT == 256     ? 225 * 1024
                                                     : 200 * 1024;
  static constexpr int kStages =
      kRingBudget / kStageBytes < F::kMaxStages ? kRingBudget / kStageBytes : F::kMaxStages;
  // Stages whose weights the copier fetches before the kernel waits for its prerequisite
  // grid (F::PreWaitStages), at most the ring.
  static constexpr int kPreWaitStages =
      F::PreWaitStages(NT) < kStages ? F::PreWaitStages(NT) : kStages;
  static constexpr int kStagesOffset = 1024;  // after the mbarriers, atom-aligned
  static constexpr int kJ = NT / 8;           // n8 tiles of the token tile
  // n8 tiles a wgmma: at most 16 (n128); wider tiles take several a step on the same A.
  static constexpr int kMmaJ = kJ < 16 ? kJ : 16;
  static constexpr int kHalfSteps = F::kSteps / 2;
  // One-group CTAs of a format that asks for it (F::kWholeChunks) take a whole chunk a
  // batch, not half of one.
  static constexpr bool kWhole = G == 1 && F::kWholeChunks;
  static constexpr int kBatchSteps = G == 2 || kWhole ? F::kSteps : kHalfSteps;
  static constexpr int kRows = G * w4a16::kGroupRows;
  static constexpr int kReduceBytes = NT * kRows * 4;  // the tile buffer, w4a16::TileIndex
  static constexpr int kRingBytes =
      kStages * kStageBytes > kReduceBytes ? kStages* kStageBytes : kReduceBytes;
  // 1024 bytes of slack: the dynamic shared memory is only 16-byte aligned.
  static constexpr int kSmemBytes = 1024 + kStagesOffset + kRingBytes;
};

// Workspace <- x permuted for GemmKernel<F, NT, *> (above); zeros past M. Grid: x =
// NT-token tiles, y = chunks; each thread writes 16-byte pieces, consecutive threads
// consecutive pieces, gathering 4 words of one token's 128-byte block (8 threads read
// the whole block). A thread issues all its loads before its first store, so the kernel
// is one round trip to memory: it is on the critical path of every launch (the matmul
// waits for it). With a round trip per piece it took 4.7 us at 64 tokens and 7.3 at 256
// on 8192 x 8192 (ncu, H200); one round trip took W4A16 8192 x 8192 at M = 256 from 64.3
// to 61.1 us, W8A16 4096 x 4096 from 27.5 to 25.5, W2A8 8192 x 8192 at M = 64 from 30.7
// to 23.2.
template <typename F, int NT>
__global__ void __launch_bounds__(w4a16::kThreads)
    PermuteKernel(const void* x, uint8_t* out, int64_t m, int64_t k) {
  constexpr int kRowBytes = kChunkK * F::kXBytes;  // one token's chunk
  constexpr int kPieces = NT * kRowBytes / 16;
  static_assert(kPieces % w4a16::kThreads == 0);
  constexpr int kPerThread = kPieces / w4a16::kThreads;
  // The previous kernel may be writing x; the matmul after this one prefetches weights.
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  const int64_t chunks = k / kChunkK;
  const int64_t tile = blockIdx.x;
  const int64_t chunk = blockIdx.y;
  uint4 v[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int q = i * w4a16::kThreads + static_cast<int>(threadIdx.x);
    const int atom = q / 64;
    const int row = q / 8 % 8;
    const int core = (q % 8) ^ row;
    const int blk = atom / (NT / 8);
    const int64_t tok = tile * NT + atom % (NT / 8) * 8 + row;
    v[i] = make_uint4(0, 0, 0, 0);
    if (tok < m) {
      const auto* src = reinterpret_cast<const uint32_t*>(
          static_cast<const uint8_t*>(x) + (tok * k + chunk * kChunkK) * F::kXBytes + blk * 128);
      v[i] = make_uint4(src[F::CoreWord(core, 0)], src[F::CoreWord(core, 1)],
                        src[F::CoreWord(core, 2)], src[F::CoreWord(core, 3)]);
    }
  }
  uint4* dst = reinterpret_cast<uint4*>(out + (tile * chunks + chunk) * (NT * kRowBytes));
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) dst[i * w4a16::kThreads + threadIdx.x] = v[i];
}

// The byte offset, in PermuteKernel's output for NT-token tiles of `chunks` chunks of
// row_bytes bytes a token, of the 16-byte piece that holds logical core `core` of 64-k
// block `blk` of token tok's chunk `chunk`: where PermuteKernel stores it (piece q).
__device__ inline int64_t PermutedPieceOffset(int64_t tok, int nt, int row_bytes, int64_t chunks,
                                              int64_t chunk, int blk, int core) {
  const int row = static_cast<int>(tok % 8);
  const int atom = blk * (nt / 8) + static_cast<int>(tok % nt) / 8;
  return (tok / nt * chunks + chunk) * (nt * row_bytes) + atom * 1024 + row * 128 +
         (core ^ row) * 16;
}

// A permuting warp's share of a stage's activations (Tile::kStagePermute). The copier
// brings a token tile's 128-k chunk of the caller's x as two tensor copies, one a
// 64-k block: 128-byte rows (row r = block * NT + token) in the 128-byte swizzle wgmma
// reads, logical k in order. Each row is then permuted in place into the format's k order
// (piece j <- the words F::CoreWord(j, 0..3)), which stays within the row, so that no
// permute kernel (and no second dependency between grids) runs ahead of the GEMM. A lane
// owns whole rows: 8 16-byte reads, 8 16-byte stores; the 8 lanes of a quarter warp on 8
// consecutive rows hit 8 different bank groups. Warp w of kWarps: rows 64w + lane and
// 64w + 32 + lane.
template <typename F, int NT, int kWarps>
struct XPermute {
  static_assert(2 * NT == 64 * kWarps);
  static __device__ uint32_t Word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  }
  // The warp's rows of the stage's x area xs, permuted.
  static __device__ void Run(uint8_t* xs, int warp, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 64 + h * 32 + lane;
      uint8_t* row = xs + r * 128;
      const int sw = r % 8;
      uint4 in[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) in[c] = *reinterpret_cast<const uint4*>(row + (c ^ sw) * 16);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint4 out;
        out.x = Word(in[F::CoreWord(j, 0) / 4], F::CoreWord(j, 0) % 4);
        out.y = Word(in[F::CoreWord(j, 1) / 4], F::CoreWord(j, 1) % 4);
        out.z = Word(in[F::CoreWord(j, 2) / 4], F::CoreWord(j, 2) % 4);
        out.w = Word(in[F::CoreWord(j, 3) / 4], F::CoreWord(j, 3) % 4);
        *reinterpret_cast<uint4*>(row + (j ^ sw) * 16) = out;
      }
    }
  }
};

// The kernel's parameters: the format's, and where it permutes the activations in its
// stages (kStagePermute) a tensor map over the caller's x: rows of 2K bytes, a box one
// 64-k block of a token tile, 128-byte swizzled.
template <typename F>
struct XRowsParams : F::Params {
  CUtensorMap x_map;
};
template <typename F, int NT, int G>
using GemmParams =
    std::conditional_t<Tile<F, NT, G>::kStagePermute, XRowsParams<F>, typename F::Params>;

// A weight format F provides, for a 128-row group's 128-k chunk:
//   Params, Acc                     its launch parameters (a w4a16::Params) and the
//                                   accumulator type;
//   kXBytes, kSteps                 bytes per activation value (2, or 1 for int8) and
//                                   wgmma k steps per chunk (8 of k16, or 4 of k32);
//   kXPermuted                      whether the activations come in PermuteKernel's
//                                   order already (the launch then skips it);
//   kStagePermuteTokens             the largest token tile whose activations this
//                                   kernel permutes in its stages (0: none);
//   kGroupStageBytes                its weight bytes in a stage;
//   kMaxStages                      the most stages a ring holds where they fit;
//   PreWaitStages(NT)               the stages whose weights are fetched before the
//                                   kernel's wait;
//   kWholeChunks                    whether a one-group CTA takes a chunk a batch (its
//                                   A registers twice over must fit);
//   kWideTiles                      whether it has 256-token tiles (where three of
//                                   their stages fit; TokenTile chooses them);
//   OneGroupChunkCost(NT, splits, paired)  (host) a one-group CTA's cost per chunk
//                                   against a two-group one's, for the launch's plan;
//   GroupFillChunks(NT)             (host) a one- and a two-group CTA's pipeline fill
//                                   and reduction in chunks, for the same plan;
//   Load(dst, p, group, chunk, bar) a copy of them (the producer lane; bar counts the
//                                   bytes);
//   ThreadOffsets(warp, lane)       (x) where a consumer thread's weights sit in a
//                                   group's stage bytes, (y) its side bytes (W4A16's
//                                   chunk scales; others' none);
//   Raw, Fetch(p, w, side, half)    what a thread reads of those (w and side: the
//                                   group's stage bytes plus ThreadOffsets) for half the
//                                   chunk's steps of its warp's 16 rows;
//   Dequant<kBf16>(raw, half, a)    a[0..kSteps/2) <- the A registers of those steps;
//   Mma<J, kBf16>(d, a, desc, accumulate)  one wgmma of J n8 tiles;
//   CoreWord(j, t)                  the physical 4-byte word of a token's 128-byte block
//                                   at position t of logical core j (the k order of
//                                   Dequant's registers);
//   LoadRowScales(p, group, warp, lane)  the weight scales of rows g, g + 8 of the
//                                   warp's strip (w4a16::RowScales);
//   Finish(p, row_scales, tok, split, d)  the fp32 partial sums of one accumulator quad
//                                   (those rows, tokens tok, tok + 1), scaled;
//   PermuteSource(args) (unless kXPermuted), PermutedX(args), MakeParams(args, &p)
//                                   (host) the activations to permute, where they are
//                                   permuted to, and the launch parameters (an error
//                                   where a tensor map cannot be made).
//
// Grid: x = token tiles of NT, y = sets of G 128-row groups, z = K splits (one cluster).
template <typename F, int NT, int G, bool kBf16>
__global__ void __launch_bounds__((Tile<F, NT, G>::kThreads), (Tile<F, NT, G>::kCtasPerSm))
    GemmKernel(const __grid_constant__ GemmParams<F, NT, G> p) {
#ifdef QMM_WGMMA
  using Tl = Tile<F, NT, G>;
  constexpr int kStages = Tl::kStages;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (-static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023);
  // full[s]: stage s holds its chunk (the producer's bytes); empty[s]: every consumer
  // warp is done with it.
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kStages;
  // rows[s] (Tl::kStagePermute): stage s holds the caller's rows of activations, to
  // permute.
  uint64_t* rows = empty + kStages;
  uint8_t* stages = smem + Tl::kStagesOffset;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t tok0 = int64_t{blockIdx.x} * NT;
  const int64_t group0 = int64_t{blockIdx.y} * G;
  const int split = static_cast<int>(blockIdx.z);
  const int c_begin = w4a16::ChunkBegin(p, split);
  const int count = w4a16::ChunkBegin(p, split + 1) - c_begin;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // The copier's bytes, and each permuting warp's stores.
      w4a16::MbarInit(&full[s], 1 + Tl::kPermuteWarps);
      w4a16::MbarInit(&empty[s], kConsumerWarps);
      if (Tl::kStagePermute) w4a16::MbarInit(&rows[s], 1);
    }
    w4a16::FenceBarrierInit();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    // The producers. The weights are never written by another kernel, so the first ones
    // are fetched while the previous kernel drains (a dependent launch,
    // dependent_launch.h); the activations only after it completed.
    if constexpr (Tl::kMaxNreg) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tl::kProducerRegs) : "memory");
    }
    const int pw = warp - kConsumerWarps;
    if (pw == 0 && lane == 0) {
      // The copier. Its full barrier counts the weights' bytes, and the activations'
      // where they come permuted already; else those go to rows[s] (kStagePermute).
      constexpr uint32_t kFullXBytes = Tl::kStagePermute ? 0 : Tl::kXBytes;
      auto load_weights = [&](int c) {
        uint8_t* w = stages + (c % kStages) * Tl::kStageBytes + Tl::kXBytes;
        uint64_t* bar = &full[c % kStages];
        w4a16::MbarExpectBytes(bar, kFullXBytes + G * F::kGroupStageBytes);
#pragma unroll
        for (int r = 0; r < G; ++r) {
          // A group past the last reads the last again (never stored).
          const int64_t group = group0 + r < p.groups ? group0 + r : p.groups - 1;
          F::Load(w + r * F::kGroupStageBytes, p, group, c_begin + c, bar);
        }
      };
      auto load_x = [&](int c) {
        uint8_t* xs = stages + (c % kStages) * Tl::kStageBytes;
        if constexpr (Tl::kStagePermute) {
          // The caller's rows, one tensor copy a 64-k block (XPermute).
          uint64_t* bar = &rows[c % kStages];
          w4a16::MbarExpectBytes(bar, Tl::kXBytes);
#pragma unroll
          for (int blk = 0; blk < 2; ++blk) {
            w4a16::BulkTensorCopy(xs + blk * NT * 128, &p.x_map,
                                  ((c_begin + c) * kChunkK * 2 + blk * 128) / 8,
                                  static_cast<int>(tok0), bar);
          }
        } else {
          // This CTA's token tile of the permuted activations (PermuteKernel's order).
          const uint8_t* xp =
              static_cast<const uint8_t*>(p.x) + int64_t{blockIdx.x} * p.chunks * Tl::kXBytes;
          w4a16::BulkCopy(xs, xp + (c_begin + int64_t{c}) * Tl::kXBytes, Tl::kXBytes,
                          &full[c % kStages]);
        }
      };
      // The first stages' weights before the wait, the rest of the ring after it, each
      // stage's with its activations: where the wait leaves little time to fill, a whole
      // ring of weights requested ahead of the activations held back the first stage
      // (F::PreWaitStages).
      const int first = count < kStages ? count : kStages;
      const int pre = first < Tl::kPreWaitStages ? first : Tl::kPreWaitStages;
      for (int c = 0; c < pre; ++c) load_weights(c);
      WaitForPrerequisiteGrid();
      AllowDependentLaunch();
      for (int c = 0; c < first; ++c) {
        if (c >= pre) load_weights(c);
        load_x(c);
      }
      for (int c = kStages; c < count; ++c) {
        w4a16::MbarWait(&empty[c % kStages], (c / kStages - 1) & 1);
        load_weights(c);
        load_x(c);
      }
    } else if (pw == 0 || pw > Tl::kPermuteWarps) {  // kMaxNreg: the idle warps too
      WaitForPrerequisiteGrid();
      AllowDependentLaunch();
    } else if constexpr (Tl::kStagePermute) {
      // The permuters: each stage's rows into the B operand's order, then the stage is
      // full for the consumers once the weights are in too. They issue no copies: a
      // thread's proxy fence seems to wait for its own copies in flight (with the
      // copier's lane permuting too, the GEMM took 2-3 times as long at 64 tokens on the
      // H200).
      WaitForPrerequisiteGrid();
      AllowDependentLaunch();
      int s = 0;
      uint32_t phase = 0;
      for (int c = 0; c < count; ++c) {
        uint8_t* xs = stages + s * Tl::kStageBytes;
        w4a16::MbarWait(&rows[s], phase);
        XPermute<F, NT, Tl::kPermuteWarps>::Run(xs, pw - 1, lane);
        wgmma::FenceProxyAsync();
        __syncwarp();
        if (lane == 0) w4a16::MbarArrive(&full[s]);
        if (++s == kStages) {
          s = 0;
          phase ^= 1;
        }
      }
    }
    // Every consumer is done with the ring before it becomes the reduction buffer.
    __syncthreads();
    w4a16::SkipReduction(p.splits);
    return;
  }
  if constexpr (Tl::kMaxNreg) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tl::kConsumerRegs) : "memory");
  }
  // One-group CTAs load their rows' weight scales (which no kernel writes) before the wait,
  // as the copier its first weights, rather than at the end, where they were a round trip
  // to memory (H200, session 47: W8A16 4096x4096 at 64 tokens 12.05 -> 11.74 us, at 256
  // 20.73 -> 20.24). Two-group ones load them after their loop: held through it (four
  // registers), W4A16 8192x28672 at 64 tokens took 6% longer.
  w4a16::RowScales row_scales[G];
  if constexpr (G == 1) row_scales[0] = F::LoadRowScales(p, group0, warp, lane);
  // The consumers write y only after the previous kernel completed (it may read y).
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();

  // Written first by the wgmmas of chunk 0 (every CTA has at least one chunk): zeroing
  // them beforehand would make ptxas serialize the wgmmas.
  typename F::Acc acc[G][Tl::kJ][4];
  uint32_t a[2][Tl::kBatchSteps][4];
  // The warp's bytes of the chunk: group r's half h.
  typename F::Raw raw[G][2];
  // The thread's bytes of group 0 in the current stage (F::ThreadOffsets: its weights and
  // its side bytes) and the stage's B descriptor, each moved a stage on as the loop goes,
  // so that they stay in registers: ptxas had recomputed the offsets from the thread's
  // index every chunk (W4A16's one-group loop at 64 tokens: 167 instructions, 149 with
  // these and the barrier pointers below; scripts/sass-loops.py).
  const int2 offsets = F::ThreadOffsets(warp, lane);
  const uint8_t* tw = stages + Tl::kXBytes + offsets.x;
  const uint8_t* ts = stages + Tl::kXBytes + offsets.y;
  uint64_t stage_desc = wgmma::SmemDescSw128(stages, Tl::kAtomBytes);
  // Reads batch b's bytes: a batch's reads are issued before the previous batch's wait,
  // so that they complete while it runs (read after the wait, they were a quarter of
  // W8A16's stalls at M = 256: ncu, H200). Tl::kWhole: the whole chunk, b = 0.
  auto fetch = [&](int b) {
    if constexpr (G == 2 || Tl::kWhole) {
      const int g = b * F::kGroupStageBytes;
      raw[b][0] = F::Fetch(p, tw + g, ts + g, 0);
      raw[b][1] = F::Fetch(p, tw + g, ts + g, 1);
    } else {
      raw[0][b] = F::Fetch(p, tw, ts, b);
    }
  };
  // Dequantizes batch b of the chunk into a[b] (Tl::kWhole: the whole chunk into set b).
  auto dequant = [&](int b) {
    if constexpr (G == 2 || Tl::kWhole) {
      const int r = G == 2 ? b : 0;
      F::template Dequant<kBf16>(raw[r][0], 0, &a[b][0]);
      F::template Dequant<kBf16>(raw[r][1], 1, &a[b][Tl::kHalfSteps]);
    } else {
      F::template Dequant<kBf16>(raw[0][b], b, &a[b][0]);
    }
  };
  // Issues batch b's wgmmas on the chunk's B tiles and commits them as one group; `first`:
  // chunk 0, whose first step of each accumulator overwrites it.
  // The B descriptors are the stage's advanced by the step's offset: one add a wgmma
  // (and two moves that ptxas adds to build the register pair), where building each from
  // its address took six instructions. One uniform 64-bit add each instead measured no
  // faster on the H200 (session 52): the loop waits on its chains, not on issue slots.
  auto issue = [&](int b, bool first) {
    wgmma::Fence();
#pragma unroll
    for (int i = 0; i < Tl::kBatchSteps; ++i) {
      // Step st = 4 blk + s covers cores 2s and 2s + 1 of block blk: bytes 32s of the
      // rows of atoms (blk, *).
      const int st = Tl::kBatchSteps == F::kSteps ? i : Tl::kHalfSteps * b + i;
      const uint64_t desc =
          wgmma::DescAdvance(stage_desc, (st / 4 * NT / 8 * Tl::kAtomBytes + st % 4 * 32) / 16);
      const bool accumulate = !(first && i == 0 && (G == 2 || Tl::kWhole || b == 0));
#pragma unroll
      for (int h = 0; h < Tl::kJ / Tl::kMmaJ; ++h) {
        using AccJ = typename F::Acc[Tl::kMmaJ][4];
        F::template Mma<Tl::kMmaJ, kBf16>(
            *reinterpret_cast<AccJ*>(&acc[G == 2 ? b : 0][h * Tl::kMmaJ]), a[b][i],
            wgmma::DescAdvance(desc, h * Tl::kMmaJ * Tl::kAtomBytes / 16), accumulate);
      }
    }
    wgmma::Commit();
  };

  // One batch stays in flight at each wait: the next is dequantized while the tensor
  // cores run it.
  // Chunk c sits in stage c % kStages (full barrier full_s), filled for the
  // (c / kStages)-th time (phase); empty_prev is the empty barrier of the stage before.
  // Kept as pointers: computed from the stage's index, the arrive on empty_prev had
  // slipped behind the next batch's dequantization in W8A16's loop (H200: 1-3% slower).
  uint32_t phase = 0;
  uint64_t* full_s = full;
  uint64_t* empty_prev = empty + kStages - 1;
  // On to the next stage: its full barrier and phase, the thread's bytes, the descriptor.
  auto advance = [&] {
    const bool wrap = full_s == full + (kStages - 1);
    const int step = wrap ? (1 - kStages) * Tl::kStageBytes : Tl::kStageBytes;
    full_s += wrap ? 1 - kStages : 1;
    phase ^= wrap ? 1 : 0;
    tw += step;
    ts += step;
    stage_desc = wgmma::DescAdvance(stage_desc, static_cast<uint32_t>(step / 16));
  };
  if constexpr (Tl::kWhole) {
    // A chunk a batch, in register set c % 2: chunk c's wgmmas run while chunk c + 1's
    // bytes are read and dequantized. Two chunks a turn keep the sets static; with the
    // second one conditional instead (an odd count), ptxas serialized the wgmmas (C7513).
    w4a16::MbarWait(full_s, 0);
    fetch(0);
    auto whole = [&](int c, int b) {
      dequant(b);
      issue(b, c == 0);
      uint64_t* const empty_cur = full_s + kStages;
      advance();
      if (c + 1 < count) {  // the next chunk's bytes, read while this one's wgmmas run
        w4a16::MbarWait(full_s, phase);
        fetch(0);
      }
      wgmma::Wait<1>();  // chunk c - 1: its register set and its stage are free
      if (c > 0 && lane == 0) w4a16::MbarArrive(empty_prev);
      empty_prev = empty_cur;
    };
    int c = 0;
    for (; c + 1 < count; c += 2) {
      whole(c, 0);
      whole(c + 1, 1);
    }
    if (c < count) whole(c, 0);
  } else {
    for (int c = 0; c < count; ++c) {
      w4a16::MbarWait(full_s, phase);
      fetch(0);
      dequant(0);  // a[0] is free: batch 0 of chunk c - 1 completed below
      fetch(1);
      issue(0, c == 0);
      wgmma::Wait<1>();  // batch 1 of chunk c - 1: a[1] and its stage are free
      if (c > 0 && lane == 0) w4a16::MbarArrive(empty_prev);
      dequant(1);
      issue(1, c == 0);
      wgmma::Wait<1>();  // batch 0 of chunk c
      empty_prev = full_s + kStages;
      advance();
    }
  }
  wgmma::Wait<0>();
#pragma unroll
  for (int r = 0; r < G; ++r) wgmma::FenceOperands(acc[r]);
  if constexpr (G == 2) {
#pragma unroll
    for (int r = 0; r < G; ++r) row_scales[r] = F::LoadRowScales(p, group0 + r, warp, lane);
  }
  // Every warp is done with the stages before they become the reduction buffer.
  __syncthreads();

  auto* red = reinterpret_cast<float*>(stages);
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int j = 0; j < Tl::kJ; ++j) {
      w4a16::PutFragment<Tl::kRows>(
          red, r * kGroupStrips + warp, j, lane,
          F::Finish(p, row_scales[r], tok0 + 8 * j + lane % 4 * 2, split, acc[r][j]));
    }
  }
  w4a16::ReduceAndStore<NT, Tl::kRows>(p, red, tok0, group0 * w4a16::kGroupRows, split);
#endif  // QMM_WGMMA
}

}  // namespace qmm::cuda::wgmma_gemm

#endif  // QMM_KERNELS_CUDA_WGMMA_GEMM_CUH_
