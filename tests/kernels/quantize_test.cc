#include "kernels/quantize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace qmm {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> AsBytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::vector<uint8_t> Quantize(Scheme s, const WeightShape& shape, const std::vector<float>& w) {
  absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(s, shape, DType::kF32, AsBytes(w));
  EXPECT_TRUE(packed.ok()) << packed.status();
  return packed.ok() ? *packed : std::vector<uint8_t>();
}

std::vector<float> RandomWeights(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> w(count);
  for (float& v : w) v = dist(rng);
  return w;
}

float F32At(const std::vector<uint8_t>& b, size_t offset) {
  float f;
  std::memcpy(&f, b.data() + offset, 4);
  return f;
}

uint16_t U16At(const std::vector<uint8_t>& b, size_t offset) {
  return static_cast<uint16_t>(b[offset] | (b[offset + 1] << 8));
}

struct Case {
  Scheme scheme;
  int32_t group_size;
  bool zero_points = false;
};
const Case kCases[] = {{Scheme::kFp16, 0},          {Scheme::kBf16, 0},
                       {Scheme::kW8A16, 0},         {Scheme::kW4A16, 0},
                       {Scheme::kW4A16, 128},       {Scheme::kW4A16, 0, true},
                       {Scheme::kW4A16, 128, true}, {Scheme::kW2A8, 0}};

TEST(QuantizeTest, W8A16ByteLayout) {
  // Row 0 has max |w| = 127, so s = 1 and q = round(w) with ties away from zero.
  const WeightShape shape{2, 64, 0};
  std::vector<float> w(2 * 64, 0.0f);
  w[0] = 127.0f;
  w[1] = 2.5f;
  w[2] = -2.5f;
  w[3] = 0.5f;
  w[4] = -0.49f;
  w[5] = -127.0f;
  const std::vector<uint8_t> p = Quantize(Scheme::kW8A16, shape, w);
  ASSERT_EQ(p.size(), 2u * 64 + 8);
  EXPECT_EQ(p[0], 0x7f);
  EXPECT_EQ(p[1], 3);
  EXPECT_EQ(p[2], 0xfd);  // -3
  EXPECT_EQ(p[3], 1);
  EXPECT_EQ(p[4], 0);
  EXPECT_EQ(p[5], 0x81);  // -127
  // Scales follow all the values: 1.0f = 00 00 80 3f, and the all-zero row gets 0.
  EXPECT_EQ(std::vector<uint8_t>(p.begin() + 128, p.begin() + 132),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3f}));
  EXPECT_EQ(F32At(p, 132), 0.0f);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(p[64 + c], 0);

  const std::vector<float> deq = DequantizeWeight({Scheme::kW8A16, shape, p});
  EXPECT_EQ(deq[0], 127.0f);
  EXPECT_EQ(deq[1], 3.0f);
  EXPECT_EQ(deq[2], -3.0f);
  EXPECT_EQ(deq[5], -127.0f);
}

TEST(QuantizeTest, W4A16ByteLayout) {
  // One 1x128 group with max |w| = 7: s = 1.0 (fp16 0x3c00) and q = w.
  const WeightShape shape{1, 128, 128};
  std::vector<float> w(128);
  for (int c = 0; c < 128; ++c) w[c] = static_cast<float>(c % 15 - 7);
  const std::vector<uint8_t> p = Quantize(Scheme::kW4A16, shape, w);
  ASSERT_EQ(p.size(), 64u + 2);
  // k = 0 (-7 = 0x9) in the low nibble, k = 1 (-6 = 0xa) in the high nibble.
  EXPECT_EQ(p[0], 0xa9);
  EXPECT_EQ(p[3], 0x0f);  // k = 6 is -1 (0xf), k = 7 is 0
  EXPECT_EQ(p[64], 0x00);
  EXPECT_EQ(p[65], 0x3c);
  for (int b = 0; b < 64; ++b) {
    const int lo = (2 * b) % 15 - 7;
    const int hi = (2 * b + 1) % 15 - 7;
    ASSERT_EQ(p[b], (lo & 0xf) | ((hi & 0xf) << 4)) << b;
  }
  EXPECT_EQ(DequantizeWeight({Scheme::kW4A16, shape, p}), w);

  // Hand-written bytes with -8 (a legal packed value that quantization never produces).
  std::vector<uint8_t> hand(66, 0);
  hand[0] = 0x78;                    // k = 0: -8, k = 1: 7
  hand[64] = 0x00, hand[65] = 0x40;  // s = 2.0
  const std::vector<float> deq = DequantizeWeight({Scheme::kW4A16, shape, hand});
  EXPECT_EQ(deq[0], -16.0f);
  EXPECT_EQ(deq[1], 14.0f);
  EXPECT_EQ(deq[2], 0.0f);
}

TEST(QuantizeTest, W4A16ScalesPerGroupAndPerRow) {
  // Two groups with max |w| 7 and 14: scales 1 and 2; one group per row: scale 2.
  std::vector<float> w(256);
  for (int c = 0; c < 256; ++c) w[c] = static_cast<float>((c % 8) - 4) * (c < 128 ? 1.0f : 2.0f);
  w[5] = 7.0f;
  w[130] = -14.0f;
  const std::vector<uint8_t> grouped = Quantize(Scheme::kW4A16, {1, 256, 128}, w);
  ASSERT_EQ(grouped.size(), 128u + 4);
  EXPECT_EQ(U16At(grouped, 128), 0x3c00);
  EXPECT_EQ(U16At(grouped, 130), 0x4000);
  EXPECT_EQ(DequantizeWeight({Scheme::kW4A16, {1, 256, 128}, grouped}), w);

  const std::vector<uint8_t> per_row = Quantize(Scheme::kW4A16, {1, 256, 0}, w);
  ASSERT_EQ(per_row.size(), 128u + 2);
  EXPECT_EQ(U16At(per_row, 128), 0x4000);
  // With s = 2, ties round away from zero: 7 / 2 = 3.5 -> 4, -3 / 2 -> -2, 3 / 2 -> 2.
  const std::vector<float> deq = DequantizeWeight({Scheme::kW4A16, {1, 256, 0}, per_row});
  EXPECT_EQ(deq[5], 8.0f);
  EXPECT_EQ(deq[1], -4.0f);
  EXPECT_EQ(deq[7], 4.0f);
  EXPECT_EQ(deq[130], -14.0f);
}

TEST(QuantizeTest, W4A16UsesTheRoundedScale) {
  // max |w| = 0.7: s = 0.1 is not an fp16 value; fp16(0.1) = 0.0999755859375, and q must
  // come from w / 0.0999755859375.
  const float s16 = HalfToFloat(FloatToHalf(0.7f / 7.0f));
  ASSERT_NE(s16, 0.7f / 7.0f);
  std::vector<float> w(128, 0.0f);
  w[0] = 0.7f;
  // w[1] / s16 = 2.5 exactly, which rounds to 3; w[1] / 0.1 = 2.4994 would round to 2.
  w[1] = 2.5f * s16;
  const std::vector<uint8_t> p = Quantize(Scheme::kW4A16, {1, 128, 0}, w);
  EXPECT_EQ(HalfToFloat(U16At(p, 64)), s16);
  const std::vector<float> deq = DequantizeWeight({Scheme::kW4A16, {1, 128, 0}, p});
  EXPECT_EQ(deq[1], 3.0f * s16);
}

TEST(QuantizeTest, W2A8ByteLayout) {
  // Row pattern [2, -2, 0, 2]: mean |w| = 1.5, t = [1, -1, 0, 1], codes [2, 0, 1, 2].
  const WeightShape shape{2, 128, 0};
  std::vector<float> w(256, 0.0f);
  for (int c = 0; c < 128; c += 4) {
    w[c] = 2.0f;
    w[c + 1] = -2.0f;
    w[c + 3] = 2.0f;
  }
  const std::vector<uint8_t> p = Quantize(Scheme::kW2A8, shape, w);
  ASSERT_EQ(p.size(), 2u * 32 + 8);
  for (int b = 0; b < 32; ++b) ASSERT_EQ(p[b], 0x92) << b;   // 2 | 0 << 2 | 1 << 4 | 2 << 6
  for (int b = 32; b < 64; ++b) ASSERT_EQ(p[b], 0x55) << b;  // zero row: every t = 0
  EXPECT_EQ(std::vector<uint8_t>(p.begin() + 64, p.begin() + 68),
            (std::vector<uint8_t>{0x00, 0x00, 0xc0, 0x3f}));  // 1.5f
  EXPECT_EQ(F32At(p, 68), 0.0f);
  const std::vector<float> deq = DequantizeWeight({Scheme::kW2A8, shape, p});
  EXPECT_EQ(deq[0], 1.5f);
  EXPECT_EQ(deq[1], -1.5f);
  EXPECT_EQ(deq[2], 0.0f);
  EXPECT_EQ(deq[130], 0.0f);
}

TEST(QuantizeTest, DenseByteLayout) {
  const std::vector<float> w = {1.0f, -2.0f, 0.1f, 65504.0f, 0.0f, -0.0f, 3.0f, 1e-8f};
  const std::vector<uint8_t> h = Quantize(Scheme::kFp16, {1, 8, 0}, w);
  ASSERT_EQ(h.size(), 16u);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(U16At(h, 2 * c), FloatToHalf(w[c]));
  EXPECT_EQ(h[0], 0x00);
  EXPECT_EQ(h[1], 0x3c);
  const std::vector<uint8_t> b = Quantize(Scheme::kBf16, {1, 8, 0}, w);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(U16At(b, 2 * c), FloatToBf16(w[c]));
  EXPECT_EQ(b[0], 0x80);
  EXPECT_EQ(b[1], 0x3f);
  const std::vector<float> deq = DequantizeWeight({Scheme::kBf16, {1, 8, 0}, b});
  for (int c = 0; c < 8; ++c) EXPECT_EQ(deq[c], Bf16ToFloat(FloatToBf16(w[c])));
}

// Quantizing random weights obeys each scheme's rule and error bound.
TEST(QuantizeTest, RandomWeightsFollowTheRules) {
  const int64_t n_rows = 7;
  const int64_t k = 384;
  const std::vector<float> w = RandomWeights(n_rows * k, 11);
  for (const Case& c : kCases) {
    SCOPED_TRACE(SchemeName(c.scheme));
    const WeightShape shape{n_rows, k, c.group_size};
    const std::vector<uint8_t> p = Quantize(c.scheme, shape, w);
    ASSERT_EQ(static_cast<int64_t>(p.size()), PackedBytes(c.scheme, shape));
    const PackedWeight view{c.scheme, shape, p};
    const std::vector<float> deq = DequantizeWeight(view);
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* row = &w[n * k];
      double mean_abs = 0.0;
      float max_abs = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        mean_abs += std::fabs(row[i]);
        max_abs = std::max(max_abs, std::fabs(row[i]));
      }
      mean_abs /= k;
      for (int64_t i = 0; i < k; ++i) {
        const float d = deq[n * k + i];
        switch (c.scheme) {
          case Scheme::kFp16:
            ASSERT_EQ(d, HalfToFloat(FloatToHalf(row[i])));
            break;
          case Scheme::kBf16:
            ASSERT_EQ(d, Bf16ToFloat(FloatToBf16(row[i])));
            break;
          case Scheme::kW8A16: {
            const float s = F32At(p, n_rows * k + 4 * n);
            ASSERT_EQ(s, max_abs / 127.0f);
            ASSERT_LE(std::fabs(row[i] - d), s / 2 * (1 + 1e-5f));
            break;
          }
          case Scheme::kW4A16: {
            const int64_t g = shape.GroupLength();
            const float s = HalfToFloat(U16At(p, n_rows * k / 2 + 2 * (n * (k / g) + i / g)));
            float group_max = 0.0f;
            for (int64_t j = i / g * g; j < (i / g + 1) * g; ++j) {
              group_max = std::max(group_max, std::fabs(row[j]));
            }
            ASSERT_EQ(s, HalfToFloat(FloatToHalf(group_max / 7.0f)));
            ASSERT_EQ(d, std::clamp(std::round(row[i] / s), -7.0f, 7.0f) * s);
            ASSERT_LE(std::fabs(row[i] - d), s / 2 * (1 + 1e-3f));
            break;
          }
          case Scheme::kW2A8: {
            const float s = F32At(p, n_rows * k / 4 + 4 * n);
            ASSERT_NEAR(s, mean_abs, mean_abs * 1e-6);
            ASSERT_EQ(d, std::clamp(std::round(row[i] / s), -1.0f, 1.0f) * s);
            break;
          }
        }
      }
    }
  }
}

// Packed -> dequantized -> quantized again gives the same packed bytes (W2A8: the same
// codes, and the scale becomes the mean |w| of the dequantized row).
TEST(QuantizeTest, QuantizedValuesRoundTrip) {
  const int64_t n_rows = 9;
  const int64_t k = 256;
  for (const Case& c : kCases) {
    SCOPED_TRACE(SchemeName(c.scheme));
    const WeightShape shape{n_rows, k, c.group_size};
    const std::vector<uint8_t> first = Quantize(c.scheme, shape, RandomWeights(n_rows * k, 5));
    const std::vector<float> deq = DequantizeWeight({c.scheme, shape, first});
    const std::vector<uint8_t> second = Quantize(c.scheme, shape, deq);
    if (c.scheme != Scheme::kW2A8) {
      EXPECT_EQ(second, first);
      continue;
    }
    ASSERT_EQ(second.size(), first.size());
    for (int64_t b = 0; b < n_rows * k / 4; ++b) ASSERT_EQ(second[b], first[b]) << b;
    for (int64_t n = 0; n < n_rows; ++n) {
      int nonzero = 0;
      for (int64_t i = 0; i < k; ++i) nonzero += deq[n * k + i] != 0.0f;
      const float s = F32At(first, n_rows * k / 4 + 4 * n);
      EXPECT_FLOAT_EQ(F32At(second, n_rows * k / 4 + 4 * n), s * nonzero / k);
    }
  }
}

TEST(QuantizeTest, EverySourceDTypeGivesTheSameResultAsItsFloatValues) {
  const int64_t n_rows = 3;
  const int64_t k = 128;
  const std::vector<float> w = RandomWeights(n_rows * k, 9);
  for (DType d : {DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> src(w.size() * 2);
    FromFloat(d, w.data(), w.size(), src.data());
    std::vector<float> as_float(w.size());
    ToFloat(d, src.data(), w.size(), as_float.data());
    for (const Case& c : kCases) {
      const WeightShape shape{n_rows, k, c.group_size};
      absl::StatusOr<std::vector<uint8_t>> p = QuantizeWeight(c.scheme, shape, d, src);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(*p, Quantize(c.scheme, shape, as_float)) << SchemeName(c.scheme);
    }
  }
}

// The asymmetric form: each group's range (widened to 0) in 15 steps of the fp16-rounded
// scale, the zero point where 0 falls, codes rounded and clamped; every value within half
// a step of its own (more only where the clamp bites: the range's ends, by less than the
// scale's fp16 rounding).
TEST(QuantizeTest, W4A16ZeroPointsFollowTheRules) {
  std::vector<float> w = RandomWeights(4 * 256, 11);
  for (int64_t i = 256; i < 512; ++i) w[i] = std::fabs(w[i]) + 0.01f;   // row 1: positive
  for (int64_t i = 512; i < 640; ++i) w[i] = -std::fabs(w[i]) - 0.02f;  // row 2: negative
  for (int32_t group_size : {128, 0}) {
    const WeightShape shape{4, 256, group_size, true};
    const std::vector<uint8_t> p = Quantize(Scheme::kW4A16, shape, w);
    absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW4A16, shape, p);
    ASSERT_TRUE(view.ok()) << view.status();
    const std::vector<float> deq = DequantizeWeight(*view);
    const int64_t g = shape.GroupLength();
    for (int64_t n = 0; n < 4; ++n) {
      for (int64_t group = 0; group < shape.GroupsPerRow(); ++group) {
        const float* v = w.data() + n * 256 + group * g;
        float lo = 0.0f;
        float hi = 0.0f;
        for (int64_t c = 0; c < g; ++c) {
          lo = std::min(lo, v[c]);
          hi = std::max(hi, v[c]);
        }
        const float s = HalfToFloat(U16At(p, 4 * 128 + 2 * (n * shape.GroupsPerRow() + group)));
        EXPECT_EQ(s, HalfToFloat(FloatToHalf((hi - lo) / 15.0f)));
        const int64_t groups = shape.GroupsPerRow();
        const int z = static_cast<int8_t>(p[4 * 128 + 2 * 4 * groups + n * groups + group]);
        EXPECT_EQ(z, std::clamp(static_cast<int>(std::round(-lo / s)), 0, 15) - 8);
        for (int64_t c = 0; c < g; ++c) {
          ASSERT_NEAR(deq[n * 256 + group * g + c], v[c], 0.5f * s + 0.02f * s)
              << "row " << n << " k " << group * g + c;
        }
      }
    }
    // A one-signed row uses all 16 codes for its range, where the symmetric form has 8 of
    // its 15 steps on the side that is empty: its error is at most half the symmetric one's.
    const std::vector<float> sym = DequantizeWeight(
        {Scheme::kW4A16, {4, 256, group_size}, Quantize(Scheme::kW4A16, {4, 256, group_size}, w)});
    double err_asym = 0.0;
    double err_sym = 0.0;
    for (int64_t i = 256; i < 512; ++i) {
      err_asym += std::fabs(deq[i] - w[i]);
      err_sym += std::fabs(sym[i] - w[i]);
    }
    EXPECT_LT(err_asym, 0.6 * err_sym) << group_size;
  }
}

TEST(QuantizeTest, ZeroRowsGetZeroScales) {
  const std::vector<float> w(2 * 128, 0.0f);
  for (const Case& c : kCases) {
    const WeightShape shape{2, 128, c.group_size, c.zero_points};
    const std::vector<uint8_t> p = Quantize(c.scheme, shape, w);
    const std::vector<float> deq = DequantizeWeight({c.scheme, shape, p});
    for (float v : deq) ASSERT_EQ(v, 0.0f) << SchemeName(c.scheme);
    EXPECT_TRUE(ViewPacked(c.scheme, shape, p).ok());
  }
}

void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

TEST(QuantizeTest, RejectsBadInput) {
  const WeightShape shape{3, 128, 0};
  std::vector<float> w = RandomWeights(3 * 128, 4);
  for (const Case& c : kCases) {
    SCOPED_TRACE(SchemeName(c.scheme));
    const WeightShape s{3, 128, c.group_size, c.zero_points};
    std::vector<float> bad = w;
    bad[2 * 128 + 5] = std::numeric_limits<float>::quiet_NaN();
    ExpectInvalid(QuantizeWeight(c.scheme, s, DType::kF32, AsBytes(bad)).status(),
                  "row 2, column 5 is nan");
    bad = w;
    bad[17] = -std::numeric_limits<float>::infinity();
    ExpectInvalid(QuantizeWeight(c.scheme, s, DType::kF32, AsBytes(bad)).status(),
                  "row 0, column 17 is -inf");
    ExpectInvalid(
        QuantizeWeight(c.scheme, s, DType::kF32, AsBytes(w).first(w.size() * 4 - 1)).status(),
        "must be 1536 bytes, got 1535");
    ExpectInvalid(QuantizeWeight(c.scheme, s, DType::kF16, AsBytes(w)).status(),
                  "must be 768 bytes, got 1536");
  }
  // fp16 NaN source values are caught after conversion too.
  std::vector<uint16_t> halves(3 * 128, 0x3c00);
  halves[130] = 0x7e00;
  ExpectInvalid(QuantizeWeight(Scheme::kW8A16, shape, DType::kF16,
                               {reinterpret_cast<const uint8_t*>(halves.data()), halves.size() * 2})
                    .status(),
                "row 1, column 2");
  ExpectInvalid(QuantizeWeight(Scheme::kW4A16, {3, 100, 0}, DType::kF32, AsBytes(w)).status(),
                "k = 100 must be a multiple of 128 for W4A16");
  // Activation order comes with a checkpoint, never from float values.
  ExpectInvalid(
      QuantizeWeight(Scheme::kW4A16, {3, 128, 128, false, true}, DType::kF32, AsBytes(w)).status(),
      "act_order: a float weight is quantized in its own column order");

  // Finite values too large for the target.
  std::vector<float> big = w;
  big[129] = 1e5f;
  ExpectInvalid(QuantizeWeight(Scheme::kFp16, shape, DType::kF32, AsBytes(big)).status(),
                "row 1, column 1 is 100000, out of range for fp16");
  big[129] = 3.4e38f;
  ExpectInvalid(QuantizeWeight(Scheme::kBf16, shape, DType::kF32, AsBytes(big)).status(),
                "out of range for bf16");
  big[129] = 1e6f;
  ExpectInvalid(QuantizeWeight(Scheme::kW4A16, shape, DType::kF32, AsBytes(big)).status(),
                "weight row 1, group 0 has max |w| = 1e+06");
  ExpectInvalid(
      QuantizeWeight(Scheme::kW4A16, {3, 128, 0, true}, DType::kF32, AsBytes(big)).status(),
      "weight row 1, group 0 spans [");
  // The same value is fine where the scale is fp32.
  EXPECT_TRUE(QuantizeWeight(Scheme::kW8A16, shape, DType::kF32, AsBytes(big)).ok());
  EXPECT_TRUE(QuantizeWeight(Scheme::kW2A8, shape, DType::kF32, AsBytes(big)).ok());
}

}  // namespace
}  // namespace qmm
