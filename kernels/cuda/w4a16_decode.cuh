// The W4A16 kernel for few tokens (M <= 32): a persistent grid of one wave, no
// shared-memory pipeline, so nothing but the weight stream sets its pace.
//
// A "row set" is R consecutive strips (16R rows). The 8 warps of a CTA work on 8 / S row
// sets at a time, S warps per set, each warp on its own contiguous 1/S of the chunks
// (intra-CTA split-K); the S partial tiles are summed through shared memory once per set.
// Where the row sets are fewer than the SMs, a cluster of C CTAs shares each set, and the
// sum takes in the C S tiles (decode_split.cuh). CTAs (clusters) stride over the row sets,
// so the grid is exactly what fits on the GPU at once. Where whole sets per CTA would
// leave many of those CTAs idle, the stream-K grid (kStream, decode_stream.cuh) gives
// every CTA an equal range of the sets' chunks instead. Where the sets would leave SMs
// with one 8-warp CTA or none, CTAs of 16 warps (kWideWarps) take one strip each.
//
// Registers are the pipeline: each warp keeps kSlots chunks of R strips (3-4 KB per warp)
// in flight, all loads issued before any use, and refills a slot as soon as the chunk in
// it is consumed (the tiles of two strips: once the next slot is in use, DecodeTile::
// kDeferRefill), with the same slot of the next round or of its next row set, so the
// loads of the next set are already in flight during this set's reduction. One MMA chain
// per warp and tile is enough: 16-32 warps per SM hide its latency. Launched as a
// dependent launch (dependent_launch.h), the first slots fill while the previous kernel
// finishes.
//
// A gated MLP (kGlu): a row set is one strip of the gate weight (p.w) and the same strip
// of the up weight (p.w_up), R = 2, and the reduction writes act(gate) * up (p.glu_act),
// so a gated MLP's two projections and their product are one launch that streams both
// weights.
//
// Zero points (kZp): each slot also holds its chunk's zero biases (p.zb), which the
// dequantization adds in place of the symmetric bias (w4a16_ptx.cuh Dequant), so an
// asymmetric weight streams as a symmetric one does, 3% more bytes, no other instruction
// in the loop but two byte permutes a chunk and strip.
#ifndef QMM_KERNELS_CUDA_W4A16_DECODE_CUH_
#define QMM_KERNELS_CUDA_W4A16_DECODE_CUH_

#include <type_traits>

#include "kernels/cuda/activation_device.cuh"
#include "kernels/cuda/decode_split.cuh"
#include "kernels/cuda/decode_stream.cuh"
#include "kernels/cuda/w4a16_common.cuh"

namespace qmm::cuda::w4a16 {

// Warps of the wide CTA: all of them on one row set of one strip, two CTAs an SM (32
// warps), as W8A16's 16-warp CTAs (w8a16_decode.cuh kWideWarps), whose streaming rate
// follows the warps an SM. Their 64 registers hold two token tiles only with two slots
// and the chunk's scale applied to the weights in 16 bits (kScaled below).
inline constexpr int kWideWarps = 16;

// T tiles of 8 tokens, R strips per warp (R divides kGroupStrips, so a row set never
// crosses a 128-row group). kDeep: twice the chunks in flight per warp, for grids of at
// most two CTAs per SM (a 4096-wide N at M = 1 has 256 row sets: half the 4-CTA slots
// would sit empty and the SMs would hold half the bytes in flight they can). kTurns: the
// two-strip tiles of two token tiles on a grid of several turns, which refill late too.
// kCtaWarps: kWarps, or kWideWarps. kEarlyX: below.
template <int T, int R, bool kDeep = false, bool kTurns = false, int kCtaWarps = kWarps,
          bool kEarlyX = false>
struct DecodeTile {
  static_assert(kGroupStrips % R == 0);
  static constexpr bool kWide = kCtaWarps == kWideWarps;
  static_assert(kCtaWarps == kWarps || (kWide && R == 1 && !kDeep && !kTurns));
  // Strip-chunks of weights in flight per warp: 3 KB for one strip, within the 64
  // registers that let 4 CTAs (32 warps, 96 KB in flight) share an SM; 4 KB for two; in
  // the wide CTAs, whose registers are 64 too, 3 KB for one token tile and 2 KB for two.
  static constexpr int kSlots = kWide ? (T == 1 ? 3 : 2) : (R == 1 ? 3 : 4 / R) * (kDeep ? 2 : 1);
  // CTAs per SM the registers are capped for (8 warps each): 32 warps for one tile, 16
  // for the larger ones, whose accumulators and activations take twice the registers,
  // and for the deep tiles; the wide CTAs two (32 warps).
  static constexpr int kMinBlocks = T * R == 1 && !kDeep && !kWide ? 4 : 2;
  // The chunk's scale multiplies the dequantized weights in 16 bits (as the wgmma GEMM's,
  // DequantScaled) rather than an exact fp32 partial sum per chunk: that sum's registers
  // are what the wide CTAs' 64 lack.
  static constexpr bool kScaled = kWide;
  // Where a slot is refilled. Every use of a slot's weights waits for all the warp's weight
  // loads in flight (ptxas puts them on one scoreboard and waits for it to drain), so a
  // refill issued right after its slot's math is waited for by the very next slot. The
  // tiles of one token tile and two strips refill slot s - 1 once slot s's weights are in
  // use instead: each chunk is then requested a whole chunk's math before its wait. On the
  // H200 at M = 1 that took 8192 x 8192 from 12.4 to 10.2 us and a SwiGLU pair of 4096 x
  // 14336 from 20.0 to 17.9 us; the other tiles measured slower with it (one strip, three
  // slots: 12.8 against 12.6 us; the deep tile, 14336 x 4096: 13.4 against 12.3), so
  // they refill right away. Two token tiles refill late only on a grid of several turns,
  // whose CTAs then also fetch the next row set's first chunks during a set's reduction
  // (M = 9 / 16, session 21: 8192 x 28672, 4 turns, 48.9 / 50.5 -> 46.7 / 47.8 us; on one
  // turn 8192 x 8192 13.0 / 13.4 -> 13.4 / 13.6 and the cluster tiles of 14336 x 4096
  // 13.2 / 13.5 -> 13.8 / 14.2). Measured again in session 41 with kRefillStep below: the
  // one-turn grids still 1.9-4.8% slower with late refills (8192 x 8192, 4096 x 8192 at M =
  // 9 / 16), 8192 x 4096 and the cluster tiles of 14336 x 4096 now 1.3-3.4% faster.
  static constexpr bool kDeferRefill = (T == 1 || kTurns) && R == 2;
  // The k16 step of a slot's first block after which the late refill issues: after the
  // first (the first use of the slot's weights) for one token tile; after the third for
  // two, whose four activation loads a block outnumber the scoreboards that ptxas leaves
  // them. With the refill after the first step, the stream-K tiles of two token tiles had
  // two of one slot's activation loads on the weights' scoreboard, so the third step's
  // HMMAs waited for the refill issued just before them: a memory latency exposed every
  // round (scripts/sass-scoreboards.py --check lists such MMAs). After the third step no
  // MMA waits there. On the H200 (session 41, two calls) that took 4096 x 14336 at M = 9
  // from 13.04-13.05 to 12.73-12.78 us and at M = 16 0.7-1.2% off, 8192 x 28672 up to
  // 0.8%, the rest within 0.5% either way; after the first block instead, two HMMAs waited
  // there and the stream-K shapes took 3-4% longer.
  static constexpr int kRefillStep = T == 2 ? 2 : 0;
  // kEarlyX (two token tiles): the next block's activations load into each half's
  // registers as soon as that half is used up, so that they arrive during this block's
  // math (ncu put a fifth of the two-tile samples on HMMAs waiting for the second block's
  // activations, whose loads issued only as the block started). Those early loads take
  // the scoreboards that the refill had after the first block's third step, so the refill
  // moves to the second block's third step, where again no MMA waits on the weights'
  // scoreboard. On the H200 at M = 9 / 16 (session 42): 8192 x 28672 43.03 / 44.29 ->
  // 41.35 / 43.92 us, 8192 x 22016 33.22 / 34.47 -> 32.29 / 33.43, the one-turn and
  // cluster grids within 1%; but 4096 x 14336 (stream-K, two rounds a set) 1.5-1.7%
  // slower at M = 9, so the stream-K grid takes it only on longer sets (its launcher).
  static_assert(!kEarlyX || T == 2);
  static constexpr int kRefillBlock = kEarlyX ? 1 : 0;
};

// S = 1 << p.split_shift: the warps sharing one row set; kCluster: launched in clusters
// of C = 1 << p.cluster_shift CTAs sharing each set (decode_split.cuh). Without it the
// cluster terms fold away (a runtime C cost the one-strip tile a 20-byte spill). kTurns:
// DecodeTile's. kStream: the row sets split by work over the grid (decode_stream.cuh),
// S = kCtaWarps, the sets shared by two CTAs summed through p.stream_sums. kCtaWarps:
// kWarps, or kWideWarps with all of them on one row set (S ignored). kEarlyX: DecodeTile's,
// on every tile of two token tiles but the stream-K grid's of short sets. kZp: above.
template <int T, int R, bool kBf16, bool kGlu = false, bool kDeep = false, bool kCluster = false,
          bool kTurns = false, bool kStream = false, int kCtaWarps = kWarps, bool kEarlyX = T == 2,
          bool kZp = false>
__global__ void __launch_bounds__(kCtaWarps * 32,
                                  DecodeTile<T, R, kDeep, kTurns, kCtaWarps, kEarlyX>::kMinBlocks)
    DecodeKernel(const __grid_constant__ Params p) {
  static_assert(!kGlu || R == 2, "a SwiGLU row set is one gate strip and one up strip");
  using Tl = DecodeTile<T, R, kDeep, kTurns, kCtaWarps, kEarlyX>;
  static_assert(!Tl::kWide || !(kGlu || kCluster));
  constexpr int kSlots = Tl::kSlots;
  constexpr int kCtaThreads = kCtaWarps * 32;
  // Floats of one warp's partial tile: [r][tile][lane][4].
  constexpr int kWarpFloats = R * T * 32 * 4;
  // Double-buffered, so that one barrier per row set suffices.
  __shared__ float4 red[2][kCtaWarps * R * T * 32];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // N <= kMaxDim (kernels/format.h): strip, set and unit counts fit an int.
  const int strips = static_cast<int>((p.n + kStripRows - 1) / kStripRows);
  const int sets = kGlu ? strips : (strips + R - 1) / R;
  static_assert(!kStream || !(kGlu || kCluster));
  using Split = std::conditional_t<kStream, DecodeStreamOf<kCtaWarps>, DecodeSplitOf<kCtaWarps>>;
  const Split ws = [&] {
    if constexpr (kStream) {
      return Split(sets, p.chunks, warp);
    } else {
      return Split(p.split_shift, kCluster ? p.cluster_shift : 0, p.chunks, warp);
    }
  }();
  const int sets_per_cta = ws.sets_per_cta;
  const int units = ws.Units(sets);
  auto set_of = [&](int unit) { return ws.SetOf(unit); };

  // This lane's k range of its tokens' rows: k = 16t .. 16t + 15 of each block.
  const uint8_t* xr[T];
#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    const int tok = tile * 8 + g;
    xr[tile] = tok < p.m ? static_cast<const uint8_t*>(p.x) + (tok * p.k + 16 * t) * 2 : nullptr;
  }

  uint4 wq[kSlots][R][2];
  uint32_t sq[kSlots][R];
  uint32_t zq[kZp ? kSlots : 1][R];  // zero-bias pairs
  // Slot `slot` <- chunk `c` of row set `set`: R strips, both blocks, and their scales
  // (and zero biases).
  auto load = [&](int slot, int set, int c) {
    const int strip = kGlu ? set : set * R;
    const int64_t group = strip / kGroupStrips;
    const int in_group = strip % kGroupStrips;
    const int64_t w_off =
        group * p.w_group_stride + c * p.w_chunk_stride + in_group * kStripChunkBytes + lane * 16;
    const int64_t s_off =
        group * p.s_group_stride + c * p.s_chunk_stride + in_group * kStripScaleBytes + g * 4;
    // Strip r of the set: the next strip of p.w, or for SwiGLU the same strip of p.w_up.
    auto strip_w = [&](int r) {
      return kGlu ? (r == 0 ? p.w : p.w_up) + w_off : p.w + w_off + r * kStripChunkBytes;
    };
    auto strip_s = [&](int r) {
      return kGlu ? (r == 0 ? p.s : p.s_up) + s_off : p.s + s_off + r * kStripScaleBytes;
    };
    auto strip_z = [&](int r) {
      return kGlu ? (r == 0 ? p.zb : p.zb_up) + s_off : p.zb + s_off + r * kStripScaleBytes;
    };
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wq[slot][r][0] = LoadStream(strip_w(r));
      wq[slot][r][1] = LoadStream(strip_w(r) + kBlockBytes);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sq[slot][r] = __ldg(reinterpret_cast<const uint32_t*>(strip_s(r)));
      if constexpr (kZp) {
        zq[slot][r] = __ldg(reinterpret_cast<const uint32_t*>(strip_z(r)));
      }
    }
  };

  int unit = ws.first_unit;
  WarpSpan span = ws.Span(unit);
  if (unit < units && set_of(unit) < sets) {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      if (slot < span.count) load(slot, set_of(unit), span.begin + slot);
    }
  }
  // The first weights are on their way; x may come from the previous kernel.
  WaitForPrerequisiteGrid();
  if (p.early_trigger) AllowDependentLaunch();
  int buf = 0;
  for (; unit < units; unit += ws.unit_stride) {
    const bool live = set_of(unit) < sets;
    const WarpSpan following = ws.Span(unit + ws.unit_stride);
    // The same for every warp, so all reach each barrier.
    const int rounds = (span.per_warp + kSlots - 1) / kSlots;
    float acc[R][T][4] = {};
    for (int round = 0; round < rounds; ++round) {
      const bool last = round + 1 == rounds;
      const int next_unit = last ? unit + ws.unit_stride : unit;
      const int next_round = last ? 0 : round + 1;
      const bool next_live = next_unit < units && set_of(next_unit) < sets;
      const WarpSpan next_span = last ? following : span;
      // This CTA's loads are all issued: the next kernel may take its place as it drains.
      if (last && next_unit >= units) AllowDependentLaunch();
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) {
        const int cc = round * kSlots + slot;
        auto refill_previous = [&] {
          if constexpr (Tl::kDeferRefill) {
            RefillPrevious<kSlots>(ws, slot, round, unit, live, span, next_round, next_unit,
                                   next_live, next_span, load);
          }
        };
        if (!(live && cc < span.count)) refill_previous();
        if (live && cc < span.count) {
          const int64_t kbase = int64_t{span.begin + cc} * kChunkK;
          // kScaled: the weights scaled into acc; else exact sums per chunk in part.
          float part[Tl::kScaled ? 1 : R][T][4] = {};
          ChunkScales sc[Tl::kScaled ? R : 1];
          if constexpr (Tl::kScaled) {
#pragma unroll
            for (int r = 0; r < R; ++r) sc[r] = SplatScales<kBf16>(sq[slot][r]);
          }
          DequantBias bias[R];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if constexpr (kZp) {
              bias[r] = SplatBias(zq[slot][r]);
            } else {
              bias[r] = SymmetricBias<kBf16>();
            }
          }
          // x[h][tile]: a block's activations (L1 hits after the first warp), half h.
          uint4 xb[2][T];
          auto load_x = [&](int blk, int h) {
#pragma unroll
            for (int tile = 0; tile < T; ++tile) {
              xb[h][tile] = xr[tile] != nullptr
                                ? __ldg(reinterpret_cast<const uint4*>(
                                      xr[tile] + (kbase + blk * kBlockK + 8 * h) * 2))
                                : make_uint4(0, 0, 0, 0);
            }
          };
          if constexpr (kEarlyX) {
            load_x(0, 0);
            load_x(0, 1);
          }
#pragma unroll
          for (int blk = 0; blk < kChunkBlocks; ++blk) {
            if constexpr (!kEarlyX) {
              load_x(blk, 0);
              load_x(blk, 1);
            }
            // k16 step q of every strip before step q + 1 of any: the R strips' MMA chains
            // interleave (two strips at M = 1 - 8 on the H200: 8192 x 28672 34.9 -> 34.1 us,
            // 4096 x 14336 at M = 8 10.4 -> 10.0, against each strip's four steps in turn).
            auto step = [&](auto q) {
              constexpr int kQ = decltype(q)::value;
#pragma unroll
              for (int r = 0; r < R; ++r) {
                if constexpr (Tl::kScaled) {
                  MmaStepScaled<T, kQ & 1, kBf16>(Word<kQ>(wq[slot][r][blk]), sc[r], xb[kQ >> 1],
                                                  acc[r], bias[r]);
                } else {
                  MmaStep<T, kQ & 1, kBf16>(Word<kQ>(wq[slot][r][blk]), xb[kQ >> 1], part[r],
                                            bias[r]);
                }
                // The first use of this slot's weights, and its wait, are behind us.
                if (kQ == Tl::kRefillStep && blk == Tl::kRefillBlock && r == 0) refill_previous();
              }
              // kEarlyX: half h of this block's activations is used up after step 2h + 1;
              // its registers take the next block's half h.
              if constexpr (kEarlyX && (kQ & 1) == 1) {
                if (blk + 1 < kChunkBlocks) load_x(blk + 1, kQ >> 1);
              }
            };
            step(std::integral_constant<int, 0>{});
            step(std::integral_constant<int, 1>{});
            step(std::integral_constant<int, 2>{});
            step(std::integral_constant<int, 3>{});
          }
          if constexpr (!Tl::kScaled) {
#pragma unroll
            for (int r = 0; r < R; ++r) ApplyScale<T>(sq[slot][r], part[r], acc[r]);
          }
        }
        const int nc = next_round * kSlots + slot;
        if (!Tl::kDeferRefill && next_live && nc < next_span.count) {
          load(slot, set_of(next_unit), next_span.begin + nc);
        }
      }
    }

    // Sum the S partial tiles of each row set; each thread owns one output element.
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int tile = 0; tile < T; ++tile) {
        red[buf][((warp * R + r) * T + tile) * 32 + lane] =
            make_float4(acc[r][tile][0], acc[r][tile][1], acc[r][tile][2], acc[r][tile][3]);
      }
    }
    ws.SyncPartials();
    const float* rf = reinterpret_cast<const float*>(red[buf]);
    // SwiGLU stores one output per gate element; its up partner is strip r = 1's.
    constexpr int kOutFloats = kGlu ? kWarpFloats / 2 : kWarpFloats;
    // Element e of the unit's outputs: set q = e / kOutFloats of the unit, f = e %
    // kOutFloats = ((r * T + tile) * 32 + lane) * 4 + i; element i of lane (g, t) is row
    // g (+8 for i >= 2), token 2t + (i & 1).
    auto token_of = [&](int e) {
      const int f = e % kOutFloats;
      return f / (4 * 32) % T * 8 + f / 4 % 4 * 2 + (f & 1);
    };
    auto row_of = [&](int e) {
      const int q = e / kOutFloats;
      const int f = e % kOutFloats;
      const int r = f / (4 * 32 * T);
      const int64_t strip = kGlu ? unit * sets_per_cta + q : (unit * sets_per_cta + q) * R + r;
      return strip * kStripRows + f / 16 % 8 + (f % 4 >> 1) * 8;
    };
    if constexpr (kStream) {
      static_assert(kOutFloats == kWarpFloats);
      // One thread an element of the set's tile.
      constexpr int kReducers = kCtaThreads < kOutFloats ? kCtaThreads : kOutFloats;
      if (threadIdx.x < kReducers) {
        ws.template Reduce<kOutFloats, kReducers>(
            unit, rf, p.stream_sums, [&](int e, float v) { StoreY(p, token_of(e), row_of(e), v); });
      }
    } else {
      const int total = sets_per_cta * kOutFloats;
      for (int e = ws.First(total); e < ws.End(total); e += kCtaThreads) {
        const int64_t n = row_of(e);
        const int tok = token_of(e);
        if (n >= p.n || tok >= p.m) continue;
        const int q = e / kOutFloats;
        const int f = e % kOutFloats;
        float v = ws.SumPartials(rf, q, f, kWarpFloats);
        if constexpr (kGlu) {
          const float up = ws.SumPartials(rf, q, kOutFloats + f, kWarpFloats);
          v = ApplyActivation(p.glu_act, v) * up;
        }
        StoreY(p, tok, n, v);
      }
    }
    span = following;
    buf ^= 1;
  }
  ws.Finish();
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_DECODE_CUH_
