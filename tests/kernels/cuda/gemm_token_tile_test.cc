// TokenTile (kernels/cuda/gemm_token_tile.h) on the H200's 132 SMs. Beyond 128 tokens each
// case's expected tile is the faster of the two measured with both forced on the H200 in
// session 44 (qmm-kernel-bench --wgmma_tokens=128/256, W4A16 and W2A8 alike; us in the
// comments, W4A16's, docs/performance-log.md), so a change to the rule that moves a choice
// fails here. Valid, the knobs' check every scheme's launcher makes, last.
#include "kernels/cuda/gemm_token_tile.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace qmm::cuda::wgmma_gemm {
namespace {

constexpr int kSms = 132;

// W4A16's and W2A8's tiles (256-token ones, no 64-token stage permute) unless said; K
// enters only W8A16's rule (ShortGemmsKeep64 below).
int Tile(int64_t m, int64_t n, bool wide_tiles = true, Options options = {}, int64_t k = 8192,
         int stage_permute_tokens = 32) {
  return TokenTile(m, n, k, options, kSms, wide_tiles, stage_permute_tokens);
}

TEST(TokenTileTest, UpTo128TokensByM) {
  EXPECT_EQ(Tile(17, 8192), 32);
  EXPECT_EQ(Tile(32, 8192), 32);
  EXPECT_EQ(Tile(33, 8192), 64);
  EXPECT_EQ(Tile(64, 28672), 64);
  EXPECT_EQ(Tile(128, 4096), 64);  // 128-token tiles only from N = 8192 at 65-128 tokens
  EXPECT_EQ(Tile(128, 8192), 128);
  EXPECT_EQ(Tile(129, 4096), 128);
}

struct Measured {
  int64_t n, m;
  int tile;
};

// K x N of the benchmark (K does not enter), M, the faster tile; 128 / 256-token us.
constexpr Measured kMeasured[] = {
    {28672, 192, 256},  // 8192 x 28672: 221.01 / 201.99
    {28672, 256, 256},  // 237.54 / 219.64
    {28672, 384, 128},  // 372.81 / 403.58
    {28672, 512, 128},  // 430.50 / 436.05 (W2A8 237.45 / 267.71)
    {14336, 192, 256},  // 4096 x 14336: 63.98 / 60.34
    {14336, 256, 256},  // 66.55 / 64.28
    {14336, 384, 128},  // 100.33 / 118.85
    {14336, 512, 256},  // 140.75 / 124.00
    {8192, 192, 128},   // 8192 x 8192: 57.47 / 60.05
    {8192, 256, 128},   // 61.92 / 65.65
    {8192, 384, 128},   // 103.58 / 107.84
    {8192, 512, 256},   // 121.59 / 116.35
    {4096, 192, 128},   // 4096 x 4096: 24.55 / 36.30; 14336 x 4096 51.18 / 82.95
    {4096, 256, 128},   // 23.94 / 36.23; 55.68 / 86.05
};

TEST(TokenTileTest, BeyondTheMeasuredFaster) {
  for (const Measured& c : kMeasured) {
    EXPECT_EQ(Tile(c.m, c.n), c.tile) << "N = " << c.n << ", M = " << c.m;
  }
}

// 14336 x 4096 at M = 384 / 512 ran 2.9% / 0.6% faster on 256-token tiles (97.03 / 94.31
// and 103.26 / 102.65 us; 4096 x 4096 the other way, 33.89 / 40.39 and 37.25 / 41.96):
// the rule keeps 128 at N = 4096 beyond 256 tokens.
TEST(TokenTileTest, NarrowWeightsKeep128) {
  EXPECT_EQ(Tile(384, 4096), 128);
  EXPECT_EQ(Tile(512, 4096), 128);
}

TEST(TokenTileTest, KnobsAndFormats) {
  Options forced;
  forced.tokens = 256;
  EXPECT_EQ(Tile(129, 4096, true, forced), 256);
  EXPECT_EQ(Tile(128, 28672, true, forced), 128);  // only beyond 128 tokens
  forced.tokens = 128;
  EXPECT_EQ(Tile(256, 28672, true, forced), 128);
  forced.tokens = 64;  // 64-token tiles up to 64 tokens, 32-token ones' range included
  EXPECT_EQ(Tile(17, 8192, true, forced), 64);
  EXPECT_EQ(Tile(32, 8192, false, forced), 64);
  EXPECT_EQ(Tile(64, 8192, true, forced), 64);
  EXPECT_EQ(Tile(65, 8192, true, forced), 128);
  Options two_groups;
  two_groups.groups = 2;
  EXPECT_EQ(Tile(256, 28672, true, two_groups), 64);
  // W8A16 has no 256-token tiles.
  EXPECT_EQ(Tile(256, 28672, false), 128);
}

TEST(OptionsTest, ValidKnobsOnly) {
  EXPECT_TRUE(Valid(Options{}));
  for (int groups : {0, 1, 2}) {
    for (int splits = 0; splits <= 8; ++splits) {
      for (int tokens : {0, 64, 128, 256}) {
        EXPECT_TRUE(Valid(Options{groups, splits, tokens}))
            << groups << " " << splits << " " << tokens;
      }
    }
  }
  EXPECT_FALSE(Valid(Options{-1, 0, 0}));
  EXPECT_FALSE(Valid(Options{3, 0, 0}));
  EXPECT_FALSE(Valid(Options{0, -1, 0}));
  EXPECT_FALSE(Valid(Options{0, 9, 0}));
  EXPECT_FALSE(Valid(Options{0, 16, 0}));
  EXPECT_FALSE(Valid(Options{0, 0, 32}));
  EXPECT_FALSE(Valid(Options{0, 0, 512}));
}

// W8A16 (no 256-token tiles, 64-token tiles permuted in their stages): 64-token tiles at
// 129-256 tokens where K <= 4096 and 128-token tiles would not fill the 132 SMs unsplit
// (4096 x 4096 at M = 256: 18.46 against 20.28 us on the H200, session 50).
TEST(TokenTileTest, ShortGemmsKeep64) {
  auto w8a16 = [](int64_t m, int64_t n, int64_t k, Options options = {}) {
    return Tile(m, n, false, options, k, 64);
  };
  EXPECT_EQ(w8a16(256, 4096, 4096), 64);
  EXPECT_EQ(w8a16(129, 4096, 4096), 64);
  EXPECT_EQ(w8a16(257, 4096, 4096), 128);   // beyond 256 tokens
  EXPECT_EQ(w8a16(256, 4096, 14336), 128);  // 14336 x 4096: 52.88 against 57.05 us
  EXPECT_EQ(w8a16(256, 8192, 8192), 128);   // 8192 x 8192: 57.38 against 77.05
  EXPECT_EQ(w8a16(256, 14336, 4096), 128);  // 224 CTAs of 128 tokens fill the SMs
  EXPECT_EQ(w8a16(128, 8192, 4096), 128);   // up to 128 tokens by the rule above
  Options forced;
  forced.tokens = 128;
  EXPECT_EQ(w8a16(256, 4096, 4096, forced), 128);
  // Formats without the 64-token stage permute keep 128.
  EXPECT_EQ(Tile(256, 4096, false, {}, 4096, 32), 128);
}

}  // namespace
}  // namespace qmm::cuda::wgmma_gemm
