// ChooseSplits (kernels/cuda/cluster_fit.h) on the H200's numbers, as the wgmma GEMM's plan
// (wgmma_gemm_launch.cuh) sees them at 64-token tiles (h200_gemm_fits.h).
// The plan's one-group cost factors (OneGroupChunkCost in wgmma_a16_format.cuh and
// w2a8_wgmma.cuh) were measured against exactly these costs, so a change that moves them
// moves the plan's choices: re-measure the factors with it.
#include "kernels/cuda/cluster_fit.h"

#include <gtest/gtest.h>

#include "kernels/cuda/gemm_groups.h"
#include "tests/kernels/cuda/h200_gemm_fits.h"

namespace qmm::cuda {
namespace {

constexpr int kSms = kH200Sms;
using wgmma_gemm::kFillChunks;  // the wgmma plan's

SplitChoice Gemm(int64_t ctas, int chunks, const KernelFit& fit) {
  return ChooseSplits(ctas, chunks, kSms, fit, false, kFillChunks);
}

// 4096 x 14336 (112 row groups, 32 chunks): one group a CTA unsplit costs 34 chunk-times,
// two groups split two ways 18 x 1.03. One group measured faster for W4A16 and W8A16 (a
// factor below 34 / 18.54 = 0.545 takes it), two for W2A8 (its 0.65 keeps them).
TEST(ClusterFitTest, WideShortWeights) {
  const SplitChoice one = Gemm(112, 32, kOneCtaAnSm);
  const SplitChoice two = Gemm(56, 32, kOneCtaAnSm);
  EXPECT_EQ(one.splits, 1);
  EXPECT_DOUBLE_EQ(one.cost, 34);
  EXPECT_EQ(two.splits, 2);
  EXPECT_DOUBLE_EQ(two.cost, 18 * 1.03);
}

// 14336 x 4096 (32 row groups, 112 chunks): one group takes clusters of 8 (256 CTAs, 120
// at once: three turns), two groups clusters of 4 (64 CTAs). Two groups measured faster
// for the 16-bit formats, hence their factor of 0.52 only for splits of at most two.
TEST(ClusterFitTest, NarrowLongWeightsSplitDeep) {
  const SplitChoice one = Gemm(32, 112, kOneCtaAnSm);
  const SplitChoice two = Gemm(16, 112, kOneCtaAnSm);
  EXPECT_EQ(one.splits, 8);
  EXPECT_NEAR(one.cost, 3 * (14 + 2) * 1.21, 1e-9);
  EXPECT_EQ(two.splits, 4);
  EXPECT_NEAR(two.cost, (28 + 2) * 1.09, 1e-9);
}

// 4096 x 4096 (32 row groups, 32 chunks): 128 CTAs in clusters of 4 do not fit at once
// (30 x 4 = 120), so one group splits two ways and two groups four.
TEST(ClusterFitTest, ClustersBeyondTheGpcsCountTwoTurns) {
  const SplitChoice one = Gemm(32, 32, kOneCtaAnSm);
  const SplitChoice two = Gemm(16, 32, kOneCtaAnSm);
  EXPECT_EQ(one.splits, 2);
  EXPECT_DOUBLE_EQ(one.cost, 18 * 1.03);
  EXPECT_EQ(two.splits, 4);
  EXPECT_NEAR(two.cost, 10 * 1.09, 1e-9);
}

// 8192 x 28672 (224 row groups, 64 chunks): 224 one-group CTAs count two an SM (132 chunk-
// times against 66 for 112 two-group CTAs), whether they run one after the other (one CTA
// an SM: two turns) or two at once (W2A8: the plan's `paired`, factor 0.45).
TEST(ClusterFitTest, TwoCtasAnSmCountDouble) {
  EXPECT_DOUBLE_EQ(Gemm(224, 64, kOneCtaAnSm).cost, 132);
  EXPECT_DOUBLE_EQ(Gemm(224, 64, kTwoCtasAnSm).cost, 132);
  EXPECT_DOUBLE_EQ(Gemm(112, 64, kOneCtaAnSm).cost, 66);
  EXPECT_EQ(Gemm(224, 64, kTwoCtasAnSm).splits, 1);
}

// A streaming launch (one token tile) with one CTA an SM where two fit costs half again.
TEST(ClusterFitTest, StreamingWantsTwoCtasAnSm) {
  const SplitChoice gemm = ChooseSplits(112, 32, kSms, kTwoCtasAnSm, false);
  const SplitChoice streaming = ChooseSplits(112, 32, kSms, kTwoCtasAnSm, true);
  EXPECT_EQ(gemm.splits, 1);
  EXPECT_DOUBLE_EQ(gemm.cost, 32);
  EXPECT_EQ(streaming.splits, 2);
  EXPECT_DOUBLE_EQ(streaming.cost, 2 * 16 * 1.03);
}

}  // namespace
}  // namespace qmm::cuda
