// The float64 layer references on values worked out by hand.
#include "kernels/layers_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/quantize.h"
#include "kernels/reference.h"

namespace qmm {
namespace {

TEST(ReferenceEmbeddingTest, ReadsRowsFromPackedBytes) {
  // A [3, 2] bf16 table: 1, 2 / -3, 4.5 / 0.25, -8.
  const uint16_t bits[] = {FloatToBf16(1.0f), FloatToBf16(2.0f),  FloatToBf16(-3.0f),
                           FloatToBf16(4.5f), FloatToBf16(0.25f), FloatToBf16(-8.0f)};
  std::vector<uint8_t> bytes(sizeof(bits));
  for (size_t i = 0; i < 6; ++i) {
    bytes[2 * i] = bits[i] & 0xff;
    bytes[2 * i + 1] = bits[i] >> 8;
  }
  const PackedWeight table{Scheme::kBf16, {.n = 3, .k = 2}, bytes};
  const std::vector<int32_t> ids = {2, 0, 2};
  EXPECT_EQ(ReferenceEmbedding(table, ids), (std::vector<double>{0.25, -8, 1, 2, 0.25, -8}));
}

TEST(ReferenceDyTTest, AppliesGammaTanhBeta) {
  const std::vector<double> x = {0.0, 1.0, -2.0, 0.5};
  const std::vector<float> gamma = {2.0f, -1.0f};
  const std::vector<float> beta = {0.5f, 0.25f};
  const std::vector<double> y = ReferenceDyT(x, 2, 0.5, gamma, beta);
  EXPECT_DOUBLE_EQ(y[0], 0.5);
  EXPECT_DOUBLE_EQ(y[1], -std::tanh(0.5) + 0.25);
  EXPECT_DOUBLE_EQ(y[2], 2.0 * std::tanh(-1.0) + 0.5);
  EXPECT_DOUBLE_EQ(y[3], -std::tanh(0.25) + 0.25);
  EXPECT_DOUBLE_EQ(ReferenceDyT(x, 2, 0.5, gamma, {})[2], 2.0 * std::tanh(-1.0));
}

TEST(ReferenceRmsNormTest, ScalesEachRowByItsRootMeanSquare) {
  // Row 0: mean square 4, + epsilon 5 = 9, rms 3. Row 1: mean square 25 / 4, + 5 = 11.25.
  const std::vector<double> x = {2.0, 2.0, -2.0, 2.0, 0.0, 5.0, 0.0, 0.0};
  const std::vector<float> weight = {1.0f, 2.0f, 3.0f, -1.0f};
  const std::vector<double> y = ReferenceRmsNorm(x, 4, weight, 5.0);
  EXPECT_DOUBLE_EQ(y[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(y[1], 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(y[2], -2.0);
  EXPECT_DOUBLE_EQ(y[3], -2.0 / 3.0);
  EXPECT_DOUBLE_EQ(y[4], 0.0);
  EXPECT_DOUBLE_EQ(y[5], 10.0 / std::sqrt(11.25));
}

TEST(ReferenceActivationTest, KnownValues) {
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kIdentity, -3.5), -3.5);
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kRelu, -3.5), 0.0);
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kRelu, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kReluSquared, -3.5), 0.0);
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kReluSquared, 3.5), 12.25);
  EXPECT_DOUBLE_EQ(ReferenceActivation(Activation::kSilu, 0.0), 0.0);
  EXPECT_NEAR(ReferenceActivation(Activation::kSilu, 1.0), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(ReferenceActivation(Activation::kSilu, -2.0), -0.2384058440442351, 1e-15);
  // GELU-tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)).
  EXPECT_NEAR(ReferenceActivation(Activation::kGeluTanh, 1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(ReferenceActivation(Activation::kGeluTanh, -1.0), -0.15880800939172324, 1e-15);
}

TEST(ReferenceBiasActivationTest, AddsBiasPerColumnFirst) {
  const std::vector<double> x = {-1.0, 1.0, -1.0, 1.0};
  const std::vector<float> bias = {2.0f, -3.0f};
  EXPECT_EQ(ReferenceBiasActivation(Activation::kRelu, x, 2, bias),
            (std::vector<double>{1.0, 0.0, 1.0, 0.0}));
  EXPECT_EQ(ReferenceBiasActivation(Activation::kIdentity, x, 2, {}), x);
}

TEST(ReferenceGluAndAddTest, ElementWise) {
  const std::vector<double> gate = {0.0, 1.0, -2.0};
  const std::vector<double> up = {5.0, 2.0, 3.0};
  const std::vector<double> y = ReferenceGlu(Activation::kSilu, gate, up);
  EXPECT_DOUBLE_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1], 2.0 * 0.7310585786300049, 1e-15);
  // GeGLU (Gemma): gelu_tanh(1) = 0.8411919906082768; ReGLU.
  EXPECT_NEAR(ReferenceGlu(Activation::kGeluTanh, gate, up)[1], 2.0 * 0.8411919906082768, 1e-15);
  EXPECT_EQ(ReferenceGlu(Activation::kRelu, gate, up), (std::vector<double>{0.0, 2.0, 0.0}));
  EXPECT_EQ(ReferenceGlu(Activation::kReluSquared, gate, up), (std::vector<double>{0.0, 2.0, 0.0}));
  EXPECT_EQ(
      ReferenceGlu(Activation::kReluSquared, std::vector<double>{3.0}, std::vector<double>{0.5}),
      (std::vector<double>{4.5}));
  EXPECT_EQ(ReferenceAdd(gate, up), (std::vector<double>{5.0, 3.0, 1.0}));
}

TEST(ReferenceLinearTest, RoundsInputToFloatThenMatMul) {
  // [2, 8] fp16 weight of small integers.
  std::vector<float> w(16);
  for (int i = 0; i < 16; ++i) w[i] = static_cast<float>(i % 5 - 2);
  absl::StatusOr<std::vector<uint8_t>> packed =
      QuantizeWeight(Scheme::kFp16, {.n = 2, .k = 8}, DType::kF32,
                     {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4});
  ASSERT_TRUE(packed.ok());
  const PackedWeight pw{Scheme::kFp16, {.n = 2, .k = 8}, *packed};
  // 1 + 2^-30 is not a float: it reaches the matmul as 1.
  const std::vector<double> x(8, 1.0 + std::ldexp(1.0, -30));
  const std::vector<float> x_f32(8, 1.0f);
  EXPECT_EQ(ReferenceLinear(pw, x, 1), ReferenceMatMul(pw, x_f32.data(), 1));
}

}  // namespace
}  // namespace qmm
