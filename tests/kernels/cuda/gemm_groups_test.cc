// TakesTwoGroups (kernels/cuda/gemm_groups.h) on the H200's numbers, as the wgmma GEMM's
// plan (wgmma_gemm_launch.cuh) sees them: 132 SMs, the clusters that fit
// (h200_gemm_fits.h) and each format's one-group cost factor and CTA fill
// (OneGroupChunkCost and GroupFillChunks in wgmma_a16_format.cuh, w8a16_wgmma.cuh,
// w4a16_wgmma.cuh and w2a8_wgmma.cuh, repeated here). Each case's groups and split are
// the plan's as printed on the H200 in session 53 or measured against the plan it
// replaced in session 54 (us in the comments, docs/performance-log.md), so that a change
// which moves a choice fails here.
#include "kernels/cuda/gemm_groups.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>

#include "tests/kernels/cuda/h200_gemm_fits.h"

namespace qmm::cuda::wgmma_gemm {
namespace {

constexpr int kSms = kH200Sms;
constexpr int kChunkK = 128;

enum class Format { kW8A16, kW4A16, kW2A8 };

double OneGroupChunkCost(Format format, int nt, int splits, bool paired) {
  switch (format) {
    case Format::kW8A16:
      return nt == 64 && splits <= 2 ? 0.56 : 0.65;
    case Format::kW4A16:
      return nt == 64 && splits <= 2 ? 0.52 : 0.65;
    case Format::kW2A8:
      if (nt >= 64) return paired ? 0.55 : 0.5;
      return paired ? 0.5 : 0.65;
  }
  return 0;
}

GroupFill GroupFillChunks(Format format, int nt) {
  if (nt > 64) return {};
  switch (format) {
    case Format::kW8A16:
      return {5, 4};
    case Format::kW4A16:
      return {6, 6};
    case Format::kW2A8:
      return {10, 6};
  }
  return {};
}

struct Choice {
  int groups;
  int splits;
};

bool operator==(const Choice& a, const Choice& b) {
  return a.groups == b.groups && a.splits == b.splits;
}

std::ostream& operator<<(std::ostream& os, const Choice& c) {
  return os << c.groups << " group(s) split " << c.splits << " ways";
}

// The plan of Plan<F, nt> for m x (K x N): two CTAs an SM fit for one-group tiles of 32
// tokens but W8A16's and for W2A8's of 64 (Tile::kCtasPerSm), one elsewhere.
Choice PlanOf(Format format, int nt, int64_t m, int64_t k, int64_t n) {
  const bool two_an_sm = nt == 32 ? format != Format::kW8A16 : format == Format::kW2A8;
  const KernelFit& one_fit = two_an_sm ? kTwoCtasAnSm : kOneCtaAnSm;
  const int chunks = static_cast<int>(k / kChunkK);
  const int64_t token_tiles = (m + nt - 1) / nt;
  // Any split count (A16Format::kAnySplits) for the 16-bit formats' one tile of up to 64.
  const bool any_splits = format != Format::kW2A8 && token_tiles == 1 && nt <= 64;
  const GroupPlans plans = MakeGroupPlans(token_tiles, (n + 127) / 128, chunks, kSms, one_fit,
                                          kOneCtaAnSm, GroupFillChunks(format, nt), any_splits);
  const double cost = OneGroupChunkCost(format, nt, plans.one.splits, plans.paired);
  return TakesTwoGroups(nt, m, chunks, kSms, plans, cost) ? Choice{2, plans.two.splits}
                                                          : Choice{1, plans.one.splits};
}

// Both plans run as many CTAs in one turn at 33-64 tokens on N = 4096, K = 8192: two
// groups (session 53, split 4 ways against one group 2: W8A16 20.08 -> 17.96 us at 64
// tokens, W4A16 19.77 -> 18.06; since session 74 split 6 ways against 3, 96 CTAs, on an
// H100 W4A16 18.39 -> 16.56 and W8A16 19.09 -> 18.73 against 4 ways). At K = 4096 one
// group stays (0.5-3% faster), split 3 ways since session 74 (H100, 64 tokens: W4A16
// 11.64 -> 10.27 us, W8A16 11.46 -> 10.49 against 2).
TEST(GemmGroupsTest, EvenPlansOfLongKTakeTwoGroups) {
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 8192, 4096), (Choice{2, 6}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, 8192, 4096), (Choice{2, 6}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 8192, 6144), (Choice{2, 4}));   // 21.07 -> 19.73
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, 14336, 6144), (Choice{2, 4}));  // 30.72 -> 29.19
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, 4096, 4096), (Choice{1, 3}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 4096, 4096), (Choice{1, 3}));
}

// The 16-bit formats split K any number of ways for one tile of up to 64 tokens: on N =
// 4096 at long K two groups split 6 ways, 96 CTAs in 16 clusters of 6 (17 fit), where 4
// ways ran 64 CTAs and 8 ways 128, more than the 15 clusters of 8 that fit (H100, session
// 74, 32 / 64 tokens, us: W4A16 14336 x 4096 21.43 / 27.61 -> 17.73 / 23.22, 28672 x 4096
// 37.99 / 49.40 -> 29.12 / 37.65; W8A16 14336 x 4096 29.11 / 31.20 -> 24.49 / 28.06).
// (W4A16 at 17-32 tokens on such weights takes two groups whatever the costs, w4a16.cu's
// LaunchDecodeForM.) W2A8 keeps powers of two (4-9% slower at 64 tokens with any count),
// and so do tiles beyond one (mixed at 128-256 tokens).
TEST(GemmGroupsTest, AnySplitCountForOneTokenTile) {
  for (int64_t k : {11008, 14336, 28672}) {
    EXPECT_EQ(PlanOf(Format::kW8A16, 32, 32, k, 4096), (Choice{2, 6})) << k;
    EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, k, 4096), (Choice{2, 6})) << k;
    EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, k, 4096), (Choice{2, 6})) << k;
    const GroupPlans w4a16_32 =
        MakeGroupPlans(1, 32, static_cast<int>(k / kChunkK), kSms, kTwoCtasAnSm, kOneCtaAnSm,
                       GroupFillChunks(Format::kW4A16, 32), true);
    EXPECT_EQ(w4a16_32.two.splits, 6) << k;
  }
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 28672, 4096), (Choice{2, 4}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 192, 4096, 2048), (Choice{2, 4}));
}

// 8192 x 8192 at 64 tokens: two groups would run 64 CTAs where one runs 128 (30-45%
// slower, session 52).
TEST(GemmGroupsTest, FewerTwoGroupCtasKeepOneGroup) {
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 8192, 8192), (Choice{1, 2}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, 8192, 8192), (Choice{1, 2}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 8192, 8192), (Choice{1, 2}));
}

// W2A8's plans split K alike four ways on N = 4096 at K >= 8192 (session 52: 14336 x
// 4096 at 64 tokens 23.6 -> 22.4 us); at K = 4096 one group.
TEST(GemmGroupsTest, AlikeSplitsTakeTwoGroups) {
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 8192, 4096), (Choice{2, 4}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 14336, 4096), (Choice{2, 4}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 4096, 4096), (Choice{1, 4}));
}

// 64-token tiles beyond 128 tokens (TokenTile's short GEMMs): two groups where both
// plans run as many CTAs (W4A16 4096 x 4096 at 256 19.40 -> 18.47 us against one group),
// one where two groups would run half the CTAs (4096 x 2048 at 256: 17.11 on two, 12.32 on
// one).
TEST(GemmGroupsTest, ShortGemmsBeyond128Tokens) {
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 256, 4096, 4096), (Choice{2, 2}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 192, 4096, 4096), (Choice{2, 2}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 192, 4096, 2048), (Choice{2, 4}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 256, 4096, 2048), (Choice{1, 2}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 256, 4096, 2048), (Choice{1, 2}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 256, 4096, 4096), (Choice{2, 2}));
}

// The per-chunk costs decide elsewhere: wide short weights (4096 x 14336: W8A16 two
// groups split two ways, W4A16 one unsplit) and 32-token tiles (W2A8's one-group CTAs of
// 8192 x 28672 paired two an SM: two groups; 8192 x 8192: one group split two ways).
TEST(GemmGroupsTest, CostsDecideTheRest) {
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 4096, 14336), (Choice{2, 2}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 64, 4096, 14336), (Choice{1, 1}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 32, 32, 8192, 28672), (Choice{2, 1}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 32, 24, 8192, 8192), (Choice{1, 2}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 32, 32, 8192, 28672), (Choice{2, 1}));
}

// The formats' fills (session 54, against fills of 2): fewer K splits where the row
// groups fill the SMs, W2A8 4096 x 22016 at 32 tokens 24.8 -> 17.1 us unsplit, W4A16
// 29.5 -> 23.1, W4A16 4096 x 57344 at 48 80.8 -> 64.2, W8A16 2048 x 22016 at 48 25.0 ->
// 18.2; one group where it runs as many CTAs unsplit, W4A16 2048 x 14336 at 32 9.51 ->
// 8.79, or split four ways, W8A16 5120 x 3072 at 64 11.16 -> 9.67; W2A8 keeps two groups
// split eight ways on 28672 x 3072 (22.4 us; 32.5 on one group split four ways).
TEST(GemmGroupsTest, FillsOfEachFormat) {
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 48, 2048, 22016), (Choice{2, 1}));
  EXPECT_EQ(PlanOf(Format::kW8A16, 64, 64, 5120, 3072), (Choice{1, 4}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 32, 32, 4096, 22016), (Choice{2, 1}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 32, 32, 4096, 22016), (Choice{2, 1}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 64, 48, 4096, 57344), (Choice{2, 1}));
  EXPECT_EQ(PlanOf(Format::kW4A16, 32, 32, 2048, 14336), (Choice{1, 1}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 32, 32, 28672, 3072), (Choice{2, 8}));
  EXPECT_EQ(PlanOf(Format::kW2A8, 64, 64, 14336, 11008), (Choice{2, 2}));  // 37.90 -> 33.06
}

}  // namespace
}  // namespace qmm::cuda::wgmma_gemm
