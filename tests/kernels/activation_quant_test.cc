#include "kernels/activation_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace qmm {
namespace {

TEST(ActivationQuantTest, KnownRow) {
  // max |x| = 127: scale 1, q = round(x) with ties away from zero.
  const std::vector<float> x = {-127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 0.49f, 126.6f, 3.0f};
  std::vector<int8_t> q(8, 99);
  float scale = std::numeric_limits<float>::quiet_NaN();
  QuantizeRowsInt8(x.data(), 1, 8, q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{-127, 3, -3, 1, -1, 0, 127, 3}));
}

TEST(ActivationQuantTest, ZeroRowAndRowsAreIndependent) {
  std::vector<float> x(3 * 16, 0.0f);
  for (int c = 0; c < 16; ++c) x[c] = static_cast<float>(c) - 8.0f;             // row 0: max 8
  for (int c = 0; c < 16; ++c) x[32 + c] = 0.001f * static_cast<float>(c + 1);  // row 2
  std::vector<int8_t> q(3 * 16, 99);
  std::vector<float> scale(3, std::numeric_limits<float>::quiet_NaN());
  QuantizeRowsInt8(x.data(), 3, 16, q.data(), scale.data());
  EXPECT_EQ(scale[0], 8.0f / 127.0f);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(scale[1], 0.0f);
  for (int c = 16; c < 32; ++c) EXPECT_EQ(q[c], 0);
  EXPECT_EQ(scale[2], 0.016f / 127.0f);
  EXPECT_EQ(q[47], 127);
}

TEST(ActivationQuantTest, RandomRowsFollowTheRule) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int64_t m = 13;
  const int64_t k = 520;
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  std::vector<int8_t> q(m * k);
  std::vector<float> scale(m, std::numeric_limits<float>::quiet_NaN());
  QuantizeRowsInt8(x.data(), m, k, q.data(), scale.data());
  for (int64_t r = 0; r < m; ++r) {
    float max_abs = 0.0f;
    for (int64_t c = 0; c < k; ++c) max_abs = std::max(max_abs, std::fabs(x[r * k + c]));
    ASSERT_EQ(scale[r], max_abs / 127.0f);
    bool saw_extreme = false;
    for (int64_t c = 0; c < k; ++c) {
      const float v = x[r * k + c];
      ASSERT_EQ(q[r * k + c], static_cast<int8_t>(std::round(v / scale[r])));
      ASSERT_LE(std::fabs(v - q[r * k + c] * scale[r]), scale[r] / 2 * (1 + 1e-5f));
      saw_extreme |= std::abs(q[r * k + c]) == 127;
    }
    EXPECT_TRUE(saw_extreme);
  }
}

}  // namespace
}  // namespace qmm
