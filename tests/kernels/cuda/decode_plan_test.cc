// MakeDecodeGrid (kernels/cuda/decode_plan.h): the warps and CTAs that share each row set
// of the decode kernels, on the H200's numbers (132 SMs; two CTAs an SM of the two-strip
// W4A16 tile, whose clusters of 2 and 4 fit 132 and 66 at once).
#include "kernels/cuda/decode_plan.h"

#include <gtest/gtest.h>

namespace qmm::cuda {
namespace {

constexpr int kSms = 132;
constexpr int64_t kSlots = 264;
constexpr int kClusterSlots[9] = {0, 0, 132, 0, 66};
constexpr int kNoClusters[9] = {};  // before sm_90
constexpr int kStripPair = 2048;    // bytes of a two-strip W4A16 chunk

// 14336 x 4096: 128 two-strip sets of 112 chunks. Eight warps a set leave 4 SMs idle and
// the rest with one CTA; clusters of two CTAs (each on 56 chunks, 14 KB a warp) fill them.
TEST(DecodePlanTest, NarrowLongWeightsShareSetsAcrossAClusterOfTwo) {
  const DecodeGrid grid = MakeDecodeGrid(128, 112, kStripPair, kSms, kSlots, kClusterSlots);
  EXPECT_EQ(grid.split, 8);
  EXPECT_EQ(grid.cluster, 2);
  EXPECT_EQ(grid.units, 128);
  EXPECT_EQ(grid.ctas, 256);
}

// 28672 x 2048: 64 sets; clusters of four fit (64 <= 66) and keep 14 KB a warp.
TEST(DecodePlanTest, FewerSetsTakeTheLargestClusterThatFits) {
  const DecodeGrid grid = MakeDecodeGrid(64, 224, kStripPair, kSms, kSlots, kClusterSlots);
  EXPECT_EQ(grid.cluster, 4);
  EXPECT_EQ(grid.ctas, 256);
  // 67 sets: clusters of four no longer fit at once, two do.
  EXPECT_EQ(MakeDecodeGrid(67, 224, kStripPair, kSms, kSlots, kClusterSlots).cluster, 2);
}

// No cluster where each warp would keep less than kMinClusterWarpBytes (4096 x 4096: 32
// chunks, 4 KB a warp in a cluster of two), where the sets already cover the SMs (8192 x
// 8192: 256 sets), where fewer than 8 warps share a set, or before sm_90.
TEST(DecodePlanTest, NoClusterWhereItCannotPay) {
  EXPECT_EQ(MakeDecodeGrid(128, 32, kStripPair, kSms, kSlots, kClusterSlots).cluster, 1);
  EXPECT_EQ(MakeDecodeGrid(128, 48, kStripPair, kSms, kSlots, kClusterSlots).cluster, 2);
  const DecodeGrid wide = MakeDecodeGrid(256, 64, kStripPair, kSms, kSlots, kClusterSlots);
  EXPECT_EQ(wide.cluster, 1);
  EXPECT_EQ(wide.ctas, 256);
  EXPECT_EQ(MakeDecodeGrid(128, 112, kStripPair, kSms, kSlots, kClusterSlots, 1, 2).cluster, 1);
  EXPECT_EQ(MakeDecodeGrid(128, 112, kStripPair, kSms, kSlots, kNoClusters).cluster, 1);
}

// W2A8's one-unit row groups (32 rows, 1 KB a 128-k chunk): clusters of two from 5 KB a
// warp, and from 4 KB with one token tile where the sets leave a quarter of the SMs idle.
// 8192 x 2048 (64 groups, 4 KB a warp) and 8192 x 3072 (96) take them only with one tile,
// 8192 x 4096 (128) never; 6912 x 2560 (80 groups, 3.4 KB) never; 10240 x 2048 and
// 10240 x 4096 (5 KB) always.
TEST(DecodePlanTest, W2A8ClustersFromLessWithOneTokenTileOnFewSets) {
  auto cluster = [](int64_t sets, int chunks, bool one_tile) {
    return MakeDecodeGrid(sets, chunks, 1024, kSms, kSlots, kClusterSlots, 1, 8, 0,
                          W2A8MinClusterWarpBytes(one_tile, sets, kSms))
        .cluster;
  };
  EXPECT_EQ(cluster(64, 64, true), 2);
  EXPECT_EQ(cluster(96, 64, true), 2);
  EXPECT_EQ(cluster(64, 64, false), 1);
  EXPECT_EQ(cluster(128, 64, true), 1);
  EXPECT_EQ(cluster(80, 54, true), 1);
  EXPECT_EQ(cluster(64, 80, false), 2);
  EXPECT_EQ(cluster(128, 80, true), 2);
}

// A forced cluster size holds anywhere; beyond the clusters that fit, the grid takes equal
// turns (282 sets on 66 clusters of four: 5 turns of 57 clusters).
TEST(DecodePlanTest, ForcedClustersTakeEqualTurns) {
  const DecodeGrid grid = MakeDecodeGrid(282, 8, kStripPair, kSms, kSlots, kClusterSlots, 1, 8, 4);
  EXPECT_EQ(grid.split, 8);
  EXPECT_EQ(grid.cluster, 4);
  EXPECT_EQ(grid.units, 282);
  EXPECT_EQ(grid.ctas, 57 * 4);
  EXPECT_EQ(MakeDecodeGrid(128, 112, kStripPair, kSms, kSlots, kClusterSlots, 1, 8, 1).cluster, 1);
}

// Without clusters the grid is as before them: several turns of equal units.
TEST(DecodePlanTest, ManySetsTakeEqualTurnsOfSingleCtas) {
  const DecodeGrid grid = MakeDecodeGrid(896, 64, kStripPair, kSms, kSlots, kClusterSlots);
  EXPECT_EQ(grid.cluster, 1);
  EXPECT_EQ(grid.split, 8);
  EXPECT_EQ(grid.units, 896);
  EXPECT_EQ(grid.ctas, 224);  // 4 turns of 224 CTAs, not 3 of 264 and one of 104
}

// StreamPays on W4A16's two-strip grids, as measured: the stream-K grid where the grid of
// whole sets leaves a tenth of the CTAs idle, or (one token tile) has one set per CTA;
// never where clusters share the sets (`cluster` forces them, as
// W4A16Options::decode_cluster).
bool StreamPaysFor(int64_t sets, int chunks, bool one_tile, int cluster = 0) {
  const DecodeGrid grid =
      MakeDecodeGrid(sets, chunks, kStripPair, kSms, kSlots, kClusterSlots, 1, 8, cluster);
  return StreamPays(grid, kSlots, sets, one_tile);
}

TEST(DecodePlanTest, StreamKWhereWholeSetsLeaveCtasIdle) {
  EXPECT_TRUE(StreamPaysFor(272, 64, true));  // 8192 x 8704: two turns of 136 CTAs
  EXPECT_TRUE(StreamPaysFor(272, 64, false));
  EXPECT_TRUE(StreamPaysFor(344, 32, false));  // 4096 x 11008: two turns of 172
  EXPECT_TRUE(StreamPaysFor(896, 64, false));  // 8192 x 28672: four turns of 224
  EXPECT_TRUE(StreamPaysFor(448, 32, false));  // 4096 x 14336: 224 CTAs of two sets
  EXPECT_TRUE(StreamPaysFor(464, 64, false));  // 8192 x 14848: 232 of two (0.88)
  EXPECT_FALSE(StreamPaysFor(496, 64, true));  // 8192 x 15872: 248 of two (0.94)
  EXPECT_FALSE(StreamPaysFor(512, 64, true));  // 8192 x 16384: 256 of two
  EXPECT_FALSE(StreamPaysFor(768, 64, true));  // 8192 x 24576: three turns of 256
  // One set per CTA: with one token tile only.
  EXPECT_TRUE(StreamPaysFor(256, 64, true));  // 8192 x 8192
  EXPECT_FALSE(StreamPaysFor(256, 64, false));
  EXPECT_TRUE(StreamPaysFor(192, 64, false));  // 8192 x 6144: 192 of 264 CTAs
  // Not where clusters share the sets (14336 x 4096; 8192 x 8704 with clusters forced).
  EXPECT_FALSE(StreamPaysFor(128, 112, true));
  EXPECT_FALSE(StreamPaysFor(272, 64, true, 2));
}

// W2A8StreamPays on one-unit row groups (128 k a chunk, 1 KB): only where the row groups
// outnumber the CTAs that fit and the grid of whole groups leaves a fifth idle, or an
// eighth with runs of at least 12288 k; one token tile only on such runs.
// `two_groups`: sets of two row groups (2 KB a chunk, one token tile).
bool W2A8StreamPaysFor(int64_t sets, int chunks, bool one_tile, bool two_groups = false) {
  const DecodeGrid grid =
      MakeDecodeGrid(sets, chunks, two_groups ? 2048 : 1024, kSms, kSlots, kClusterSlots);
  return W2A8StreamPays(grid, kSlots, sets, chunks, 128, one_tile, two_groups);
}

TEST(DecodePlanTest, W2A8StreamKOnlyWithManyGroupsOrLongRuns) {
  EXPECT_TRUE(W2A8StreamPaysFor(272, 64, true));   // 8192 x 8704: 16384 k a CTA
  EXPECT_TRUE(W2A8StreamPaysFor(272, 32, false));  // 4096 x 8704: a fifth idle
  EXPECT_FALSE(W2A8StreamPaysFor(272, 32, true));  // ... but 8192 k a CTA
  EXPECT_TRUE(W2A8StreamPaysFor(344, 32, false));  // 4096 x 11008 (0.65)
  EXPECT_FALSE(W2A8StreamPaysFor(344, 32, true));
  EXPECT_FALSE(W2A8StreamPaysFor(448, 32, false));  // 4096 x 14336 (0.85, 8192 k a CTA)
  EXPECT_TRUE(W2A8StreamPaysFor(896, 64, true));    // 8192 x 28672 (0.85, 32768 k)
  EXPECT_FALSE(W2A8StreamPaysFor(256, 64, true));   // 8192 x 8192: one group a CTA
  // Sets of two row groups: only where a fifth of the CTAs that fit would idle.
  EXPECT_FALSE(W2A8StreamPaysFor(448, 64, true, true));  // 8192 x 28672: two turns of 224
  EXPECT_TRUE(W2A8StreamPaysFor(384, 64, true, true));   // 8192 x 24576: two of 192 (0.73)
  EXPECT_TRUE(W2A8StreamPaysFor(344, 64, true, true));   // 8192 x 22016: two turns of 172
  EXPECT_FALSE(W2A8StreamPaysFor(224, 64, true, true));  // 8192 x 14336: every set at once
  // The k a CTA streams: turns x sets a unit x chunks x 128 (S = 4 on 4096 x 14336).
  EXPECT_EQ(DecodeRunK(MakeDecodeGrid(896, 64, 1024, kSms, kSlots, kClusterSlots), 64, 128),
            4 * 64 * 128);
  EXPECT_EQ(DecodeRunK(MakeDecodeGrid(448, 32, 1024, kSms, kSlots, kClusterSlots), 32, 128),
            2 * 32 * 128);
}

// W2A8TwoGroupsPay on the CTAs each grid of one token tile runs (264 CTAs fit): two groups a
// set where their grid keeps 5/8 of the one-group grid's CTAs, as the H200 measured.
TEST(DecodePlanTest, W2A8TwoGroupsOnlyWithEnoughCtas) {
  EXPECT_TRUE(W2A8TwoGroupsPay(136, 136));  // 4096 x 8704: one group a set, S = 4
  EXPECT_TRUE(W2A8TwoGroupsPay(264, 264));  // 8192 x 28672: both stream-K
  EXPECT_TRUE(W2A8TwoGroupsPay(264, 176));  // 8192 x 11264
  EXPECT_TRUE(W2A8TwoGroupsPay(264, 165));  // 5/8 exactly
  EXPECT_FALSE(W2A8TwoGroupsPay(264, 164));
  EXPECT_FALSE(W2A8TwoGroupsPay(264, 152));  // 8192 x 9728, 4-5% slower with two
  EXPECT_FALSE(W2A8TwoGroupsPay(256, 128));  // 8192 x 8192, 16-19% slower
  // The grids behind those counts: a stream-K grid runs every CTA that fits.
  EXPECT_TRUE(W2A8StreamPaysFor(352, 64, true));  // 8192 x 11264, one group a set
  const DecodeGrid two = MakeDecodeGrid(176, 64, 2048, kSms, kSlots, kClusterSlots);
  EXPECT_FALSE(W2A8StreamPays(two, kSlots, 176, 64, 128, true));
  EXPECT_EQ(two.ctas, 176);
  EXPECT_EQ(MakeDecodeGrid(272, 32, 1024, kSms, kSlots, kClusterSlots).ctas, 136);
  EXPECT_EQ(MakeDecodeGrid(136, 32, 2048, kSms, kSlots, kClusterSlots).ctas, 136);
}

// W4A16WidePays on the two-token-tile grids of two-strip sets (two 8-warp CTAs an SM fit)
// and 264 wide CTAs at once: only where that grid leaves SMs one CTA or none.
TEST(DecodePlanTest, W4A16WideCtasOnlyWhereTheSetsLeaveSmsStarved) {
  auto pays = [](int64_t sets, int chunks) {
    const DecodeGrid grid = MakeDecodeGrid(sets, chunks, kStripPair, kSms, kSlots, kClusterSlots);
    return W4A16WidePays(grid, kSms, 2 * sets, kSlots);
  };
  EXPECT_TRUE(pays(128, 32));    // 4096 x 4096: 128 CTAs, 256 strips
  EXPECT_TRUE(pays(64, 32));     // 4096 x 2048
  EXPECT_FALSE(pays(128, 112));  // 14336 x 4096: clusters of two
  EXPECT_FALSE(pays(256, 64));   // 8192 x 8192: 256 CTAs
  EXPECT_FALSE(pays(132, 32));   // 4096 x 4224: a CTA an SM
  // Where the strips outnumber the wide CTAs, even with few two-strip sets.
  const DecodeGrid few = MakeDecodeGrid(128, 32, kStripPair, kSms, kSlots, kClusterSlots);
  EXPECT_FALSE(W4A16WidePays(few, kSms, 256, 255));
}

// W4A16GemmBeatsDecode against session 52's H200 crossings, 264 decode CTAs at once.
TEST(DecodePlanTest, W4A16GemmTakesLongKAt17To32Tokens) {
  auto gemm = [](int64_t m, int64_t k, int64_t n) {
    return W4A16GemmBeatsDecode(m, k, n / 16, kSlots);
  };
  for (int64_t m : {17, 24, 32}) EXPECT_FALSE(gemm(m, 4096, 4096)) << m;  // 7.05-8.35 < 8.87
  EXPECT_FALSE(gemm(28, 8192, 4096));                                     // 13.41 against 13.69
  EXPECT_TRUE(gemm(32, 8192, 4096));                                      // 14.01 against 13.68
  EXPECT_FALSE(gemm(24, 14336, 4096));                                    // 20.56 against 20.77
  EXPECT_TRUE(gemm(28, 14336, 4096));                                     // 21.89 against 20.86
  EXPECT_FALSE(gemm(20, 28672, 4096));  // 38.23 against 37.60: within 2%
  EXPECT_TRUE(gemm(24, 28672, 4096));   // 40.45 against 37.74
  // Half the decode grid idle: the GEMM from K = 8192 on.
  EXPECT_TRUE(gemm(17, 8192, 2048));   // 9.50 against 9.29
  EXPECT_TRUE(gemm(17, 14336, 2048));  // 15.53 against 12.89
  EXPECT_FALSE(gemm(17, 4096, 2048));  // not measured: short K keeps the decode kernel
}

// W8A16StreamPays on the H200's 264 16-warp CTAs: beyond them up to twice as many sets at
// two token tiles; within them only where a set's K is longer than a CTA takes (28672 x
// 8192: 256 sets).
TEST(DecodePlanTest, W8A16StreamKWhereTheSetsOrTheirKOutgrowTheCtas) {
  const DecodeGrid grid = MakeDecodeGrid(256, 896, 1024, kSms, kSlots, kClusterSlots);
  ASSERT_EQ(grid.cluster, 1);
  EXPECT_TRUE(W8A16StreamPays(grid, kSlots, 256, true, true));
  EXPECT_TRUE(W8A16StreamPays(grid, kSlots, 256, false, true));
  EXPECT_FALSE(W8A16StreamPays(grid, kSlots, 256, true, false));   // 8192 x 8192
  EXPECT_TRUE(W8A16StreamPays(grid, kSlots, 448, false, false));   // 4096 x 14336
  EXPECT_FALSE(W8A16StreamPays(grid, kSlots, 896, false, false));  // 8192 x 28672, M = 16
  EXPECT_TRUE(W8A16StreamPays(grid, kSlots, 896, true, false));    // the same, M = 1
  // Clusters share narrow sets of long K instead (14336 x 4096: 128 sets).
  const DecodeGrid pairs = MakeDecodeGrid(128, 448, 1024, kSms, kSlots, kClusterSlots);
  ASSERT_EQ(pairs.cluster, 2);
  EXPECT_FALSE(W8A16StreamPays(pairs, kSlots, 128, true, true));
}

// W2A8's clusters take 5 KB a warp where the others take 6: 11008 x 4096 (128 row groups
// of 86 1 KB chunks) in clusters of two, which the default threshold leaves alone.
TEST(DecodePlanTest, W2A8ClustersFromFiveKilobytesAWarp) {
  EXPECT_EQ(
      MakeDecodeGrid(128, 86, 1024, kSms, kSlots, kClusterSlots, 1, 8, 0, kW2A8MinClusterWarpBytes)
          .cluster,
      2);
  EXPECT_EQ(MakeDecodeGrid(128, 86, 1024, kSms, kSlots, kClusterSlots).cluster, 1);
  // 79 chunks (9.9 KB a warp at 4.9 KB a cluster's warp): none.
  EXPECT_EQ(
      MakeDecodeGrid(128, 79, 1024, kSms, kSlots, kClusterSlots, 1, 8, 0, kW2A8MinClusterWarpBytes)
          .cluster,
      1);
}

// W8A16GemmBeatsDecode on the H200 (264 16-warp CTAs at once on 132 SMs), sessions 55 and
// 58's shapes: the GEMM where the sets outnumber those CTAs and its 128-row groups number
// 99-132, or with K >= 8192 up to 176 (CTAs of two).
TEST(DecodePlanTest, W8A16GemmTakesWidthsWhoseGroupsFillTheSms) {
  auto gemm = [](int64_t n, int64_t k) { return W8A16GemmBeatsDecode(n, k, kSlots, kSms); };
  EXPECT_TRUE(gemm(14336, 4096));    // 112 groups: 20.59 -> 17.56 us at M = 16
  EXPECT_TRUE(gemm(13824, 5120));    // 108: 23.41 -> 21.31
  EXPECT_TRUE(gemm(16384, 6144));    // 128: 32.72 -> 26.95
  EXPECT_TRUE(gemm(16896, 4096));    // 132, the last one a CTA
  EXPECT_TRUE(gemm(12545, 4096));    // 99 groups
  EXPECT_FALSE(gemm(12544, 4096));   // 98: 73.5% of the SMs
  EXPECT_FALSE(gemm(11008, 14336));  // 86: 48.71 -> 52.07
  EXPECT_FALSE(gemm(8192, 4096));    // 256 sets fit at once: 18.91 -> 19.53
  // Two groups a CTA with K >= 8192 only: 4096 x 20480 29.44 -> 30.98 at M = 9.
  EXPECT_FALSE(gemm(17024, 8191));  // 133 groups
  EXPECT_FALSE(gemm(20480, 4096));
  EXPECT_TRUE(gemm(17024, 8192));   // 133
  EXPECT_TRUE(gemm(20480, 8192));   // 160: 55.35 -> 51.13
  EXPECT_TRUE(gemm(22016, 14336));  // 172: 93.05 -> 83.96
  EXPECT_TRUE(gemm(22528, 8192));   // 176, 4/3 of the SMs
  EXPECT_FALSE(gemm(22656, 8192));  // 177
  EXPECT_FALSE(gemm(24576, 8192));  // 192: 62.24 -> 63.69
  // Sets that fit the CTAs keep the decode kernel whatever the groups (a device of more SMs).
  EXPECT_FALSE(W8A16GemmBeatsDecode(14336, 4096, 448, kSms));
}

}  // namespace
}  // namespace qmm::cuda
