// The W2A8 kernel for few tokens (M <= 16): a persistent grid of one wave that streams the
// weight units (w2a8_layout.h) through registers, as the W4A16 decode kernel does
// (w4a16_decode.cuh), with no atomics and no workspace to zero.
//
// A row set is one row group (32 rows), or for one token tile two (kGroups); the 8 warps of
// a CTA work on 8 / S row sets at a time, S warps per set, each on its own contiguous 1/S
// of the k blocks (decode_split.cuh); the S partial int32 tiles are summed through shared
// memory, and the scales applied, once per set. A set's end waits for its slowest warp, so
// two groups a set, which halve the ends per byte, measured up to 13% faster wherever their
// grid keeps enough CTAs (W2A8TwoGroupsPay, decode_plan.h); their tile's registers hold two
// accumulator sets instead of four (the codes' fields 2 and 3 shifted down onto 0 and 1),
// as do the two-token-tile tiles (kFields). Where the row groups are fewer than the SMs,
// a cluster of C CTAs shares each set, and the sum takes in the C S tiles
// (decode_split.cuh). Each warp keeps 4 KB of weights in flight (slots of kUnits units)
// and refills a slot once the next slot's weights are in use (RefillPrevious,
// decode_split.cuh). The activations are the int8 rows, scales and sums the prologue
// kernel wrote (w2a8_prologue.cuh). Where whole row sets per CTA would leave many of the
// CTAs that fit idle, the stream-K grid (kStream, decode_stream.cuh) gives every CTA an
// equal range of the sets' chunks instead.
//
// kGlu: a gated MLP's gate and up projections in one launch (LaunchW2A8Glu). Each row set
// is gate row group s and up row group s (two groups a set, read from p.codes and
// p.codes_up), and the set's end stores act(gate) * up for the gate's rows: the
// activations are quantized once and streamed by one grid, and the product needs no
// launch of its own. Beyond one token tile (9-16 rows) each pair of groups is two sets,
// one a token tile (set v: groups v >> 1, tile v & 1), since the two-token-tile tiles have
// no registers for two groups: neighbouring sets, their weights are read from HBM once
// and from L2 the second time.
#ifndef QMM_KERNELS_CUDA_W2A8_DECODE_CUH_
#define QMM_KERNELS_CUDA_W2A8_DECODE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/activation_device.cuh"
#include "kernels/cuda/decode_split.cuh"
#include "kernels/cuda/decode_stream.cuh"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/w2a8_layout.h"
#include "kernels/cuda/w2a8_operands.h"
#include "kernels/cuda/w2a8_ptx.cuh"
#include "kernels/dtype.h"

namespace qmm::cuda::w2a8 {

inline constexpr int kDecodeWarps = 1 << DecodeSplit::kWarpsLog2;
inline constexpr int kDecodeThreads = kDecodeWarps * 32;
// The k blocks one warp may sum before its field accumulators (codes scaled by up to 64)
// could leave int32; the launch splits K over enough warps to stay within it. (Two fields'
// shared accumulators, codes scaled by up to 4 in twice the k, stay further within it.)
inline constexpr int kDecodeMaxBlocksPerWarp = 2048;
// The int32 elements of one warp's partial tile, a set's outputs for T token tiles of
// kGroups row groups: the stream-K grid's tile (decode_stream.cuh).
constexpr int DecodeTileInts(int T, int kGroups) { return kGroups * kBlocksPerGroup * T * 128; }
struct DecodeParams : Operands {
  int split_shift;    // log2(S)
  int cluster_shift;  // log2(C)
  bool early_trigger;
  uint64_t* stream_sums;  // the stream-K grid's (decode_stream.cuh): GemmArgs::sync
  // kGlu: the up weight (its layout as codes / w_scale, the gate's shape), the gate's
  // activation and log2 of the token tiles (1 or 2), a set for each.
  const uint4* codes_up;
  const float* w_scale_up;
  Activation glu_act;
  int glu_tile_shift;
};

// T tiles of 8 tokens; slots of kUnits units (k blocks) of each of kGroups row groups. In
// flight per warp: 4 KB for one token tile, 2 KB for two, whose accumulators take the
// registers (a 128-register cap: two CTAs an SM).
template <int T, int kUnits, int kGroups = 1>
struct W2A8DecodeTile {
  static constexpr int kSlots = (T == 1 ? 4 : 2) / kUnits / kGroups;
  static constexpr int kMinBlocks = 2;
};

// kCluster: launched in clusters of 1 << p.cluster_shift CTAs sharing each row set
// (decode_split.cuh); without it the cluster terms fold away. kStream: the row sets split
// by work over the grid (decode_stream.cuh), S = 8, the sets shared by two CTAs summed
// through p.stream_sums. kGroups: row groups a set, 1, or 2 for one token tile without
// clusters. kGlu: a gated MLP's row sets (above), two groups, whole sets a CTA.
template <int T, int kUnits, bool kCluster = false, bool kStream = false, int kGroups = 1,
          bool kGlu = false>
__global__ void __launch_bounds__(kDecodeThreads, W2A8DecodeTile<T, kUnits, kGroups>::kMinBlocks)
    W2A8DecodeKernel(const __grid_constant__ DecodeParams p) {
  constexpr int kSlots = W2A8DecodeTile<T, kUnits, kGroups>::kSlots;
  static_assert(kSlots >= 2 && (kGroups == 1 || (kGroups == 2 && T == 1 && !kCluster)));
  static_assert(!kGlu || (kGroups == 2 && !kStream));
  constexpr int kSetBlocks = kGroups * kBlocksPerGroup;  // 16-row blocks a set
  // Accumulators per block and token tile: one per field of the codes, or one per two
  // fields (fields 2 and 3 shifted down onto 0 and 1, one shift more per word) with two
  // groups a set, whose registers need it, and with two token tiles, where it measured 2-10%
  // faster on the H200 (121-122 registers instead of 128; M = 16: 8192 x 28672 28.4 -> 26.7
  // us, 4096 x 11008 11.05 -> 10.14, with clusters 14336 x 4096 13.74 -> 13.33).
  constexpr int kFields = (kGroups == 2 || T == 2) ? 2 : 4;
  const int sets = kGlu ? p.row_groups << p.glu_tile_shift : (p.row_groups + kGroups - 1) / kGroups;
  // kGlu: the token tile of set `set`.
  auto tile_of = [&](int set) { return kGlu ? set & ((1 << p.glu_tile_shift) - 1) : 0; };
  constexpr int kUnitVectors = kUnitBytes / 16;          // 64 16-byte vectors a unit
  constexpr int kBlockVectors = kBytesPerRowBlock / 16;  // 32, one a lane
  // One warp's partial tile: [r][tile][lane] x 4 int32.
  constexpr int kWarpInts = DecodeTileInts(T, kGroups);
  // Double-buffered, so that one barrier per row set suffices.
  __shared__ int4 red[2][kDecodeWarps * kSetBlocks * T * 32];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int chunks = (p.k_blocks + kUnits - 1) / kUnits;
  static_assert(!(kStream && kCluster));
  using Split = std::conditional_t<kStream, DecodeStream, DecodeSplit>;
  const Split ws = [&] {
    if constexpr (kStream) {
      return DecodeStream(sets, chunks, warp);
    } else {
      return DecodeSplit(p.split_shift, kCluster ? p.cluster_shift : 0, chunks, warp);
    }
  }();
  const int units = ws.Units(sets);

  uint4 wq[kSlots][kUnits][kSetBlocks];
  // Slot `slot` <- chunk `c` (k blocks kUnits c ..) of row set `set`. A group past the last
  // (an odd count in sets of two) re-reads the last one: valid memory, results never stored.
  auto load = [&](int slot, int set, int c) {
#pragma unroll
    for (int h = 0; h < kUnits; ++h) {
      const int kb = c * kUnits + h;
      if (kUnits > 1 && kb >= p.k_blocks) break;
#pragma unroll
      for (int q = 0; q < kGroups; ++q) {
        const int group = kGlu ? set >> p.glu_tile_shift : min(set * kGroups + q, p.row_groups - 1);
        const uint4* codes = kGlu && q == 1 ? p.codes_up : p.codes;
        const uint4* src = codes + (int64_t{group} * p.k_blocks + kb) * kUnitVectors + lane;
#pragma unroll
        for (int r = 0; r < kBlocksPerGroup; ++r) {
          wq[slot][h][q * kBlocksPerGroup + r] =
              LoadStream(reinterpret_cast<const uint8_t*>(src + r * kBlockVectors));
        }
      }
    }
  };

  int unit = ws.first_unit;
  WarpSpan span = ws.Span(unit);
  if (unit < units && ws.SetOf(unit) < sets) {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      if (slot < span.count) load(slot, ws.SetOf(unit), span.begin + slot);
    }
  }
  // The first weights are on their way; x may come from the previous kernel.
  WaitForPrerequisiteGrid();
  if (p.early_trigger) AllowDependentLaunch();

  // Element e of a unit's outputs: row set q = e / kWarpInts of the unit, f = e % kWarpInts
  // = ((r * T + tt) * 32 + lane) * 4 + i for its 16-row block r; element i of lane (g, t)
  // is row g (+8 for i >= 2), token 2t + (i & 1).
  auto token_of = [&](int e) {
    const int f = e % kWarpInts;
    return f / (4 * 32) % T * 8 + f / 4 % 4 * 2 + (f & 1);
  };
  auto row_of = [&](int unit, int e) {
    const int set = unit * ws.sets_per_cta + e / kWarpInts;
    const int f = e % kWarpInts;
    return set * kGroups * kRowsPerGroup + f / (4 * 32 * T) * kRowsPerBlock + f / 16 % 8 +
           (f % 4 >> 1) * 8;
  };
  // The elements a thread stores step by the CTA's threads from its first, so they all
  // have one token (the step is a multiple of 128 T): its activation scale and sum, read
  // now, are in registers by the first store, and no barrier waits for them.
  // (kGlu: of each token tile, the sets' tiles differing.)
  static_assert(kDecodeThreads % (128 * T) == 0);
  constexpr int kScaleTiles = kGlu ? 2 : 1;
  const int token = token_of(ws.First(ws.sets_per_cta * kWarpInts));
  float x_scales[kScaleTiles] = {};
  int32_t x_sums[kScaleTiles] = {};
#pragma unroll
  for (int x_tile = 0; x_tile < kScaleTiles; ++x_tile) {
    if (token + 8 * x_tile < p.m) {
      x_scales[x_tile] = __ldg(p.x_scale + token + 8 * x_tile);
      x_sums[x_tile] = __ldg(p.x_sum + token + 8 * x_tile);
    }
  }
  const float x_scale = x_scales[0];
  const int32_t x_sum = x_sums[0];

  // This lane's activations in tile tt of the set's token tiles (from x_tile): token
  // 8(x_tile + tt) + g, k = 16t.. and 64 + 16t.. of a block.
  auto load_b = [&](int x_tile, int tt, int kb, uint32_t(&lo)[4], uint32_t(&hi)[4]) {
    const int tok = (x_tile + tt) * 8 + g;
    uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
    if (tok < p.m) {
      const int8_t* src = p.xq + int64_t{tok} * p.k + int64_t{kb} * kKPerBlock + t * 16;
      v0 = __ldg(reinterpret_cast<const uint4*>(src));
      v1 = __ldg(reinterpret_cast<const uint4*>(src + 64));
    }
    lo[0] = v0.x, lo[1] = v0.y, lo[2] = v0.z, lo[3] = v0.w;
    hi[0] = v1.x, hi[1] = v1.y, hi[2] = v1.z, hi[3] = v1.w;
  };

  int buf = 0;
  for (; unit < units; unit += ws.unit_stride) {
    const bool live = ws.SetOf(unit) < sets;
    const int x_tile = tile_of(ws.SetOf(unit));
    const WarpSpan following = ws.Span(unit + ws.unit_stride);
    const int rounds = (span.per_warp + kSlots - 1) / kSlots;  // the same for every warp
    // acc[r][tt][f]: the sums over field f of the codes, scaled by 4^f (with two fields,
    // over fields f and f + 2, both scaled by 4^f).
    int32_t acc[kSetBlocks][T][kFields][4] = {};
    // The stream-K grid's other part of a shared last set, read as its last round starts,
    // where that measured faster: one token tile, one unit a slot (decode_stream.cuh,
    // Prefetch).
    constexpr bool kPrefetch = kStream && T == 1 && kUnits == 1;
    uint64_t words[kPrefetch ? kWarpInts / kDecodeThreads : 1] = {};
    for (int round = 0; round < rounds; ++round) {
      const bool last = round + 1 == rounds;
      if constexpr (kPrefetch) {
        if (last) ws.template Prefetch<kDecodeThreads>(unit, p.stream_sums, words);
      }
      const int next_unit = last ? unit + ws.unit_stride : unit;
      const int next_round = last ? 0 : round + 1;
      const bool next_live = next_unit < units && ws.SetOf(next_unit) < sets;
      const WarpSpan next_span = last ? following : span;
      // This CTA's loads are all issued: the next kernel may take its place as it drains.
      if (last && next_unit >= units) AllowDependentLaunch();
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) {
        const int cc = round * kSlots + slot;
        auto refill_previous = [&] {
          RefillPrevious<kSlots>(ws, slot, round, unit, live, span, next_round, next_unit,
                                 next_live, next_span, load);
        };
        if (!(live && cc < span.count)) {
          refill_previous();
          continue;
        }
#pragma unroll
        for (int h = 0; h < kUnits; ++h) {
          const int kb = (span.begin + cc) * kUnits + h;
          if (kUnits > 1 && kb >= p.k_blocks) break;
          uint32_t b_lo[T][4], b_hi[T][4];
#pragma unroll
          for (int tt = 0; tt < T; ++tt) load_b(x_tile, tt, kb, b_lo[tt], b_hi[tt]);
#pragma unroll
          for (int r = 0; r < kSetBlocks; ++r) {
            const uint4 w = wq[slot][h][r];
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              // Field j of the codes, in place (scaled by 4^j) or shifted onto field j - 2.
              const int f = j % kFields;
              const int shift = 2 * (j - f);
              const uint32_t mask = 0x03030303u << (2 * f);
              const uint32_t a[4] = {(words[0] >> shift) & mask, (words[1] >> shift) & mask,
                                     (words[2] >> shift) & mask, (words[3] >> shift) & mask};
#pragma unroll
              for (int tt = 0; tt < T; ++tt) MmaU8S8(acc[r][tt][f], a, b_lo[tt][j], b_hi[tt][j]);
              // The first use of this slot's weights is behind us, so is its wait.
              if (h == 0 && r == 0 && j == 0) refill_previous();
            }
          }
        }
      }
    }

    // Sum the S partial tiles of each row set; each thread finishes one output element.
#pragma unroll
    for (int r = 0; r < kSetBlocks; ++r) {
#pragma unroll
      for (int tt = 0; tt < T; ++tt) {
        int32_t s[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (kFields == 4) {
            s[i] = acc[r][tt][0][i] + (acc[r][tt][1][i] >> 2) + (acc[r][tt][2][i] >> 4) +
                   (acc[r][tt][3][i] >> 6);
          } else {
            s[i] = acc[r][tt][0][i] + (acc[r][tt][1][i] >> 2);
          }
        }
        red[buf][((warp * kSetBlocks + r) * T + tt) * 32 + lane] =
            make_int4(s[0], s[1], s[2], s[3]);
      }
    }
    ws.SyncPartials();
    const int32_t* rs = reinterpret_cast<const int32_t*>(red[buf]);
    [[maybe_unused]] auto store = [&](int row, int32_t sum) {
      StoreResult(p, token, row,
                  x_scale * __ldg(p.w_scale + row) * static_cast<float>(sum - x_sum));
    };
    if constexpr (kStream) {
      auto store_element = [&](int e, int32_t sum) {
        const int row = row_of(unit, e);
        if (row < p.n && token < p.m) store(row, sum);
      };
      if constexpr (kPrefetch) {
        ws.template Reduce<kWarpInts, kDecodeThreads>(unit, rs, p.stream_sums, words,
                                                      store_element);
      } else {
        ws.template Reduce<kWarpInts, kDecodeThreads>(unit, rs, p.stream_sums, store_element);
      }
    } else if constexpr (kGlu) {
      // The gate's half of each set's tile; element f's up partner is f + kWarpInts / 2
      // (block r + kBlocksPerGroup, the same lane and token).
      constexpr int kHalf = kWarpInts / 2;
      const int total = ws.sets_per_cta * kWarpInts;
      for (int e = ws.First(total); e < ws.End(total); e += kDecodeThreads) {
        const int set = unit * ws.sets_per_cta + e / kWarpInts;
        const int f = e % kWarpInts;
        const int row = (set >> p.glu_tile_shift) * kRowsPerGroup +
                        f / (4 * 32 * T) * kRowsPerBlock + f / 16 % 8 + (f % 4 >> 1) * 8;
        const int tile = tile_of(set);
        const int tok = token + 8 * tile;
        if (f >= kHalf || set >= sets || row >= p.n || tok >= p.m) continue;
        const int32_t gate = ws.SumPartials(rs, e / kWarpInts, f, kWarpInts);
        const int32_t up = ws.SumPartials(rs, e / kWarpInts, f + kHalf, kWarpInts);
        // (Selects, not an index: the arrays stay in registers.)
        const float scale = tile != 0 ? x_scales[kScaleTiles - 1] : x_scales[0];
        const int32_t sum = tile != 0 ? x_sums[kScaleTiles - 1] : x_sums[0];
        const float g_value = scale * __ldg(p.w_scale + row) * static_cast<float>(gate - sum);
        const float u_value = scale * __ldg(p.w_scale_up + row) * static_cast<float>(up - sum);
        StoreResult(p, tok, row, ApplyActivation(p.glu_act, g_value) * u_value);
      }
    } else {
      const int total = ws.sets_per_cta * kWarpInts;
      for (int e = ws.First(total); e < ws.End(total); e += kDecodeThreads) {
        const int row = row_of(unit, e);
        if (unit * ws.sets_per_cta + e / kWarpInts >= sets || row >= p.n || token >= p.m) {
          continue;
        }
        store(row, ws.SumPartials(rs, e / kWarpInts, e % kWarpInts, kWarpInts));
      }
    }
    span = following;
    buf ^= 1;
  }
  ws.Finish();
}

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_DECODE_CUH_
