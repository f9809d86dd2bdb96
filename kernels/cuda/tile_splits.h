// The split-K count of W8A16's tile kernel (w8a16.cu) for a launch: how many CTAs, in
// clusters, share each row block's K; and where that kernel takes over from the decode
// kernel up to 16 tokens. Host code only, so that a CPU test pins the choices
// measured on the H200 (tests/kernels/cuda/tile_splits_test.cc).
#ifndef QMM_KERNELS_CUDA_TILE_SPLITS_H_
#define QMM_KERNELS_CUDA_TILE_SPLITS_H_

#include <cstdint>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/decode_plan.h"

namespace qmm::cuda {

// The share of `waves` x `slots` CTA places that `ctas` CTAs fill.
inline double WaveEfficiency(int64_t ctas, int64_t slots) {
  const int64_t waves = (ctas + slots - 1) / slots;
  return static_cast<double>(ctas) / static_cast<double>(waves * slots);
}

// The split count for a launch of `ctas` CTAs (before splitting) of a tile of `tokens`
// tokens that fits `fit` on `sms` SMs. Each CTA keeps at least two load groups of K.
//
// Up to 32 tokens the tiles are memory-bound: the largest split whose CTAs all stream at
// once (a second, partial wave left most SMs idle at the end, measured on the H200:
// 28672 x 8192 at M = 16 took 109 us with 256 CTAs in clusters of 4, of which 248 fit, 87
// with 128 in clusters of 2). Wider tiles never gained from a second wave.
//
// One token tile (M <= 8) streams and nothing else, so CTAs started as others finish keep
// the HBM busy across waves. Measured at M = 1 and 8 with each split forced, on 16 shapes
// of 8-448 row blocks and 128-896 chunks (docs/performance-log.md, session 23): beyond one
// wave, CTAs of fewer than 64 chunks and clusters of 8 never won; a split beyond one wave
// won where it filled its waves far better (8192 x 22016: 4 splits, 688 CTAs in 2.8 waves
// filling 92% of them, 51.4 us against 58.1 for one wave of 172 filling 65%), hence 15%
// more (smaller margins hang on the exact cluster fit: 15% keeps every measured choice
// for 58 to 63 clusters of 4); and a single wave that leaves a tenth of the slots idle
// gained from doubling its split where the CTAs keep 128 chunks and the second wave is at
// least half full (8192 x 28672: 448 CTAs, 62.2 us against 65.5 for one wave of 224).
//
// Clusters need not be powers of two. Of 3 CTAs, 79 fit at once on the H200 (237 CTAs):
// where 64 row blocks leave clusters of 4 a second turn, 3 splits won at M = 1 and 16
// (session 24, us at 2 / 3 / 4 splits, M = 1: 28672 x 8192 70.3 / 60.9 / 92.0, 22016 x
// 8192 55.0 / 47.9 / 71.9, 14336 x 8192 37.0 / 32.9 / 49.0). 5 never won; 6 (39 clusters)
// only at 32 row blocks on 14336 x 4096, which the decode kernel takes; so 3 joins the
// powers of two for the memory-bound tiles only.
//
// Compute-bound tiles want whole waves: each doubling must raise the wave efficiency by
// 5%.
inline int TileSplits(int64_t ctas, int sms, const KernelFit& fit, int chunks, int group_chunks,
                      int tokens) {
  constexpr int kMinWaveChunks = 64;  // a streaming CTA's chunks, beyond one wave
  constexpr int kMaxWaveSplits = 4;   // streaming, beyond one wave
  constexpr int kDoubleChunks = 128;
  const bool memory_bound = tokens <= 32;
  const bool streaming = tokens == 8;
  int best = 1;
  double best_eff = WaveEfficiency(ctas, SplitSlots(1, sms, fit));
  for (const int s : {2, 3, 4, 8}) {
    if (s == 3 && !memory_bound) continue;
    if (chunks < s * 2 * group_chunks) break;
    const int64_t slots = SplitSlots(s, sms, fit);
    if (slots == 0) continue;  // clusters of s do not run
    const double eff = WaveEfficiency(ctas * s, slots);
    if (memory_bound && ctas * s <= slots) {
      best = s;
      best_eff = eff;
      continue;
    }
    if (memory_bound && !(streaming && s <= kMaxWaveSplits && chunks >= s * kMinWaveChunks)) {
      break;
    }
    if (eff > best_eff + (streaming ? 0.15 : 0.05)) {
      best = s;
      best_eff = eff;
    }
  }
  const int next = best * 2;
  if (streaming && next <= kMaxWaveSplits && ctas * best <= SplitSlots(best, sms, fit) &&
      best_eff < 0.9 && chunks >= next * kDoubleChunks) {
    const int64_t n = ctas * next;
    const int64_t slots = SplitSlots(next, sms, fit);
    if (slots > 0 && n > slots && (n % slots == 0 || n % slots >= slots / 2)) best = next;
  }
  return best;
}

// Whether the tile kernel streams a launch of up to 16 tokens faster than the decode
// kernel's grid `decode` (decode_plan.h) would, for a K of `chunks` chunks on `sms` SMs;
// `wide`: the decode grid runs its wide CTAs (TakesWideCtas, w8a16_decode.cuh kWideWarps). Both
// measured on the H200 at M = 1 and 16 over K = 4096, 8192, 14336 and N = 2048 to 12288
// (docs/performance-log.md, sessions 24 and 25): where the decode grid gives the SMs fewer than 1.8
// row sets each (a cluster's CTAs counted apart), its 8-warp CTAs stream too slowly on their own
// (8192 x 6144, 192 sets: 19.9 us against the tile kernel's 16.7), unless K is short: the tile
// kernel's CTAs then hold too few chunks (4096 x 3072: 6.8 against 7.8). 12-warp CTAs
// stream as fast as the tile kernel at M = 1 and faster at 9-16 tokens (8192 x 6144:
// 16.5 against 16.7 us, 18.6 against 20.8); the 16-warp CTAs (sessions 34 and 35) faster
// still (14.96 us at M = 1).
inline bool TileBeatsDecode(const DecodeGrid& decode, int chunks, int sms, bool wide) {
  constexpr int kMinChunks = 256;  // K of 8192
  return !wide && chunks >= kMinChunks && decode.units * decode.cluster * 5 < int64_t{sms} * 9;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_TILE_SPLITS_H_
