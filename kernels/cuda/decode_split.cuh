// How the 8 warps of a decode CTA (w4a16_decode.cuh, w8a16_decode.cuh, w2a8_decode.cuh)
// share its row sets: S warps per set (S = 1, 2, 4 or 8), each on its own contiguous 1/S
// of the chunks, so a CTA works on 8 / S sets at a time. Where the row sets are too few
// to give every SM its share of the weight stream (a long K and a narrow N: 14336 x 4096
// has 128 two-strip W4A16 sets for 132 SMs), a cluster of C = 2 or 4 CTAs shares each set
// instead: its C * S warps each take 1/(C S) of the chunks, and each CTA finishes 1/C of
// the set's outputs from every CTA's partial tiles (distributed shared memory). S and C
// are powers of two, so the per-warp set-up uses shifts: runtime integer divisions there
// measured up to 4% of a short launch on the H200 (docs/performance-log.md, session 17). Also
// the order of a warp's late refills (RefillPrevious), which the tiles of two strips use.
// A CTA of another number of warps (W8A16's wide tiles, w8a16_decode.cuh) has them all on
// one row set (S = its warps), alone or in a cluster.
#ifndef QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_
#define QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_

#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace qmm::cuda {

// A warp's chunks of one unit: [begin, begin + count). per_warp, the most that any warp of
// the unit has, sets the unit's rounds, which every warp runs so that all reach its
// barrier.
struct WarpSpan {
  int begin;
  int count;
  int per_warp;
};

// A late refill (the decode tiles' kDeferRefill), called at slot `slot` of round `round`
// of unit `unit` once that slot's weights are in use: load(slot s - 1, its set, its
// chunk of the next round, or of the next unit's first round), or at slot 0, load(the
// last slot, this round's chunk) unless the first fill loaded it. `live` / `next_live`:
// whether the unit / the next round's unit has this warp's set; `span` / `next_span`:
// this warp's chunks of them. `split`: the grid's split (DecodeSplitOf, DecodeStream).
template <int kSlots, typename Split, typename Load>
__device__ void RefillPrevious(const Split& split, int slot, int round, int unit, bool live,
                               const WarpSpan& span, int next_round, int next_unit, bool next_live,
                               const WarpSpan& next_span, Load&& load) {
  if (slot == 0) {
    const int c = round * kSlots + kSlots - 1;
    const bool first = unit == split.first_unit && round == 0;
    if (!first && live && c < span.count) load(kSlots - 1, split.SetOf(unit), span.begin + c);
  } else {
    const int nc = next_round * kSlots + slot - 1;
    if (next_live && nc < next_span.count) {
      load(slot - 1, split.SetOf(next_unit), next_span.begin + nc);
    }
  }
}

template <int kWarps>
struct DecodeSplitOf {
  static constexpr int kWarpsLog2 = 3;                        // 8 warps a CTA, S a power of two
  static constexpr bool kOneSet = kWarps != 1 << kWarpsLog2;  // S = kWarps
  int shift;                                                  // log2(S)
  int split;                                                  // S
  int cluster_shift;  // log2(C); the launch's cluster is C x 1 x 1
  int rank;           // this CTA's rank in its cluster
  int sets_per_cta;   // 8 / S
  int sub;            // this warp's set among the CTA's
  int first_unit;     // this cluster's first unit
  int unit_stride;    // clusters in the grid
  int per_warp;       // chunks per warp (the last warps of a set may have fewer)
  int c_begin;        // this warp's first chunk
  int count;          // this warp's chunks

  // `shift` comes from the host: deriving it here (__ffs) made the 128-register tiles spill.
  // kOneSet ignores `shift`.
  __device__ DecodeSplitOf(int shift, int cluster_shift, int chunks, int warp)
      : shift(shift),
        split(kOneSet ? kWarps : 1 << shift),
        cluster_shift(cluster_shift),
        rank(static_cast<int>(blockIdx.x) & ((1 << this->cluster_shift) - 1)),
        sets_per_cta(kOneSet ? 1 : (1 << kWarpsLog2) >> shift),
        sub(kOneSet ? 0 : warp >> shift),
        first_unit(static_cast<int>(blockIdx.x) >> this->cluster_shift),
        unit_stride(static_cast<int>(gridDim.x) >> this->cluster_shift),
        per_warp(kOneSet
                     ? (chunks + (kWarps << cluster_shift) - 1) / (kWarps << cluster_shift)
                     : (chunks + (1 << (shift + cluster_shift)) - 1) >> (shift + cluster_shift)),
        c_begin(min(
            (kOneSet ? rank * kWarps + warp : (rank << shift) | (warp & (split - 1))) * per_warp,
            chunks)),
        count(min(per_warp, chunks - c_begin)) {}

  // Units (groups of sets_per_cta sets, one per cluster at a time) covering `sets`.
  __device__ int Units(int sets) const {
    return kOneSet ? sets : (sets + sets_per_cta - 1) >> (kWarpsLog2 - shift);
  }
  // This warp's set in unit `unit`.
  __device__ int SetOf(int unit) const { return kOneSet ? unit : unit * sets_per_cta + sub; }

  // Every warp of the cluster has stored its partial tiles of this unit: a CTA barrier, or
  // the cluster's (which also keeps a CTA from storing into a buffer that another still
  // reads: the reductions double-buffer, so a store waits for the reads of two units ago).
  __device__ void SyncPartials() const {
#if __CUDA_ARCH__ >= 900
    if (cluster_shift != 0) {
      cooperative_groups::this_cluster().sync();
      return;
    }
#endif
    __syncthreads();
  }
  // Before the CTA exits: no CTA's shared memory may go while another one reads it.
  __device__ void Finish() const {
#if __CUDA_ARCH__ >= 900
    if (cluster_shift != 0) cooperative_groups::this_cluster().sync();
#endif
  }
  // The output elements this thread finishes of a unit's `total` (a multiple of C): from
  // First(total) in steps of the CTA's threads, below End(total); each CTA of a cluster
  // its own contiguous 1/C of them (consecutive threads on consecutive elements).
  __device__ int First(int total) const {
    return rank * (total >> cluster_shift) + static_cast<int>(threadIdx.x);
  }
  __device__ int End(int total) const { return (rank + 1) * (total >> cluster_shift); }
  // Element f of set q (of this unit) summed over the S partial tiles of every CTA of the
  // cluster; `red` holds each warp's tile of `warp_elems` elements, in warp order. The
  // loops run to their largest counts, so that all the loads (remote ones take a round
  // trip) are issued before the first add waits: within a CTA too, where a loop of S
  // dependent loads and adds made every set's end wait S shared-memory round trips (on the
  // H200, W2A8 8192 x 28672 at M = 1 20.22 -> 19.74 us, 4096 x 4096 at M = 16 6.84 ->
  // 6.38; W4A16 4096 x 4096 at M = 1 4.51 -> 4.37).
  template <typename V>
  __device__ V SumPartials(const V* red, int q, int f, int warp_elems) const {
    V sum = 0;
    if (cluster_shift == 0) {
      V part[kWarps];
#pragma unroll
      for (int s = 0; s < kWarps; ++s)
        part[s] = s < split ? red[(q * split + s) * warp_elems + f] : 0;
#pragma unroll
      for (int s = 0; s < kWarps; ++s) sum += part[s];
      return sum;
    }
#if __CUDA_ARCH__ >= 900
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (c >= (1 << cluster_shift)) break;
      const V* r = cooperative_groups::this_cluster().map_shared_rank(red, c);
#pragma unroll
      for (int s = 0; s < kWarps; ++s) {
        if (s < split) sum += r[(q * split + s) * warp_elems + f];
      }
    }
#endif
    return sum;
  }

  // This warp's chunks of any unit (the same for each).
  __device__ WarpSpan Span(int /*unit*/) const { return {c_begin, count, per_warp}; }
};

using DecodeSplit = DecodeSplitOf<1 << 3>;

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_
