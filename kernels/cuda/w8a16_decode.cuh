// The W8A16 kernel for few tokens (M <= 16): a persistent grid of one wave, no
// shared-memory ring, so nothing but the weight stream sets its pace (layout in w8a16.h).
//
// A "row set" is R consecutive row tiles (16R rows). The 8 warps of a CTA work on 8 / S
// row sets at a time, S warps per set, each warp on its own contiguous 1/S of the 32-k
// chunks (intra-CTA split-K); the S partial tiles are summed through shared memory once
// per set, and the row scale is applied to the sum. Where the row sets are fewer than the
// SMs, a cluster of C CTAs shares each set, and the sum takes in the C S tiles
// (decode_split.cuh). CTAs (clusters) stride over the row sets, so the grid is exactly
// what fits on the GPU at once. Where each CTA has one set and at most two share an SM,
// the CTA has 16 warps on its set instead (kWideWarps), alone or two in a cluster: the
// streaming rate follows the warps an SM, not the bytes in flight per warp
// (docs/performance-log.md, sessions 24, 34 and 35). Where the sets outnumber the 16-warp
// CTAs that fit, the stream-K grid (kStream, decode_stream.cuh) gives each of those CTAs
// an equal range of the sets' chunks instead.
//
// Registers are the pipeline: each warp keeps kSlots chunks of R row tiles (3-4 KB per
// warp) in flight, all loads issued before any use, and refills a slot as soon as the
// chunk in it is consumed, with the same slot of the next round or of its next row set,
// so the loads of the next set are already in flight during this set's reduction. One
// MMA chain per warp and tile is enough: 16-32 warps per SM hide its latency. Launched as
// a dependent launch (dependent_launch.h), the first slots fill while the previous kernel
// finishes.
//
// A gated MLP (kGlu, LaunchW8A16Glu): a row set is row tile s of the gate weight (p.w)
// and row tile s of the up weight (p.w_up), R = 2, and the set's end stores act(gate) *
// up for the gate's rows (p.glu_act): both projections stream in one grid and the product
// needs no launch of its own. Beyond one token tile (9-16 rows) each pair of row tiles is
// two sets, one a token tile (set v: tiles v >> 1, token tile v & 1), as W2A8's gated sets
// are: neighbours, the second reads the weights from L2.
#ifndef QMM_KERNELS_CUDA_W8A16_DECODE_CUH_
#define QMM_KERNELS_CUDA_W8A16_DECODE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/activation.h"
#include "kernels/cuda/activation_device.cuh"
#include "kernels/cuda/decode_split.cuh"
#include "kernels/cuda/decode_stream.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/load_device.cuh"
#include "kernels/cuda/w8a16_ptx.cuh"
#include "kernels/dtype.h"

namespace qmm::cuda::w8a16 {

inline constexpr int kDecodeWarps = 8;
// Warps of the wide CTA: where each CTA has one row set and at most two CTAs share an SM
// (8192 x 8192: 256 sets), all of its 16 warps on that set keep 32 warps an SM
// streaming, and the rate follows them, not the bytes in flight a warp: on the H200 at M
// = 1 they took 8192 x 8192 from 19.12 to 17.67 us and 8192 x 6144 from 16.49 to 14.96
// against 12 warps of four slots (24 an SM; docs/performance-log.md, sessions 24 and 34),
// at M = 16 8192 x 8192 from 21.0 to 18.8 against 12 warps (session 35). Within the 64
// registers that two 16-warp CTAs leave: three slots of two row tiles for one token tile,
// two for two, six of one row tile.
inline constexpr int kWideWarps = 16;

struct DecodeParams {
  const uint8_t* w;     // [row tiles][chunks][32 lanes][16 bytes]
  const float* scales;  // [row tiles * 16]
  const void* x;        // [m][k]
  void* y;              // [m][n]
  int64_t m;
  int64_t n;
  int64_t k;
  int32_t row_tiles;
  int32_t chunks;         // K / 32
  int32_t split_shift;    // log2 of the warps sharing one row set (decode_split.cuh)
  int32_t cluster_shift;  // log2 of the CTAs (a cluster) sharing one row set
  DType y_dtype;
  // Added to y when set ([m][n], GemmArgs::residual); not with kGlu.
  const void* residual = nullptr;
  DType residual_dtype = DType::kF32;
  // Let the next kernel launch as soon as this one's wait returns, not only once its
  // last loads are issued (dependent_launch.h says when each pays).
  bool early_trigger = false;
  // The stream-K grid's shared sums (GemmArgs::sync, decode_stream.cuh).
  uint64_t* stream_sums = nullptr;
  // kGlu: the up weight and its scales (the gate's shape and layout) and the gate's
  // activation.
  const uint8_t* w_up = nullptr;
  const float* scales_up = nullptr;
  Activation glu_act = Activation::kSilu;
  int32_t glu_tile_shift = 0;  // kGlu: log2 of the token tiles, a set each
};

// NT tiles of 8 tokens, R row tiles per warp. kDeep: twice the chunks in flight per
// warp, for grids of at most two CTAs per SM (as the W4A16 decode kernel's deep tiles).
// kWarps: a CTA's warps.
template <int NT, int R, bool kDeep = false, int kWarps = kDecodeWarps>
struct DecodeTile {
  static constexpr int kChunkBytes = 512;  // one 32-k chunk of one row tile
  // Row-tile chunks of weights in flight per warp: 3 KB for one row tile, within the 64
  // registers that let 4 CTAs (32 warps, 96 KB in flight) share an SM; 4 KB for two; in
  // the 16-warp CTAs (kWideWarps), whose registers are 64 too, 3 KB for one token tile
  // and 2 KB for two.
  static constexpr int kSlots =
      kWarps == kWideWarps ? (NT == 1 ? 6 / R : 2) : (R == 1 ? 6 : 8 / R) * (kDeep ? 2 : 1);
  // CTAs per SM the registers are capped for (8 warps each; the wide CTAs two).
  static constexpr int kMinBlocks = NT * R == 1 && !kDeep && kWarps == kDecodeWarps ? 4 : 2;
  // Late refills for one token tile and two row tiles, as the W4A16 decode kernel's
  // (RefillPrevious, decode_split.cuh, says when): at M = 1 on the H200, that deep tile took
  // 8192 x 6144 from 20.7 to 19.7 us and 8192 x 8192 from 22.4 to 21.8; with one row tile
  // it helped less and not everywhere (4096 x 4096: 9.1 against 8.8).
  static constexpr bool kDeferRefill = NT == 1 && R == 2;
};

// kCluster: launched in clusters of 1 << p.cluster_shift CTAs sharing each row set
// (decode_split.cuh); without it the cluster terms fold away. kWarps: 8, or kWideWarps
// (above) with all of them on one row set. kStream (kWideWarps, no cluster): the row sets
// split by work over the grid (decode_stream.cuh), the sets shared by two CTAs summed
// through p.stream_sums. kGlu: a gated MLP's row sets (above), whole sets a CTA.
template <typename T, int NT, int R, bool kDeep = false, bool kCluster = false,
          int kWarps = kDecodeWarps, bool kStream = false, bool kGlu = false>
__global__ void __launch_bounds__(kWarps * 32, DecodeTile<NT, R, kDeep, kWarps>::kMinBlocks)
    DecodeKernel(const __grid_constant__ DecodeParams p) {
  using Tl = DecodeTile<NT, R, kDeep, kWarps>;
  constexpr int kSlots = Tl::kSlots;
  constexpr int kThreads = kWarps * 32;
  // Floats of one warp's partial tile: [r][tile][lane][4].
  constexpr int kWarpFloats = R * NT * 32 * 4;
  // Double-buffered, so that one barrier per row set suffices, where that fits in the 48
  // KB of static shared memory; else one buffer and a second barrier.
  constexpr int kBuffers = kWarps * R * NT * 32 * 16 * 2 <= 48 << 10 ? 2 : 1;
  __shared__ float4 red[kBuffers][kWarps * R * NT * 32];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t4 = lane % 4;
  static_assert(!kStream || (!kCluster && kWarps == kWideWarps));
  static_assert(!kGlu || (NT == 1 && R == 2 && !kStream && !kCluster),
                "a gate tile and its up tile, one token tile");
  const int sets = kGlu ? p.row_tiles << p.glu_tile_shift : (p.row_tiles + R - 1) / R;
  // kGlu: the token tile of set `set`.
  auto tile_of = [&](int set) { return kGlu ? set & ((1 << p.glu_tile_shift) - 1) : 0; };
  using Split = std::conditional_t<kStream, DecodeStreamOf<kWarps>, DecodeSplitOf<kWarps>>;
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

  // This lane's activations: token g of each tile (from token tile x_tile), k = 32c +
  // 8t4 .. +7 (one uint4).
  const uint4* xp[NT];
  auto point_x = [&](int x_tile) {
#pragma unroll
    for (int tile = 0; tile < NT; ++tile) {
      const int tok = (x_tile + tile) * 8 + g;
      xp[tile] = tok < p.m
                     ? reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + tok * p.k) + t4
                     : nullptr;
    }
  };
  point_x(0);

  uint4 wq[kSlots][R];
  // Slot `slot` <- chunk `c` of row set `set`. A set past the last row tile (odd tile
  // counts with R = 2) re-reads the last tile: valid memory, results never stored.
  auto load = [&](int slot, int set, int c) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t rt = kGlu ? set >> p.glu_tile_shift : min(set * R + r, p.row_tiles - 1);
      const uint8_t* w = kGlu && r == 1 ? p.w_up : p.w;
      wq[slot][r] = LoadStream(w + (rt * p.chunks + c) * Tl::kChunkBytes + lane * 16);
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
    if constexpr (kGlu) point_x(tile_of(set_of(unit)));
    const WarpSpan following = ws.Span(unit + ws.unit_stride);
    // The same for every warp, so all reach each barrier.
    const int rounds = (span.per_warp + kSlots - 1) / kSlots;
    float acc[R][NT][4] = {};
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
          const int c = span.begin + cc;
          uint4 xv[NT];
#pragma unroll
          for (int tile = 0; tile < NT; ++tile) {
            xv[tile] = xp[tile] != nullptr ? __ldg(xp[tile] + c * 4) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int r = 0; r < R; ++r) {
            uint32_t a[2][4];
            Dequant<T>(wq[slot][r], a);
#pragma unroll
            for (int tile = 0; tile < NT; ++tile) {
              Mma<T>(acc[r][tile], a[0], xv[tile].x, xv[tile].y);
              // The first use of this slot's weights is behind us, so is its wait.
              if (r == 0 && tile == 0) refill_previous();
              Mma<T>(acc[r][tile], a[1], xv[tile].z, xv[tile].w);
            }
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
      for (int tile = 0; tile < NT; ++tile) {
        const float(&v)[4] = acc[r][tile];
        red[buf][((warp * R + r) * NT + tile) * 32 + lane] = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
    ws.SyncPartials();
    const float* rf = reinterpret_cast<const float*>(red[buf]);
    // Element e of the unit's outputs: set q = e / kWarpFloats of the unit, f = e %
    // kWarpFloats = ((r * NT + tile) * 32 + lane) * 4 + i; element i of lane (g, t4) is
    // row g (+8 for i >= 2), token 2t4 + (i & 1).
    auto row_of = [&](int e) {
      const int q = e / kWarpFloats;
      const int f = e % kWarpFloats;
      const int r = f / (4 * 32 * NT);
      return ((int64_t{unit} * sets_per_cta + q) * R + r) * 16 + f / 16 % 8 + (f % 4 >> 1) * 8;
    };
    auto token_of = [&](int e) {
      const int f = e % kWarpFloats;
      return f / (4 * 32) % NT * 8 + f / 4 % 4 * 2 + (f & 1);
    };
    auto store = [&](int e, float sum) {
      const int64_t n = row_of(e);
      const int64_t tok = token_of(e);
      if (n < p.n && tok < p.m) {
        StoreWithResidual(p.y_dtype, p.y, p.residual, p.residual_dtype, tok * p.n + n,
                          sum * p.scales[n]);
      }
    };
    if constexpr (kGlu) {
      // One thread a gate element (r = 0), its up partner kGateFloats further (r = 1).
      constexpr int kGateFloats = kWarpFloats / 2;
      const int total = sets_per_cta * kGateFloats;
      for (int e = ws.First(total); e < ws.End(total); e += kThreads) {
        const int q = e / kGateFloats;
        const int f = e % kGateFloats;
        const int set = unit * sets_per_cta + q;
        const int64_t n = int64_t{set >> p.glu_tile_shift} * 16 + f / 16 % 8 + (f % 4 >> 1) * 8;
        const int64_t tok = tile_of(set) * 8 + token_of(f);
        if (set >= sets || n >= p.n || tok >= p.m) continue;
        const float gate = ws.SumPartials(rf, q, f, kWarpFloats) * p.scales[n];
        const float up = ws.SumPartials(rf, q, kGateFloats + f, kWarpFloats) * p.scales_up[n];
        StoreAs(p.y_dtype, p.y, tok * p.n + n, ApplyActivation(p.glu_act, gate) * up);
      }
    } else if constexpr (kStream) {
      // One thread an element of the set's tile.
      constexpr int kReducers = kThreads < kWarpFloats ? kThreads : kWarpFloats;
      if (threadIdx.x < kReducers) {
        ws.template Reduce<kWarpFloats, kReducers>(unit, rf, p.stream_sums, store);
      }
    } else {
      const int total = sets_per_cta * kWarpFloats;
      for (int e = ws.First(total); e < ws.End(total); e += kThreads) {
        if (row_of(e) >= p.n || token_of(e) >= p.m) continue;
        store(e, ws.SumPartials(rf, e / kWarpFloats, e % kWarpFloats, kWarpFloats));
      }
    }
    span = following;
    if constexpr (kBuffers == 2) {
      buf ^= 1;
    } else {
      __syncthreads();  // the next unit's partials overwrite these
    }
  }
  ws.Finish();
}

}  // namespace qmm::cuda::w8a16

#endif  // QMM_KERNELS_CUDA_W8A16_DECODE_CUH_
