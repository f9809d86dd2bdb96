// RepackW4A16's gemm scales and row factors (kernels/cuda/w4a16_layout.h): for every row,
// each gemm scale times the row factor is the row's scale times 2^24 (rows g of a strip's
// pairs) or 2^20 (rows g + 8), exactly wherever that stays a normal fp16; the row's
// largest lands in [2^15, 2^16); a row of zero scales gets factor 1; per-row scales get
// neither region.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/quantize.h"

namespace qmm::cuda {
namespace {

using w4a16::kGroupScaleBytes;
using w4a16::kStripScaleBytes;

std::vector<uint8_t> Packed(const WeightShape& shape, const std::vector<float>& w) {
  absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(
      Scheme::kW4A16, shape, DType::kF32,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4));
  EXPECT_TRUE(packed.ok()) << packed.status();
  return packed.ok() ? *std::move(packed) : std::vector<uint8_t>{};
}

float HalfAt(const std::vector<uint8_t>& layout, int64_t offset) {
  uint16_t h;
  std::memcpy(&h, layout.data() + offset, 2);
  return HalfToFloat(h);
}

// Rows of three magnitudes, 16 groups spanning 2^-15 in each, one row of zeros.
TEST(W4A16RepackTest, GemmScalesAreEachRowsScalesTimesItsFactor) {
  const WeightShape shape{300, 2048, kW4GroupSize};
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(shape.n * shape.k);
  for (int64_t n = 0; n < shape.n; ++n) {
    for (int64_t k = 0; k < shape.k; ++k) {
      const int group = static_cast<int>(k / kW4GroupSize);
      w[n * shape.k + k] =
          n == 5 ? 0.0f : normal(rng) * std::ldexp(1.0f, static_cast<int>(n % 3) * 6 - group);
    }
  }
  const std::vector<uint8_t> bytes = Packed(shape, w);
  const std::vector<uint8_t> layout = RepackW4A16(PackedWeight{Scheme::kW4A16, shape, bytes});
  ASSERT_EQ(static_cast<int64_t>(layout.size()), w4a16::DeviceBytes(shape));
  const int64_t scale_groups = w4a16::ScaleGroups(shape);
  int exact = 0;
  for (int64_t row = 0; row < shape.n; ++row) {
    const int64_t group = row / w4a16::kGroupRows;
    const int strip = static_cast<int>(row % w4a16::kGroupRows / w4a16::kStripRows);
    const int i = static_cast<int>(row % w4a16::kStripRows);
    const int64_t at = strip * kStripScaleBytes + (i % 8) * 4 + (i / 8) * 2;
    float factor;
    std::memcpy(&factor,
                layout.data() + w4a16::RowFactorsOffset(shape) +
                    group * w4a16::kGroupRowFactorBytes + strip * w4a16::kStripRowFactorBytes +
                    (i % 8) * 8 + (i / 8) * 4,
                4);
    const int shift = i < 8 ? 24 : 20;
    float largest = 0.0f;
    for (int64_t sg = 0; sg < scale_groups; ++sg) {
      const int64_t offset = (group * scale_groups + sg) * kGroupScaleBytes + at;
      const float s = HalfAt(layout, w4a16::WeightRegionBytes(shape) + offset);
      const float g = HalfAt(layout, w4a16::GemmScalesOffset(shape) + offset);
      largest = std::max(largest, std::fabs(g));
      const float want = std::ldexp(s / factor, shift);
      if (std::fabs(want) >= 0x1p-14f) {
        EXPECT_EQ(g, want) << "row " << row << ", scale group " << sg;
        ++exact;
      } else {
        // Below fp16's normal range: rounded to its subnormal step.
        EXPECT_LE(std::fabs(g - want), 0x1p-25f) << "row " << row << ", scale group " << sg;
      }
    }
    if (row == 5) {
      EXPECT_EQ(largest, 0.0f);
      EXPECT_EQ(factor, 1.0f);
    } else {
      EXPECT_GE(largest, 0x1p15f) << "row " << row;
      EXPECT_LT(largest, 0x1p16f) << "row " << row;
    }
  }
  EXPECT_GT(exact, shape.n * scale_groups / 2);
}

TEST(W4A16RepackTest, PerRowScalesHaveNoGemmScales) {
  const WeightShape shape{130, 256, 0};
  EXPECT_EQ(w4a16::DeviceBytes(shape), w4a16::DecodeBytes(shape));
  const std::vector<uint8_t> bytes = Packed(shape, std::vector<float>(shape.n * shape.k, 0.5f));
  EXPECT_EQ(static_cast<int64_t>(RepackW4A16(PackedWeight{Scheme::kW4A16, shape, bytes}).size()),
            w4a16::DeviceBytes(shape));
}

// In activation order the canonical form's order ends the layout, 256-byte aligned (the
// gather loads it 16 bytes at a time) even after a zero-terms region of odd length, and
// the regions before it are those of the same weight in its stored order.
TEST(W4A16RepackTest, ActOrderEndsWithTheOrder) {
  for (bool zero_points : {false, true}) {
    const WeightShape shape{3, 256, kW4GroupSize, zero_points, true};
    WeightShape stored = shape;
    stored.act_order = false;
    std::vector<uint8_t> bytes = Packed(stored, std::vector<float>(shape.n * shape.k, 0.25f));
    std::vector<int32_t> order(shape.k);
    for (int64_t j = 0; j < shape.k; ++j) order[j] = static_cast<int32_t>((j * 7) % shape.k);
    const auto* order_bytes = reinterpret_cast<const uint8_t*>(order.data());
    bytes.insert(bytes.end(), order_bytes, order_bytes + 4 * shape.k);
    const std::vector<uint8_t> layout = RepackW4A16(PackedWeight{Scheme::kW4A16, shape, bytes});
    ASSERT_EQ(static_cast<int64_t>(layout.size()), w4a16::DeviceBytes(shape));
    EXPECT_EQ(w4a16::OrderOffset(shape) % 256, 0);
    EXPECT_EQ(w4a16::DeviceBytes(shape), w4a16::OrderOffset(shape) + 4 * shape.k);
    EXPECT_EQ(std::memcmp(layout.data() + w4a16::OrderOffset(shape), order.data(), 4 * shape.k), 0);
    const std::vector<uint8_t> plain = RepackW4A16(
        PackedWeight{Scheme::kW4A16, stored, std::span(bytes).first(bytes.size() - 4 * shape.k)});
    ASSERT_LE(plain.size(), layout.size());
    EXPECT_EQ(std::memcmp(layout.data(), plain.data(), plain.size()), 0);
  }
}

// The zero biases (both dtypes) at each row's place in the scales' order: what the decode
// kernels' dequantization adds to 1024 + u (fp16, rows g of a strip's pairs), (1024 + 16
// u) / 16 (fp16, rows g + 8) or 128 + u (bf16) so that it yields q - z, for every code and
// zero point of the quantizer, per group and per row; padding rows (z = 0) too.
TEST(W4A16RepackTest, ZeroBiasesDequantizeToCodeMinusZeroPoint) {
  for (int32_t group_size : {kW4GroupSize, 0}) {
    const WeightShape shape{200, 512, group_size, true};
    std::mt19937_64 rng(11);
    // Row n spans [a, a + 1], a from -1 to 0: zero points over most of [-8, 7].
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> w(shape.n * shape.k);
    for (int64_t i = 0; i < shape.n * shape.k; ++i) {
      w[i] = uniform(rng) - static_cast<float>(i / shape.k % 9) / 8.0f;
    }
    const std::vector<uint8_t> bytes = Packed(shape, w);
    const PackedWeight packed{Scheme::kW4A16, shape, bytes};
    const std::vector<uint8_t> layout = RepackW4A16(packed);
    ASSERT_EQ(static_cast<int64_t>(layout.size()), w4a16::DeviceBytes(shape));
    EXPECT_EQ(w4a16::ZeroBiasesOffset(shape) % 256, 0);
    const int64_t scale_groups = w4a16::ScaleGroups(shape);
    const int64_t bf16_region = w4a16::ZeroBiasesOffset(shape) + w4a16::ScaleRegionBytes(shape);
    std::set<int> zero_points;
    for (int64_t row = 0; row < w4a16::NumGroups(shape) * w4a16::kGroupRows; ++row) {
      const int64_t group = row / w4a16::kGroupRows;
      const int strip = static_cast<int>(row % w4a16::kGroupRows / w4a16::kStripRows);
      const int i = static_cast<int>(row % w4a16::kStripRows);
      for (int64_t sg = 0; sg < scale_groups; ++sg) {
        const int z = row < shape.n ? packed.zero_points()[row * scale_groups + sg] : 0;
        zero_points.insert(z);
        const int64_t at = (group * scale_groups + sg) * kGroupScaleBytes +
                           strip * kStripScaleBytes + w4a16::StripScaleOffset(i);
        const float f16 = HalfAt(layout, w4a16::ZeroBiasesOffset(shape) + at);
        uint16_t b;
        std::memcpy(&b, layout.data() + bf16_region + at, 2);
        for (int u = 0; u < 16; ++u) {
          const float in_place = i < 8 ? 1024.0f + u : (1024.0f + 16.0f * u) / 16.0f;
          EXPECT_EQ(in_place + f16, u - 8 - z) << "row " << row << ", group " << sg;
          EXPECT_EQ(128.0f + u + Bf16ToFloat(b), u - 8 - z) << "row " << row << ", group " << sg;
        }
      }
    }
    EXPECT_GE(zero_points.size(), 8u);  // the weights' range shifts: many zero points
  }
}

TEST(W4A16RepackTest, RowExponent) {
  EXPECT_EQ(w4a16::RowExponent(1.0f, 24), -9);  // 2^15
  EXPECT_EQ(w4a16::RowExponent(1.5f, 20), -5);  // 1.5 * 2^15
  EXPECT_EQ(w4a16::RowExponent(0x1p-24f, 24), 15);
  EXPECT_EQ(w4a16::RowExponent(65504.0f, 24), -24);
  EXPECT_EQ(w4a16::RowExponent(0.0f, 24), 0);
  EXPECT_EQ(w4a16::RowExponent(INFINITY, 24), 0);
}

}  // namespace
}  // namespace qmm::cuda
