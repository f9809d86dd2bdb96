#include "client/qmmctl/stats.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace qmm::ctl {
namespace {

TEST(SummarizeValuesTest, MeanStdMinMax) {
  const std::vector<float> v = {2, 4, 4, 4, 5, 5, 7, 9};
  const ValueSummary s = SummarizeValues(v);
  EXPECT_EQ(s.count, 8);
  EXPECT_EQ(s.non_finite, 0);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.stddev, 2);
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 9);
}

TEST(SummarizeValuesTest, NegativeValuesAndLargeOffsets) {
  std::vector<float> v;
  for (int i = 0; i < 1000; ++i) v.push_back(1e6f + (i % 2 ? 1.0f : -1.0f));
  const ValueSummary s = SummarizeValues(v);
  EXPECT_NEAR(s.mean, 1e6, 1e-6);
  EXPECT_NEAR(s.stddev, 1.0, 1e-9);
  const ValueSummary neg = SummarizeValues(std::vector<float>{-3, -1});
  EXPECT_EQ(neg.min, -3);
  EXPECT_EQ(neg.max, -1);
}

TEST(SummarizeValuesTest, NonFiniteValuesAreCountedAndLeftOut) {
  const std::vector<float> v = {NAN, 1, INFINITY, 3, -INFINITY};
  const ValueSummary s = SummarizeValues(v);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.non_finite, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 3);
  const ValueSummary none = SummarizeValues(std::vector<float>{NAN});
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(SummarizeValues({}).count, 0);
}

TEST(SummarizeLatenciesTest, NearestRankPercentiles) {
  std::vector<absl::Duration> samples;
  // 1..100 ms, shuffled order.
  for (int i = 0; i < 100; ++i) samples.push_back(absl::Milliseconds((i * 37) % 100 + 1));
  const LatencySummary s = SummarizeLatencies(samples);
  EXPECT_EQ(s.count, 100);
  EXPECT_EQ(s.min, absl::Milliseconds(1));
  EXPECT_EQ(s.p50, absl::Milliseconds(50));
  EXPECT_EQ(s.p90, absl::Milliseconds(90));
  EXPECT_EQ(s.p99, absl::Milliseconds(99));
  EXPECT_EQ(s.max, absl::Milliseconds(100));
  EXPECT_EQ(s.mean, absl::Microseconds(50500));
}

TEST(SummarizeLatenciesTest, FewSamples) {
  const LatencySummary one = SummarizeLatencies({absl::Milliseconds(3)});
  EXPECT_EQ(one.p50, absl::Milliseconds(3));
  EXPECT_EQ(one.p99, absl::Milliseconds(3));
  const LatencySummary three =
      SummarizeLatencies({absl::Milliseconds(9), absl::Milliseconds(1), absl::Milliseconds(5)});
  EXPECT_EQ(three.p50, absl::Milliseconds(5));
  EXPECT_EQ(three.p90, absl::Milliseconds(9));
  EXPECT_EQ(SummarizeLatencies({}).count, 0);
}

}  // namespace
}  // namespace qmm::ctl
