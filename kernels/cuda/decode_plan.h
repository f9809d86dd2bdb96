// The host half of decode_split.cuh: how many warps (S) and CTAs (C) share each row set
// and how many CTAs the persistent decode grids of w4a16.cu, w8a16.cu and w2a8.cu launch.
#ifndef QMM_KERNELS_CUDA_DECODE_PLAN_H_
#define QMM_KERNELS_CUDA_DECODE_PLAN_H_

#include <algorithm>
#include <bit>
#include <cstdint>

namespace qmm::cuda {

struct DecodeGrid {
  int split = 1;      // S, warps per row set in a CTA
  int cluster = 1;    // C, CTAs per row set (a cluster of C x 1 x 1)
  int64_t units = 0;  // groups of 8 / S row sets, one per cluster at a time
  int64_t ctas = 0;   // gridDim.x, a multiple of C

  // log2 of S and C, as the decode kernels take them (decode_split.cuh).
  int split_shift() const { return std::countr_zero(static_cast<unsigned>(split)); }
  int cluster_shift() const { return std::countr_zero(static_cast<unsigned>(cluster)); }
};

// The fewest bytes of weights per warp a cluster split leaves: below, the cluster's
// barrier and reduction cost more than the spread stream gains (on the H200 at M = 1,
// 4096 x 4096 with clusters of 2 at 4 KB a warp: W4A16 5.37 us against 4.65, W2A8 at 2
// KB 5.78 against 5.39; W8A16 at 8 KB 7.74 against 8.95). W2A8's clusters pay from less:
// 11008 x 4096 in clusters of 2 (5.4 KB a warp) took 8.28 / 8.54 us at M = 1 / 4 against
// 9.40 / 9.59 without, and as long at M = 8 (10.04 against 10.05; session 55).
inline constexpr int kMinClusterWarpBytes = 6 << 10;
inline constexpr int kW2A8MinClusterWarpBytes = 5 << 10;
// With one token tile (up to 8 tokens) and sets that leave a quarter of the SMs idle,
// W2A8's clusters of two pay from 4 KB a warp. On an H100 (session 73, clusters from 4 KB
// against the plan before, M = 1 / 4 / 8) 8192 x 2048 (64 sets) 7.23 / 7.40 / 7.48
// us -> 6.73 / 7.23 / 7.38, 8192 x 3072 (96) -2.9 / -2.4 / -0.7%, 8960 x 1536 (48) -5.2 /
// -5.7 / -6.0%; but 8192 x 4096 (128 sets, 4 SMs idle without clusters) +1.5 / +3.1 /
// +9.2%. At 16 tokens clusters at 4 KB cost 2-5% (session 71), and at 2.5-3.4 KB a warp
// (5120 x 2048, 6912 x 2560) 5-10% at every M.
inline constexpr int kW2A8OneTileMinClusterWarpBytes = 4 << 10;
// MakeDecodeGrid's min_cluster_warp_bytes for a W2A8 decode launch of `sets` row sets.
inline int W2A8MinClusterWarpBytes(bool one_tile, int64_t sets, int sms) {
  return one_tile && sets * 4 <= int64_t{sms} * 3 ? kW2A8OneTileMinClusterWarpBytes
                                                  : kW2A8MinClusterWarpBytes;
}

// `sets` row sets of `chunks` chunks of `chunk_bytes` each, 8-warp CTAs of which `slots`
// fit on the device at once, and cluster_slots[c] clusters of c = 2 to 8 CTAs
// (KernelFit::clusters, cluster_fit.h).
// S is the cheapest power of two from min_split up, capped at max_split. Cost: the row
// sets on the busiest SM (CTAs take units of 8 / S sets in turn, so SM b % sms holds CTAs
// b, b + sms, ...), 10% more when the units outnumber the CTAs that fit at once (the last
// turn leaves CTAs idle and fewer bytes in flight); ties go to more warps per set, which
// shortens each warp's run. Where even S = 8 leaves SMs without a set, a cluster of C = 4
// or 2 CTAs shares each set (the largest whose clusters all fit at once, with
// min_cluster_warp_bytes a warp); `cluster` > 0 forces C. Beyond one turn, units / turns
// clusters, so that every cluster has as many units and no last turn runs on a fraction
// of the grid.
inline DecodeGrid MakeDecodeGrid(int64_t sets, int chunks, int chunk_bytes, int sms, int64_t slots,
                                 const int (&cluster_slots)[9], int min_split = 1,
                                 int max_split = 8, int cluster = 0,
                                 int min_cluster_warp_bytes = kMinClusterWarpBytes) {
  constexpr int kWarps = 8;
  DecodeGrid grid;
  double best_cost = -1;
  for (int s = kWarps; s >= 1; s /= 2) {
    if (s < min_split || (s > chunks && s > min_split)) continue;
    const int per_cta = kWarps / s;
    const int64_t units = (sets + per_cta - 1) / per_cta;
    double cost = static_cast<double>((units + sms - 1) / sms * std::min<int64_t>(per_cta, sets));
    if (units > slots) cost *= 1.1;
    if (best_cost < 0 || cost < best_cost) {
      grid.split = s;
      best_cost = cost;
    }
  }
  grid.split = std::max(std::min(grid.split, max_split), min_split);
  const int64_t per_cta = kWarps / grid.split;
  grid.units = (sets + per_cta - 1) / per_cta;
  if (cluster == 0 && grid.split == kWarps && grid.units < sms) {
    for (int c = 4; c >= 2; c /= 2) {
      if (grid.units <= cluster_slots[c] &&
          int64_t{chunks} * chunk_bytes >= int64_t{c} * kWarps * min_cluster_warp_bytes) {
        cluster = c;
        break;
      }
    }
  }
  grid.cluster = std::max(cluster, 1);
  const int64_t fit = grid.cluster == 1 ? slots : std::max(cluster_slots[grid.cluster], 1);
  const int64_t turns = (grid.units + fit - 1) / fit;
  grid.ctas = (grid.units + turns - 1) / turns * grid.cluster;
  return grid;
}

// The k a CTA of `grid` (whole row sets of `chunks` chunks of `chunk_k` k each) streams:
// its turns x the sets of a unit x their k.
inline int64_t DecodeRunK(const DecodeGrid& grid, int64_t chunks, int chunk_k) {
  return (grid.units + grid.ctas - 1) / grid.ctas * (8 / grid.split) * chunks * chunk_k;
}
// The run a CTA needs for W2A8's stream-K grid's fixed cost (a set handed on at the end)
// to spread over (W2A8StreamPays).
inline constexpr int64_t kStreamMinRunK = 12288;

// The same for a W8A16 decode launch of two-row-tile sets on 16-warp CTAs (w8a16_decode.cuh
// kWideWarps), of which `wide_slots` fit at once: where the sets outnumber those CTAs (the
// grid of whole sets would run in turns) and no cluster shares them; with two token tiles
// (not `one_tile`) only up to twice as many, beyond which the tile kernel streams faster
// (on the H200 at M = 16, 8192 x 28672: 66.17 us against 72.70; session 35). With 8-warp
// CTAs (session 34) it was 45-50% slower than the tile kernel: this kernel streams at the
// rate of its warps an SM. Where the whole sets fit those CTAs but a set's K is longer than
// one CTA takes (`long_k`: the launch would fall to the tile kernel), the stream-K grid too:
// on the H200 (session 55) 28672 x 8192 at M = 1 / 4 / 8 / 16 took 57.20 / 57.59 / 57.97 /
// 69.14 us on it against the tile kernel's 60.96 / 61.95 / 63.36 / 80.08.
inline bool W8A16StreamPays(const DecodeGrid& grid, int64_t wide_slots, int64_t sets, bool one_tile,
                            bool long_k) {
  if (grid.cluster != 1) return false;
  if (sets <= wide_slots) return long_k;
  return one_tile || sets < 2 * wide_slots;
}

// Whether W8A16's wgmma GEMM takes a launch of 9-16 tokens on an N x K weight from the
// decode kernels, of whose 16-warp CTAs `wide_slots` fit at once on `sms` SMs: where the
// two-row-tile sets outnumber those CTAs (so that the decode launch would run its
// stream-K grid or the tile kernel) and the GEMM's 128-row groups number between three
// quarters of the SMs and all of them (its one-group CTAs of 32 tokens, one an SM, in one
// turn), or, with K of 8192 or more, up to four thirds of them (CTAs of two groups, its
// plan's choice there, unsplit and one an SM). On the H200 (session 55, M = 9 / 16, us;
// decode against the GEMM): 4096 x 14336 (448 sets, 112 groups) 20.12 / 20.59 against
// 17.54 / 17.56, 2048 x 14336 11.94 / 12.17 against 10.69 / 10.67, 8192 x 14336 35.92 /
// 37.27 against 33.16 / 33.26, 5120 x 13824 22.81 / 23.41 against 21.20 / 21.31, 6144 x
// 16384 31.23 / 32.72 against 26.81 / 26.95. With fewer groups the GEMM splits K into a
// second turn (14336 x 11008, 86 groups: 46.66 / 48.71 against 52.35 / 52.07; 4096 x 11008
// even). Beyond 132 groups (session 58, two rounds): 8192 x 17408 / 18944 / 20480 / 22016
// 55.22 / 55.31 / 55.35 / 55.61 against 47.37 / 49.61 / 51.13 / 53.00 at M = 9, 14336 x
// the same 92.5-93.1 against 73.7-84.0, but 8192 x 24576 (192 groups) 62.24 against
// 63.69 and 14336 x 24576 93.51 against 103.48; with K = 4096 and 5120 the GEMM lost by
// 3.5-7% from 148 groups (4096 x 20480: 29.44 against 30.98), and won only at 136 (17408)
// and, with K = 2048, everywhere up to 256 groups (4-18%), a K that large layers lack.
// Where the sets fit at once the decode kernel won (8192 x 8192: 18.51 / 18.91 against
// 19.94 / 19.53).
inline bool W8A16GemmBeatsDecode(int64_t n, int64_t k, int64_t wide_slots, int sms) {
  constexpr int64_t kLongK = 8192;
  const int64_t sets = ((n + 15) / 16 + 1) / 2;
  const int64_t groups = (n + 127) / 128;
  const int64_t most = k >= kLongK ? 4 * int64_t{sms} / 3 : sms;
  return sets > wide_slots && 4 * groups >= 3 * int64_t{sms} && groups <= most;
}

// Whether a W4A16 decode launch takes the stream-K grid (decode_stream.cuh) rather than `grid`, the
// grid of whole row sets (`sets` of them), of which `slots` CTAs fit at once. Not where clusters
// share the sets; where the grid of whole sets leaves a tenth of the CTAs that fit or more idle
// (its turns have fewer CTAs than fit); with one token tile (`one_tile`) also on a grid of one set
// per CTA (the same split, measured faster). On the H200 (session 27, stream-K ranges cut in
// granules of 8 chunks), forced on against off, M = 1 / 16 (us): 8192 x 8704 (272 sets, two turns
// of 136 CTAs) 10.78 / 15.32 against 17.46 / 23.92; 4096 x 14336 (224 CTAs of two sets) 9.47 /
// 13.37 against 9.85 / 13.83; 8192 x 14848 (232 of two) 16.42 / 23.76 against 17.41 / 24.47; not
// taken, 8192 x 15872 (248 of two) 17.43 / 25.19 against 17.93 / 24.62, 8192 x 24576 (three turns
// of 256) 26.07 / 38.42 against 26.51 / 37.21. One set per CTA: at M = 1 2-7% faster (8192 x 8192
// 10.05 us against 10.28), at M = 8 from 8% faster to 2% slower, at M = 16 up to 1% slower from 256
// sets.
inline bool StreamPays(const DecodeGrid& grid, int64_t slots, int64_t sets, bool one_tile) {
  if (grid.cluster != 1) return false;
  return grid.ctas * 10 < slots * 9 || (one_tile && sets <= slots);
}

// Whether a W4A16 decode launch of one token tile takes the stream-K grid rather than
// `grid` (row sets of `chunks` chunks of `chunk_bytes`) where clusters of two share its
// sets: where a warp's share of a set in its cluster is under kW4A16StreamClusterWarpBytes.
// On an H100 (session 71, two rounds, M = 1 / 4 / 8; two-strip sets, 1 KB a strip's chunk)
// the stream-K grid took 6912 x 2560 (6.75 KB a warp) 7.11 / 7.46 / 7.71 -> 5.87 / 5.97 /
// 6.11 us, 8192 x 2048 (8 KB) 6.96 / 7.01 / 7.16 -> 6.24 / 6.59 / 6.29, 8192 x 3072 6-11%
// off, 11008 x 2048 (10.75 KB) 8.64 / 8.76 / 9.00 -> 7.99 / 8.15 / 8.29, 11008 x 4096 3-5%
// and 8960 x 1536 2-3% off; from 14 KB the clusters were as fast or faster (14336 x 4096
// within 0.8%, 14336 x 2048 2-3% faster, 28672 x 2048 14-15%), as on the H200 (14336 x 4096
// and 28672 x 2048: w4a16.cu, LaunchForM). At 9-16 tokens the clusters won on all of these
// (8192 x 2048 16%, 11008 x 2048 23%). With zero points (`zero_points`) only under 8 KB:
// 6912 x 2560 13-15% off, but 8192 x 2048 and 8192 x 3072 (8 KB) from 5.5% faster to 1%
// slower, 8960 x 1536 (8.75 KB) 5-7% and 11008 x 2048 1-2% slower.
inline constexpr int kW4A16StreamClusterWarpBytes = 12 << 10;
inline constexpr int kW4A16ZpStreamClusterWarpBytes = 8 << 10;
inline bool W4A16StreamBeatsClusters(const DecodeGrid& grid, int64_t chunks, int chunk_bytes,
                                     bool zero_points) {
  constexpr int kWarps = 8;
  const int warp_bytes =
      zero_points ? kW4A16ZpStreamClusterWarpBytes : kW4A16StreamClusterWarpBytes;
  return grid.cluster == 2 && chunks * chunk_bytes < int64_t{grid.cluster} * kWarps * warp_bytes;
}

// The same for a W2A8 decode launch (`sets` row sets of `chunks` chunks of `chunk_k` k), whose
// stream-K grid pays less: only where the row sets outnumber the CTAs that fit, and the grid of
// whole sets leaves a fifth of them idle, or an eighth with runs of at least kStreamMinRunK a
// CTA; with one token tile (`one_tile`) only on such runs, and with sets of two row groups
// (`two_groups`, one token tile) only where a fifth is idle. On the H200, forced on against off
// (us): 8192 x 8704 at M = 1 / 16 10.15 / 13.01 against 12.59 / 17.31, 8192 x 28672 (one group a
// set) 21.05 / 27.84 against 22.31 / 30.98; not taken, 4096 x 14336 (224 CTAs of two groups, 8192
// k a CTA) 9.66 / 11.80 against 8.73 / 10.89, 4096 x 11008 at M = 1 8.87 against 8.48 (but at M =
// 16 10.83 against 11.77, taken); one row group a CTA, 8192 x 8192 at M = 1 8.99 against 8.73
// (session 26). Two groups a set, M = 1 / 4 / 8 (session 30): 8192 x 28672 (two turns of 224 CTAs,
// an eighth idle) 20.80 / 21.17 / 21.67 against 20.17 / 20.64 / 20.93, not taken; 8192 x 24576
// (192, 0.73) 18.66 / 18.92 / 19.39 against 19.39 / 19.94 / 20.23 and 8192 x 22016 (172) 17.28 /
// 17.61 / 18.16 against 18.91 / 19.32 / 19.67, taken.
inline bool W2A8StreamPays(const DecodeGrid& grid, int64_t slots, int64_t sets, int64_t chunks,
                           int chunk_k, bool one_tile, bool two_groups = false) {
  if (grid.cluster != 1 || sets <= slots) return false;
  const bool long_runs = DecodeRunK(grid, chunks, chunk_k) >= kStreamMinRunK;
  if (one_tile && !long_runs) return false;
  return grid.ctas * 5 < slots * 4 || (grid.ctas * 8 < slots * 7 && long_runs && !two_groups);
}

// Whether a W2A8 decode launch of one token tile takes row sets of two row groups rather than
// one (w2a8_decode.cuh: a CTA's warps then end a set half as often per byte), given the CTAs
// that each launch's grid runs: where the two-group grid keeps at least 5/8 of the one-group
// grid's CTAs. Halved, the sets of a short N leave too few CTAs streaming. On the H200 (session
// 28), two groups against one, M = 1 / 8 (us): equal CTAs, 4096 x 8704 (136) 7.27 / 7.61
// against 8.26 / 8.50, 4096 x 14336 (224) 7.78 / 8.25 against 8.56 / 8.80, 8192 x 28672 (264,
// against two units a slot) 20.97 / 21.81 against 21.18 / 22.09; fewer, 8192 x 14336 (224
// against 264) 12.05 / 12.47 against 13.92 / 14.14, 8192 x 11264 (176) 11.21 / 11.48 against
// 11.26 / 11.68, 8192 x 10240 (160) 11.19 / 11.35 against 11.55 / 11.81 (not taken: the 5/8
// keeps a margin); slower below, 8192 x 9728 (152) 11.04 / 11.26 against 10.48 / 10.84, 8192 x
// 8704 (136) 10.87 / 11.18 against 10.02 / 10.42, 8192 x 8192 (128 against 256) 10.05 / 11.02
// against 8.47 / 9.61.
inline bool W2A8TwoGroupsPay(int64_t one_group_ctas, int64_t two_group_ctas) {
  return two_group_ctas * 8 >= one_group_ctas * 5;
}

// Whether a W4A16 decode launch of two token tiles takes the wide CTAs (w4a16_decode.cuh
// kWideWarps: one strip a set, all 16 warps of a CTA on it, `wide_slots` of them at once)
// rather than `grid`, the grid of two-strip sets: only where that grid leaves the SMs one
// 8-warp CTA or none (fewer CTAs than SMs and no cluster: a narrow N and a short K) and the
// wide grid has every strip at once. On the H200 at M = 9 / 16 (session 36): 4096 x 4096
// (128 two-strip CTAs for 132 SMs) 6.35 / 6.37 -> 5.39 / 5.54 us; where the two-strip grid
// fills the SMs the wide CTAs were 7-61% slower (14336 x 4096, clusters of two: 13.62 ->
// 14.90 at M = 16; 8192 x 8192 13.18 -> 17.14; with four chunks a warp they end a set
// too often), as they were at M <= 8 (4096 x 4096 4.35 -> 4.38 at M = 1).
inline bool W4A16WidePays(const DecodeGrid& grid, int sms, int64_t strips, int64_t wide_slots) {
  return grid.cluster == 1 && grid.ctas < sms && strips <= wide_slots;
}
// Whether the W4A16 wgmma GEMM takes a launch of 17-32 tokens (m) that the decode kernel's
// grid of four token tiles covers at once (`sets` one-strip sets on `slots` CTAs that fit),
// for a K of k. The decode kernel's fixed costs are smaller, but its time grows faster
// with K and with the tokens: on the H200 (session 52; N = 4096, us at M = 17 / 32)
// decode 7.05 / 8.35 against the GEMM's 8.87 at K = 4096, 11.91 / 14.01 against 13.67 at
// 8192, 19.42 / 22.91 against 20.8 at 14336, 37.73 / 45.78 against 37.8 at 28672, where
// the crossing moves from about 30 tokens (K = 8192) to 26 (14336) and 18 (28672). The
// GEMM takes a launch where K (m - 16) reaches 128 Ki, so that the decode kernel keeps
// only cells where the GEMM was at most 2% faster. Where half the decode grid's slots
// stay idle (N = 2048: 128 sets for 264 CTAs) the GEMM won at every token count from K =
// 8192 on (8192 x 2048 9.50-10.35 against 9.3; 14336 x 2048 15.5-17.1 against 12.9).
// (The GEMM's times are those of two groups a CTA, which w4a16.cu takes on these weights.)
inline bool W4A16GemmBeatsDecode(int64_t m, int64_t k, int64_t sets, int64_t slots) {
  constexpr int64_t kMinHalfGridK = 8192;
  constexpr int64_t kCrossing = 128 * 1024;
  if (2 * sets <= slots) return k >= kMinHalfGridK;
  return k * (m - 16) >= kCrossing;
}

// Whether `grid` can run CTAs of more warps, all on one row set (W8A16's 16-warp CTAs,
// w8a16_decode.cuh kWideWarps), of which `wide_slots` fit at once: one set a CTA, no
// cluster.
inline bool TakesWideCtas(const DecodeGrid& grid, int64_t wide_slots) {
  return grid.cluster == 1 && grid.split == 8 && grid.ctas <= wide_slots;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_PLAN_H_
