#include "kernels/bitnet_packing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/quantize.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

// A random ternary weight t[n][k] in {-1, 0, 1}, row-major.
std::vector<int> RandomTernary(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n * k);
  for (int& v : t) v = static_cast<int>(rng() % 3) - 1;
  return t;
}

// The packers of the BitNet code, written from their description: the tensor `values`
// [rows, cols] (codes t + 1) packed along its rows, R = ceil(rows / 4) packed rows, plane i
// of packed row r holding row r + i*R.
std::vector<uint8_t> PackPlanar(const std::vector<int>& values, int64_t rows, int64_t cols) {
  const int64_t packed_rows = (rows + 3) / 4;
  std::vector<uint8_t> out(packed_rows * cols, 0);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c = 0; c < cols; ++c) {
      const int code = values[row * cols + c] + 1;
      out[(row % packed_rows) * cols + c] |= code << (2 * (row / packed_rows));
    }
  }
  return out;
}

std::vector<int> Transpose(const std::vector<int>& t, int64_t n, int64_t k) {
  std::vector<int> out(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) out[c * n + r] = t[r * k + c];
  }
  return out;
}

void AppendF32(std::vector<uint8_t>* bytes, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  bytes->insert(bytes->end(), b, b + 4);
}

void AppendBits16(std::vector<uint8_t>* bytes, uint16_t v) {
  bytes->push_back(static_cast<uint8_t>(v & 0xff));
  bytes->push_back(static_cast<uint8_t>(v >> 8));
}

// Checks every code and scale of a canonical packed W2A8 weight against t and s.
void ExpectPacked(const std::vector<uint8_t>& packed, const WeightShape& shape,
                  const std::vector<int>& t, const std::vector<float>& s) {
  ASSERT_EQ(static_cast<int64_t>(packed.size()), PackedBytes(Scheme::kW2A8, shape));
  auto view = ViewPacked(Scheme::kW2A8, shape, packed);
  ASSERT_TRUE(view.ok()) << view.status();
  const std::vector<float> w = DequantizeWeight(*view);
  for (int64_t n = 0; n < shape.n; ++n) {
    float scale;
    std::memcpy(&scale, packed.data() + shape.n * shape.k / 4 + 4 * n, 4);
    ASSERT_EQ(scale, s[n]) << "row " << n;
    for (int64_t c = 0; c < shape.k; ++c) {
      const int code = (packed[n * shape.k / 4 + c / 4] >> (2 * (c % 4))) & 3;
      ASSERT_EQ(code, t[n * shape.k + c] + 1) << "row " << n << " column " << c;
      ASSERT_EQ(w[n * shape.k + c], static_cast<float>(t[n * shape.k + c]) * s[n]);
    }
  }
}

TEST(BitnetPackingTest, HuggingFaceLayoutWithTensorScale) {
  // N not a multiple of 4: the last plane is partly padding.
  for (int64_t n : {1, 7, 64}) {
    const WeightShape shape{n, 256, 0};
    const std::vector<int> t = RandomTernary(n, shape.k, 1 + n);
    std::vector<uint8_t> payload = PackPlanar(t, n, shape.k);
    ASSERT_EQ(static_cast<int64_t>(payload.size()),
              BitnetPlanarCodeBytes(BitnetPackedAxis::kOutFeatures, shape));
    AppendBits16(&payload, FloatToBf16(2.5f));
    auto packed =
        BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kBF16, payload);
    ASSERT_TRUE(packed.ok()) << packed.status();
    ExpectPacked(*packed, shape, t, std::vector<float>(n, 1.0f / 2.5f));
  }
}

TEST(BitnetPackingTest, LigerLayoutWithoutScale) {
  const WeightShape shape{5, 384, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 7);
  const std::vector<uint8_t> payload = PackPlanar(Transpose(t, shape.n, shape.k), shape.k, shape.n);
  ASSERT_EQ(static_cast<int64_t>(payload.size()),
            BitnetPlanarCodeBytes(BitnetPackedAxis::kInFeatures, shape));
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kInFeatures, shape, DType::kF32, payload);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectPacked(*packed, shape, t, std::vector<float>(shape.n, 1.0f));
}

TEST(BitnetPackingTest, PerRowScalesInEachDtype) {
  const WeightShape shape{9, 128, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 11);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> payload = PackPlanar(t, shape.n, shape.k);
    std::vector<float> expected;
    for (int64_t n = 0; n < shape.n; ++n) {
      const float scale = 0.75f + 0.5f * static_cast<float>(n);
      if (dtype == DType::kF32) {
        AppendF32(&payload, scale);
      } else {
        AppendBits16(&payload, dtype == DType::kF16 ? FloatToHalf(scale) : FloatToBf16(scale));
      }
      const float stored = dtype == DType::kF32   ? scale
                           : dtype == DType::kF16 ? HalfToFloat(FloatToHalf(scale))
                                                  : Bf16ToFloat(FloatToBf16(scale));
      expected.push_back(1.0f / stored);
    }
    auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, dtype, payload);
    ASSERT_TRUE(packed.ok()) << packed.status();
    ExpectPacked(*packed, shape, t, expected);
  }
}

// AutoBitLinear's scale multiplies: row n keeps it as it is (bf16 values exact in fp32),
// one per tensor or one a row, in either packing.
TEST(BitnetPackingTest, MultiplyingScalesAreKept) {
  const WeightShape shape{12, 256, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 13);
  std::vector<uint8_t> per_tensor = PackPlanar(t, shape.n, shape.k);
  AppendBits16(&per_tensor, FloatToBf16(0.0234375f));
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kBF16,
                                     per_tensor, BitnetScale::kMultiplies);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectPacked(*packed, shape, t, std::vector<float>(shape.n, 0.0234375f));

  std::vector<uint8_t> per_row = PackPlanar(Transpose(t, shape.n, shape.k), shape.k, shape.n);
  std::vector<float> expected;
  for (int64_t n = 0; n < shape.n; ++n) {
    expected.push_back(1.5f + 0.125f * static_cast<float>(n));
    AppendF32(&per_row, expected.back());
  }
  packed = BitnetPlanarToPacked(BitnetPackedAxis::kInFeatures, shape, DType::kF32, per_row,
                                BitnetScale::kMultiplies);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectPacked(*packed, shape, t, expected);
  // Still finite and positive.
  std::vector<uint8_t> negative = PackPlanar(t, shape.n, shape.k);
  AppendF32(&negative, -1.0f);
  EXPECT_EQ(BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kF32, negative,
                                 BitnetScale::kMultiplies)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BitnetPackingTest, RejectsWrongPayloadSize) {
  const WeightShape shape{8, 128, 0};
  std::vector<uint8_t> payload(BitnetPlanarCodeBytes(BitnetPackedAxis::kInFeatures, shape) + 3,
                               0x55);
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kInFeatures, shape, DType::kF32, payload);
  ASSERT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(packed.status().message(), HasSubstr("got 259"));
}

TEST(BitnetPackingTest, RejectsInvalidShape) {
  const WeightShape shape{8, 100, 0};
  std::vector<uint8_t> payload(200, 0x55);
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kF32, payload);
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BitnetPackingTest, RejectsCodeThreeNamingItsPlace) {
  const WeightShape shape{6, 128, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 3);
  // HF layout, R = 2: weight row 5 is plane 2 of packed row 1; column 17.
  std::vector<uint8_t> payload = PackPlanar(t, shape.n, shape.k);
  payload[1 * shape.k + 17] |= 3 << 4;
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kF32, payload);
  ASSERT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(packed.status().message(), HasSubstr("weight row 5, column 17"));
}

TEST(BitnetPackingTest, IgnoresPaddingOfTheLastPlane) {
  // N = 5, R = 2: planes 2 and 3 of packed row 1 would be rows 5 and 7, past N.
  const WeightShape shape{5, 128, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 5);
  std::vector<uint8_t> payload = PackPlanar(t, shape.n, shape.k);
  for (int64_t c = 0; c < shape.k; ++c) payload[1 * shape.k + c] |= 0xf0;
  auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kF32, payload);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectPacked(*packed, shape, t, std::vector<float>(shape.n, 1.0f));
}

TEST(BitnetPackingTest, RejectsScalesThatAreNotFinitePositive) {
  const WeightShape shape{4, 128, 0};
  const std::vector<int> t = RandomTernary(shape.n, shape.k, 9);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), 1e-45f}) {
    std::vector<uint8_t> payload = PackPlanar(t, shape.n, shape.k);
    AppendF32(&payload, bad);
    auto packed = BitnetPlanarToPacked(BitnetPackedAxis::kOutFeatures, shape, DType::kF32, payload);
    EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(packed.status().message(), HasSubstr("BitNet weight scale 0")) << bad;
  }
}

}  // namespace
}  // namespace qmm
