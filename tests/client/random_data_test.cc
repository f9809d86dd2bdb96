#include "client/random_data.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace qmm {
namespace {

TEST(RandomDataTest, SameSeedSameBitsDifferentSeedDifferentValues) {
  EXPECT_EQ(RandomWeightValues(17, 33, 5), RandomWeightValues(17, 33, 5));
  EXPECT_NE(RandomWeightValues(17, 33, 5), RandomWeightValues(17, 33, 6));
  EXPECT_EQ(RandomActivationValues(3, 64, 9), RandomActivationValues(3, 64, 9));
  EXPECT_NE(RandomActivationValues(3, 64, 9), RandomActivationValues(3, 64, 10));
}

// The values are a contract between `upload --random` and `matmul --verify_seed` across
// machines; pin a few so an accidental change of the generator shows up here.
TEST(RandomDataTest, PinnedValues) {
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
    return out;
  };
  EXPECT_EQ(bits(RandomWeightValues(2, 4, 1)),
            (std::vector<uint32_t>{0x3e10c97a, 0x3eefa72b, 0xbefb07f6, 0xbd48e807, 0xbf21e035,
                                   0x3efbff10, 0x3f3d6209, 0x3f65d61a}));
  EXPECT_EQ(bits(RandomActivationValues(1, 4, 3)),
            (std::vector<uint32_t>{0x3ec35eb3, 0xbf2ee3c8, 0xbde7486d, 0xbfb20a0d}));
  // A prefix of a longer row is the same: element (r, c) depends on r * k + c only.
  const std::vector<float> x8 = RandomActivationValues(1, 8, 3);
  const std::vector<float> x4 = RandomActivationValues(1, 4, 3);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x8[i], x4[i]);
}

TEST(RandomDataTest, ActivationsAreBellShapedWithUnitVariance) {
  const std::vector<float> x = RandomActivationValues(64, 1024, 1);
  double sum = 0, sum_sq = 0;
  for (float v : x) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_LT(std::abs(v), 3.47f);
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / x.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / x.size() - mean * mean, 1.0, 0.02);
}

TEST(RandomDataTest, WeightRowsHaveDistinctScalesAndAreNeverZero) {
  const int64_t n = 64, k = 256;
  const std::vector<float> w = RandomWeightValues(n, k, 3);
  double min_rms = 1e9, max_rms = 0;
  for (int64_t r = 0; r < n; ++r) {
    double sq = 0;
    int zeros = 0;
    for (int64_t c = 0; c < k; ++c) {
      sq += static_cast<double>(w[r * k + c]) * w[r * k + c];
      zeros += w[r * k + c] == 0;
    }
    EXPECT_LT(zeros, 2) << "row " << r;
    const double rms = std::sqrt(sq / k) * std::sqrt(static_cast<double>(k));
    min_rms = std::min(min_rms, rms);
    max_rms = std::max(max_rms, rms);
  }
  // Row scales lie in [0.5, 1.5); with 64 rows they spread well beyond 1.5x.
  EXPECT_GT(min_rms, 0.4);
  EXPECT_LT(max_rms, 1.7);
  EXPECT_GT(max_rms / min_rms, 1.5);
}

}  // namespace
}  // namespace qmm
