#include "client/qmmctl/verify.h"

#include <cmath>
#include <vector>

#include "client/random_data.h"
#include "gtest/gtest.h"
#include "kernels/reference.h"

namespace qmm::ctl {
namespace {

TEST(DefaultToleranceTest, StatedComponents) {
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kW8A16, DType::kF32, "cpu"), 1e-4);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kFp16, DType::kF16, "cpu"), 1e-4 + 0x1p-10);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kW4A16, DType::kBF16, "cpu"), 1e-4 + 0x1p-7);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kW2A8, DType::kF32, "cpu"), 1e-4 + 5e-3);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kW4A16, DType::kF32, "cuda"), 1e-4 + 2e-3);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kBf16, DType::kF32, "cuda"), 1e-4 + 1.6e-2);
  EXPECT_DOUBLE_EQ(DefaultTolerance(Scheme::kW2A8, DType::kF32, "cuda"), 1e-4 + 5e-3);
}

TEST(CompareWithReferenceTest, PassesWithinAndFailsBeyondTheTolerance) {
  const std::vector<double> ref = {1.0, -4.0, 2.0};
  Comparison c = CompareWithReference(std::vector<float>{1.0f, -4.0f, 2.0f}, ref, 1e-6);
  EXPECT_TRUE(c.passed);
  EXPECT_EQ(c.max_abs_error, 0);
  EXPECT_EQ(c.max_abs_reference, 4);

  c = CompareWithReference(std::vector<float>{1.0f, -4.0f, 2.002f}, ref, 1e-3);
  EXPECT_TRUE(c.passed);
  EXPECT_NEAR(c.relative_error, 0.002 / 4, 1e-7);
  c = CompareWithReference(std::vector<float>{1.0f, -4.0f, 2.02f}, ref, 1e-3);
  EXPECT_FALSE(c.passed);
  EXPECT_NEAR(c.max_abs_error, 0.02, 1e-6);
}

TEST(CompareWithReferenceTest, NonFiniteOrShortResultsFail) {
  const std::vector<double> ref = {1.0, 2.0};
  Comparison c = CompareWithReference(std::vector<float>{1.0f, NAN}, ref, 1);
  EXPECT_FALSE(c.passed);
  EXPECT_EQ(c.non_finite, 1);
  EXPECT_FALSE(CompareWithReference(std::vector<float>{1.0f}, ref, 1).passed);
  EXPECT_FALSE(CompareWithReference(std::vector<float>{1.0f, 2.0f, 3.0f}, ref, 1).passed);
  // A zero reference takes only an exact zero.
  EXPECT_TRUE(CompareWithReference(std::vector<float>{0.0f}, std::vector<double>{0.0}, 0).passed);
  EXPECT_FALSE(
      CompareWithReference(std::vector<float>{1e-30f}, std::vector<double>{0.0}, 1).passed);
}

// The reference of an fp16 weight is x * fp16(w)^T in double, computed here directly.
TEST(ReferenceForRandomWeightTest, MatchesADirectFp16Product) {
  const int64_t n = 5, k = 16, m = 3;
  const std::vector<float> w = RandomWeightValues(n, k, 11);
  const std::vector<float> x = RandomActivationValues(m, k, 12);
  absl::StatusOr<std::vector<double>> ref =
      ReferenceForRandomWeight(Scheme::kFp16, {n, k, 0}, 11, x, m);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->size(), static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        sum += static_cast<double>(x[i * k + c]) * HalfToFloat(FloatToHalf(w[j * k + c]));
      }
      EXPECT_NEAR((*ref)[i * n + j], sum, 1e-12);
    }
  }
}

// Quantized references stay near the unquantized product: they used this seed's weight.
TEST(ReferenceForRandomWeightTest, QuantizedSchemesApproximateTheFloatProduct) {
  const int64_t n = 16, k = 256, m = 2;
  const std::vector<float> w = RandomWeightValues(n, k, 21);
  const std::vector<float> x = RandomActivationValues(m, k, 22);
  std::vector<double> exact(m * n);
  double max_exact = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) exact[i * n + j] += double{x[i * k + c]} * w[j * k + c];
      max_exact = std::max(max_exact, std::abs(exact[i * n + j]));
    }
  }
  const struct {
    Scheme scheme;
    int32_t group_size;
    double max_relative;
  } cases[] = {{Scheme::kBf16, 0, 0.01},
               {Scheme::kW8A16, 0, 0.02},
               {Scheme::kW4A16, 128, 0.2},
               {Scheme::kW4A16, 0, 0.25}};
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<double>> ref =
        ReferenceForRandomWeight(c.scheme, {n, k, c.group_size}, 21, x, m);
    ASSERT_TRUE(ref.ok()) << ref.status();
    double max_err = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      max_err = std::max(max_err, std::abs((*ref)[i] - exact[i]));
    }
    EXPECT_LT(max_err / max_exact, c.max_relative) << static_cast<int>(c.scheme);
    EXPECT_GT(max_err, 0) << static_cast<int>(c.scheme);  // it really was quantized
  }
}

TEST(ReferenceForRandomWeightTest, RejectsBadShapes) {
  const std::vector<float> x = RandomActivationValues(1, 100, 1);
  EXPECT_EQ(ReferenceForRandomWeight(Scheme::kW4A16, {4, 100, 128}, 1, x, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferenceForRandomWeight(Scheme::kFp16, {4, 100, 0}, 1, x, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Activations that are not [m, k].
  EXPECT_EQ(ReferenceForRandomWeight(Scheme::kFp16, {4, 96, 0}, 1, x, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      ReferenceForRandomWeight(Scheme::kFp16, {4, 96, 0}, 1, std::span<const float>(x).first(96), 1)
          .ok());
}

TEST(PackRandomWeightTest, IsWhatTheReferenceMultipliesWith) {
  const WeightShape shape{6, 256, 128};
  absl::StatusOr<std::vector<uint8_t>> packed = PackRandomWeight(Scheme::kW4A16, shape, 4);
  ASSERT_TRUE(packed.ok()) << packed.status();
  absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW4A16, shape, *packed);
  ASSERT_TRUE(view.ok()) << view.status();
  const std::vector<float> x = RandomActivationValues(2, 256, 8);
  absl::StatusOr<std::vector<double>> ref =
      ReferenceForRandomWeight(Scheme::kW4A16, shape, 4, x, 2);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ReferenceMatMul(*view, x.data(), 2), *ref);
  EXPECT_EQ(PackRandomWeight(Scheme::kW4A16, {6, 100, 128}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace qmm::ctl
