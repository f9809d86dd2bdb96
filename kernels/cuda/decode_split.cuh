// How the 8 warps of a decode CTA (w4a16_decode.cuh, w8a16_decode.cuh) share its row sets:
// S warps per set (S = 1, 2, 4 or 8), each on its own contiguous 1/S of the chunks, so a
// CTA works on 8 / S sets at a time. S is a power of two, so the per-warp set-up uses
// shifts: runtime integer divisions there measured up to 4% of a short launch on the H200
// (docs/PERFORMANCE.md, session 17). Also the order of a warp's late refills
// (RefillPrevious), which both kernels' tiles of two strips use.
#ifndef QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_
#define QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_

#include <cuda_runtime.h>

namespace qmm::cuda {

struct DecodeSplit {
  static constexpr int kWarpsLog2 = 3;  // 8 warps a CTA
  int shift;                            // log2(S)
  int split;                            // S
  int sets_per_cta;                     // 8 / S
  int sub;                              // this warp's set among the CTA's
  int per_warp;                         // chunks per warp (the last warp of a set may have fewer)
  int c_begin;                          // this warp's first chunk
  int count;                            // this warp's chunks

  // `shift` comes from the host: deriving it here (__ffs) made the 128-register tiles spill.
  __device__ DecodeSplit(int shift, int chunks, int warp)
      : shift(shift),
        split(1 << shift),
        sets_per_cta((1 << kWarpsLog2) >> shift),
        sub(warp >> shift),
        per_warp((chunks + split - 1) >> shift),
        c_begin(min((warp & (split - 1)) * per_warp, chunks)),
        count(min(per_warp, chunks - c_begin)) {}

  // Units (groups of sets_per_cta sets, one per CTA at a time) covering `sets`.
  __device__ int Units(int sets) const { return (sets + sets_per_cta - 1) >> (kWarpsLog2 - shift); }
  // This warp's set in unit `unit`.
  __device__ int SetOf(int unit) const { return unit * sets_per_cta + sub; }

  // A late refill (the decode tiles' kDeferRefill), called at slot `slot` of round `round`
  // of unit `unit` once that slot's weights are in use: load(slot s - 1, its set, its
  // chunk of the next round, or of the next unit's first round), or at slot 0, load(the
  // last slot, this round's chunk) unless the first fill loaded it. `live` / `next_live`:
  // whether the unit / the next round's unit has this warp's set.
  template <int kSlots, typename Load>
  __device__ void RefillPrevious(int slot, int round, int unit, bool live, int next_round,
                                 int next_unit, bool next_live, Load&& load) const {
    if (slot == 0) {
      const int c = round * kSlots + kSlots - 1;
      const bool first = unit == static_cast<int>(blockIdx.x) && round == 0;
      if (!first && live && c < count) load(kSlots - 1, SetOf(unit), c_begin + c);
    } else {
      const int nc = next_round * kSlots + slot - 1;
      if (next_live && nc < count) load(slot - 1, SetOf(next_unit), c_begin + nc);
    }
  }
};

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_SPLIT_CUH_
