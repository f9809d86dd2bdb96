#include "kernels/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace qmm {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// The value of a finite binary16 pattern, computed from the IEEE definition in double.
double HalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeName(DType::kF32), "fp32");
  EXPECT_EQ(DTypeName(DType::kF16), "fp16");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
}

TEST(HalfTest, EveryPatternDecodesToItsIeeeValue) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    const int exponent = (h >> 10) & 0x1f;
    if (exponent == 0x1f && (h & 0x3ff) != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      // The payload sits in the top mantissa bits.
      ASSERT_EQ((Bits(f) >> 13) & 0x3ff, h & 0x3ffu) << std::hex << h;
    } else if (exponent == 0x1f) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else {
      ASSERT_EQ(static_cast<double>(f), HalfValue(h)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(HalfTest, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint16_t back = FloatToHalf(HalfToFloat(h));
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
      // NaN stays NaN with its sign and payload; a signalling NaN comes back quiet.
      ASSERT_EQ(back, h | 0x200) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7bff);  // just below the midpoint
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);   // midpoint: ties to even = Inf
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 units: even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  // A NaN whose payload lives only in the low bits must not turn into Inf.
  EXPECT_NE(FloatToHalf(std::bit_cast<float>(0x7f800001u)) & 0x3ff, 0);
}

// Nearest binary16 to f by search over all finite halves, ties to the even pattern.
uint16_t NearestHalf(float f) {
  const double v = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (v >= 65520.0) return sign | 0x7c00;
  // Positive finite halves are ordered like their bit patterns.
  uint16_t lo = 0;
  uint16_t hi = 0x7bff;
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    (HalfValue(mid) <= v ? lo : hi) = mid;
  }
  const double d_lo = v - HalfValue(lo);
  const double d_hi = HalfValue(hi) - v;
  uint16_t best;
  if (d_lo < d_hi) {
    best = lo;
  } else if (d_hi < d_lo) {
    best = hi;
  } else {
    best = (lo & 1) ? hi : lo;
  }
  if (HalfValue(hi) <= v) best = hi;
  return sign | best;
}

TEST(HalfTest, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = std::ldexp(mantissa(rng), exponent(rng));
    if (i % 2) f = -f;
    ASSERT_EQ(FloatToHalf(f), NearestHalf(f)) << f;
  }
}

TEST(HalfTest, EveryMidpointAndItsNeighbours) {
  // The exact midpoints between adjacent halves are floats; they and the floats right
  // beside them exercise every rounding decision.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float mid = static_cast<float>((HalfValue(h) + HalfValue(h + 1)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      ASSERT_EQ(FloatToHalf(f), NearestHalf(f)) << f;
      ASSERT_EQ(FloatToHalf(-f), NearestHalf(-f)) << f;
    }
  }
}

TEST(Bf16Test, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = Bf16ToFloat(b);
    ASSERT_EQ(Bits(f), i << 16);
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    ASSERT_EQ(FloatToBf16(f), nan ? (b | 0x40) : b) << std::hex << b;
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to Inf
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie
  // A NaN with payload only in the dropped bits stays NaN.
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0xff800001u)), 0xffc0);

  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng() & 0xfeffffffu;  // exponent below 255: finite
    const float f = std::bit_cast<float>(u);
    const uint16_t down = static_cast<uint16_t>(u >> 16);
    const double d_down = std::fabs(static_cast<double>(f) - Bf16ToFloat(down));
    const double d_up = std::fabs(Bf16ToFloat(down + 1) - static_cast<double>(f));
    const uint16_t expected =
        d_down < d_up ? down : (d_up < d_down ? down + 1 : ((down & 1) ? down + 1 : down));
    ASSERT_EQ(FloatToBf16(f), expected) << std::hex << u;
  }
}

TEST(ConvertTest, BuffersRoundTripThroughEveryDType) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> src(1001);
  for (float& v : src) v = dist(rng);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> packed(src.size() * DTypeSize(d));
    FromFloat(d, src.data(), src.size(), packed.data());
    std::vector<float> back(src.size(), std::numeric_limits<float>::quiet_NaN());
    ToFloat(d, packed.data(), src.size(), back.data());
    for (size_t i = 0; i < src.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, packed.data() + 2 * i, 2);
      switch (d) {
        case DType::kF32:
          ASSERT_EQ(back[i], src[i]);
          break;
        case DType::kF16:
          ASSERT_EQ(bits, FloatToHalf(src[i]));
          ASSERT_EQ(back[i], HalfToFloat(bits));
          break;
        case DType::kBF16:
          ASSERT_EQ(bits, FloatToBf16(src[i]));
          ASSERT_EQ(back[i], Bf16ToFloat(bits));
          break;
      }
    }
  }
  // Little-endian on the wire: 1.0 in fp16 is 00 3c.
  const float one = 1.0f;
  uint8_t bytes[2];
  FromFloat(DType::kF16, &one, 1, bytes);
  EXPECT_EQ(bytes[0], 0x00);
  EXPECT_EQ(bytes[1], 0x3c);
}

}  // namespace
}  // namespace qmm
