// TileSplits and TileBeatsDecode (kernels/cuda/tile_splits.h) on the H200's numbers: 132
// SMs, two CTAs of W8A16's tile kernel an SM, clusters of 2 to 8 CTAs 132, 79, 62, 47, 39, 32
// and 30 at once (cudaOccupancyMaxActiveClusters, printed on the H200 in session 24). Each
// shape's expected split is the fastest of the forced splits measured on the H200 in
// sessions 23 and 24 (qmm-kernel-bench --w8a16_splits=1/2/3/4/8, us in the comments,
// docs/performance-log.md), so a change to the rule that moves a choice fails here.
#include "kernels/cuda/tile_splits.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace qmm::cuda {
namespace {

constexpr int kSms = 132;
const KernelFit kH200 = {2, {0, 0, 132, 79, 62, 47, 39, 32, 30}};

// W8A16's tiles: 8 row tiles of 16 rows a CTA up to 32 tokens, chunks of 32 k; load groups
// of 4 chunks at one token tile, 2 at two and four (w8a16.cu, LaunchFor).
int Splits(int64_t k, int64_t n, int tokens, const KernelFit& fit = kH200) {
  const int64_t row_blocks = ((n + 15) / 16 + 7) / 8;
  const int group_chunks = tokens == 8 ? 4 : 2;
  return TileSplits(row_blocks, kSms, fit, static_cast<int>(k / 32), group_chunks, tokens);
}

struct Measured {
  int64_t k, n;
  int splits;
};

// M = 1, splits 1 / 2 / 4 / 8 (us).
constexpr Measured kOneToken[] = {
    {8192, 28672, 2},   // 65.5 / 62.2 / 67.0 / 81.3: 448 CTAs in 1.7 waves
    {8192, 22016, 4},   // 58.1 / 60.2 / 51.4 / 63.7: 688 CTAs in 2.8 waves
    {28672, 8192, 3},   // 117.9 / 70.3 / 92.3 / 75.8, 3: 60.9 (4 does not fit at once)
    {14336, 14336, 2},  // 60.9 / 52.6 / 54.7 / 60.8
    {4096, 28672, 1},   // 32.4 / 35.1 / 42.7 / 57.9: CTAs of 64 chunks lose
    {5120, 27648, 1},   // 39.3 / 41.3 / 47.9 / 61.1
    {8192, 14336, 2},   // 36.5 / 32.2 / 34.8 / 43.3
    {22016, 8192, 3},   // 91.2 / 54.9 / 71.9 / 61.4, 3: 47.9
    {14336, 8192, 3},   // 60.4 / 37.0 / 49.0 / 42.5, 3: 32.9
    {8192, 57344, 1},   // 119.8 / 126.0 / 128.9 / 156.1: already 1.7 waves
    {16384, 16384, 2},  // 71.5 / 69.6 / 86.3 / 80.3
    {4096, 22016, 1},   // 25.0 / 33.3 / 32.9 / 45.3
    {5120, 13824, 2},   // 23.7 / 20.9 / 24.6 / 32.9
    {28672, 2048, 8},   // - / - / 36.4 / 24.0: 16 row blocks, one wave at 8
    {28672, 1024, 8},   // - / - / 36.1 / 19.4
};

TEST(TileSplitsTest, OneTokenTileTakesTheFastestMeasuredSplit) {
  for (const Measured& m : kOneToken) {
    EXPECT_EQ(Splits(m.k, m.n, 8), m.splits) << m.k << "x" << m.n;
  }
}

// The choices do not hang on the exact fit of clusters of 4 (62 on the H200): they hold for
// any from 58 to 63.
TEST(TileSplitsTest, TheChoicesHoldAcrossNearbyClusterFits) {
  for (const int fours : {58, 60, 63}) {
    const KernelFit fit = {2, {0, 0, 132, 79, fours, 47, 39, 32, 30}};
    for (const Measured& m : kOneToken) {
      EXPECT_EQ(Splits(m.k, m.n, 8, fit), m.splits) << m.k << "x" << m.n << ", " << fours;
    }
  }
}

// M = 16 never gained from a second wave (splits 1 / 2 / 4, us): 8192x28672 66.3 / 77.5 /
// 83.4, 8192x22016 60.3 / 75.2 / 63.3; 14336x14336 67.2 / 62.8 / 67.0.
TEST(TileSplitsTest, TwoTokenTilesStayWithinOneWave) {
  EXPECT_EQ(Splits(8192, 28672, 16), 1);
  EXPECT_EQ(Splits(8192, 22016, 16), 1);
  EXPECT_EQ(Splits(14336, 14336, 16), 2);
  EXPECT_EQ(Splits(4096, 28672, 32), 1);
}

// 28672 x 8192 at M = 16: 64 row blocks split 4 ways are 64 clusters of 4, two more than fit
// (111.0 us in session 24, against 87.0 split 2 ways and 78.9 split 3 ways: 64 of the 79
// clusters of 3 that fit). Were all 66 to fit, 4 would be the one-wave split. Without
// clusters of 3 (none of the measured cluster counts), 2.
TEST(TileSplitsTest, ClustersBeyondTheGpcsAreNotOneWave) {
  EXPECT_EQ(Splits(28672, 8192, 16), 3);
  EXPECT_EQ(Splits(14336, 8192, 16), 3);  // 46.0 / 42.5 / 59.5 us at 2 / 3 / 4 splits
  EXPECT_EQ(Splits(28672, 8192, 16, KernelFit{2, {0, 0, 132, 0, 62, 0, 0, 0, 30}}), 2);
  EXPECT_EQ(Splits(28672, 8192, 16, KernelFit{2, {0, 0, 132, 79, 66, 47, 39, 32, 30}}), 4);
}

// A grid of one or two row blocks takes the largest split in one wave, whatever the share
// of the slots it fills.
TEST(TileSplitsTest, TinyGridsTakeEightSplits) {
  EXPECT_EQ(Splits(28672, 128, 8), 8);
  EXPECT_EQ(Splits(28672, 256, 16), 8);
  // Each CTA keeps two load groups: 16 chunks split 8 ways would not.
  EXPECT_EQ(Splits(512, 128, 8), 2);
}

TEST(TileSplitsTest, SplitSlotsCountWholeClusters) {
  EXPECT_EQ(SplitSlots(1, kSms, kH200), 264);
  EXPECT_EQ(SplitSlots(2, kSms, kH200), 264);
  EXPECT_EQ(SplitSlots(4, kSms, kH200), 248);
  EXPECT_EQ(SplitSlots(8, kSms, kH200), 240);
  EXPECT_EQ(SplitSlots(4, kSms, KernelFit{2, {}}), 0);  // before sm_90
  EXPECT_DOUBLE_EQ(WaveEfficiency(448, 264), 448.0 / 528);
  EXPECT_DOUBLE_EQ(WaveEfficiency(264, 264), 1.0);
}

// Beyond 32 tokens whole waves: 100 row blocks of 64 tokens fill 38% of one wave unsplit,
// 76% split 2 ways, 81% at 4 (too little more), 83% at 8 (7% more than 2 ways).
TEST(TileSplitsTest, ComputeBoundTilesWantWholeWaves) {
  EXPECT_EQ(TileSplits(100, kSms, kH200, 256, 1, 64), 8);
  EXPECT_EQ(TileSplits(132, kSms, kH200, 256, 1, 64), 2);
}

// TileBeatsDecode on the decode kernel's grids of two row tiles a warp (pairs of 16-row
// tiles, 1 KB chunks), for either fit of that kernel the H200 may give (two or three CTAs an
// SM; clusters of 4 fit fewer than 64: 8192 x 2048's 64 pairs took clusters of 2, which
// forcing 2 and 4 on the H200 showed), with its 12-warp CTAs (two an SM) where the grid
// takes them. M = 1 on the H200 in session 24, decode (8-warp CTAs) against tile kernel
// (us, qmm-kernel-bench with and without --w8a16_tile); where the 12-warp CTAs run, M = 1
// / 16 in session 25.
struct Choice {
  int64_t k, n;
  bool tile;
};
constexpr Choice kTileOrDecode[] = {
    {8192, 2048, true},    // 11.24 against 9.19: 64 pairs, clusters of 2
    {8192, 3072, true},    // 11.78 against 10.93
    {8192, 5120, false},   // 15.84 / 18.36 against 15.84 / 20.19: 160 pairs, 12 warps
    {8192, 6144, false},   // 16.53 / 18.75 against 16.79 / 20.93
    {8192, 7168, false},   // 17.67 / 19.55 against 17.61 / 21.47
    {14336, 2048, true},   // 17.94 against 13.65
    {14336, 3072, true},   // 19.06 against 15.22
    {8192, 4096, false},   // 12.84 against 15.02: 128 pairs in clusters of 2
    {8192, 8192, false},   // 21.88 against 22.84
    {8192, 10240, false},  // 24.17 against 27.63
    {8192, 12288, false},  // 26.49 against 31.24
    {14336, 4096, false},  // 20.45 against 23.90
    {4096, 3072, false},   // 6.75 against 7.77: 32-chunk CTAs
    {4096, 6144, false},   // 10.44 against 10.62
    {4096, 8192, false},   // 11.92 against 13.11
};

TEST(TileBeatsDecodeTest, TakesTheFasterKernelMeasured) {
  for (const int64_t slots : {2 * kSms, 3 * kSms}) {
    for (const Choice& c : kTileOrDecode) {
      const int chunks = static_cast<int>(c.k / 32);
      const DecodeGrid grid =
          MakeDecodeGrid((c.n / 16 + 1) / 2, chunks, 1024, kSms, slots, kH200.clusters);
      const bool wide = TakesWideCtas(grid, 2 * kSms);
      EXPECT_EQ(TileBeatsDecode(grid, chunks, kSms, wide), c.tile)
          << c.k << "x" << c.n << ", " << slots;
    }
  }
}

}  // namespace
}  // namespace qmm::cuda
