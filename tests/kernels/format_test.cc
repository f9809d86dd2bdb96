#include "kernels/format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

absl::Status Invalid(Scheme s, int64_t n, int64_t k, int32_t group_size = 0) {
  return ValidateShape(s, WeightShape{n, k, group_size});
}

void ExpectInvalid(const absl::Status& status, const std::string& message_part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message_part));
}

TEST(FormatTest, NamesAndAlignments) {
  EXPECT_EQ(SchemeName(Scheme::kFp16), "FP16");
  EXPECT_EQ(SchemeName(Scheme::kBf16), "BF16");
  EXPECT_EQ(SchemeName(Scheme::kW8A16), "W8A16");
  EXPECT_EQ(SchemeName(Scheme::kW4A16), "W4A16");
  EXPECT_EQ(SchemeName(Scheme::kW2A8), "W2A8");
  EXPECT_EQ(KAlignment(Scheme::kFp16), 8);
  EXPECT_EQ(KAlignment(Scheme::kBf16), 8);
  EXPECT_EQ(KAlignment(Scheme::kW8A16), 64);
  EXPECT_EQ(KAlignment(Scheme::kW4A16), 128);
  EXPECT_EQ(KAlignment(Scheme::kW2A8), 128);
}

TEST(FormatTest, AcceptsSmallestAndLargestShapes) {
  for (Scheme s : kAllSchemes) {
    EXPECT_TRUE(Invalid(s, 1, KAlignment(s)).ok()) << SchemeName(s);
    EXPECT_TRUE(Invalid(s, kMaxDim, kMaxElements / kMaxDim).ok()) << SchemeName(s);
    EXPECT_TRUE(Invalid(s, kMaxElements / kMaxDim, kMaxDim).ok()) << SchemeName(s);
    EXPECT_TRUE(Invalid(s, 3, 5 * KAlignment(s)).ok()) << SchemeName(s);
  }
  EXPECT_TRUE(Invalid(Scheme::kW4A16, 3, 256, 128).ok());
}

TEST(FormatTest, RejectsBadDimensions) {
  ExpectInvalid(Invalid(Scheme::kFp16, 0, 8), "n = 0 must be at least 1");
  ExpectInvalid(Invalid(Scheme::kFp16, -5, 8), "n = -5 must be at least 1");
  ExpectInvalid(Invalid(Scheme::kFp16, 4, 0), "k = 0 must be at least 1");
  ExpectInvalid(Invalid(Scheme::kW8A16, 4, -64), "k = -64 must be at least 1");
  ExpectInvalid(Invalid(Scheme::kFp16, kMaxDim + 1, 8), "n = 1048577 exceeds the limit of 1048576");
  ExpectInvalid(Invalid(Scheme::kFp16, 8, kMaxDim + 8), "k = 1048584 exceeds the limit of 1048576");
  ExpectInvalid(Invalid(Scheme::kFp16, std::numeric_limits<int64_t>::max(), 8),
                "exceeds the limit");
  ExpectInvalid(Invalid(Scheme::kFp16, kMaxDim, kMaxDim),
                "n * k = 1099511627776 exceeds the limit of 17179869184");
}

TEST(FormatTest, RejectsMisalignedK) {
  ExpectInvalid(Invalid(Scheme::kW4A16, 4, 100), "k = 100 must be a multiple of 128 for W4A16");
  ExpectInvalid(Invalid(Scheme::kW4A16, 4, 192, 128),
                "k = 192 must be a multiple of 128 for W4A16");
  ExpectInvalid(Invalid(Scheme::kW2A8, 4, 64), "k = 64 must be a multiple of 128 for W2A8");
  ExpectInvalid(Invalid(Scheme::kW8A16, 4, 96), "k = 96 must be a multiple of 64 for W8A16");
  ExpectInvalid(Invalid(Scheme::kFp16, 4, 12), "k = 12 must be a multiple of 8 for FP16");
  ExpectInvalid(Invalid(Scheme::kBf16, 4, 1), "k = 1 must be a multiple of 8 for BF16");
}

TEST(FormatTest, RejectsBadGroupSizes) {
  ExpectInvalid(Invalid(Scheme::kW4A16, 4, 256, 64), "group_size = 64 is not supported for W4A16");
  ExpectInvalid(Invalid(Scheme::kW4A16, 4, 256, -128), "group_size = -128");
  ExpectInvalid(Invalid(Scheme::kW8A16, 4, 256, 128), "group_size = 128 must be 0 for W8A16");
  ExpectInvalid(Invalid(Scheme::kW2A8, 4, 256, 128), "group_size = 128 must be 0 for W2A8");
  ExpectInvalid(Invalid(Scheme::kFp16, 4, 256, 1), "group_size = 1 must be 0 for FP16");
}

TEST(FormatTest, RejectsUnknownScheme) {
  ExpectInvalid(Invalid(static_cast<Scheme>(9), 4, 256), "scheme = 9 is not a known scheme");
}

TEST(FormatTest, PackedSizes) {
  EXPECT_EQ(PackedBytes(Scheme::kFp16, {3, 16, 0}), 96);
  EXPECT_EQ(PackedBytes(Scheme::kBf16, {3, 16, 0}), 96);
  EXPECT_EQ(PackedBytes(Scheme::kW8A16, {3, 64, 0}), 3 * 64 + 3 * 4);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 128}), 3 * 128 + 3 * 2 * 2);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 0}), 3 * 128 + 3 * 2);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 128, true}), 3 * 128 + 3 * 2 * 2 + 3 * 2);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 0, true}), 3 * 128 + 3 * 2 + 3);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 128, false, true}), 3 * 128 + 3 * 2 * 2 + 4 * 256);
  EXPECT_EQ(PackedBytes(Scheme::kW4A16, {3, 256, 128, true, true}),
            3 * 128 + 3 * 2 * 2 + 3 * 2 + 4 * 256);
  EXPECT_EQ(PackedBytes(Scheme::kW2A8, {3, 256, 0}), 3 * 64 + 3 * 4);
  // The largest legal shape does not overflow.
  EXPECT_EQ(PackedBytes(Scheme::kFp16, {kMaxDim, kMaxElements / kMaxDim, 0}), 2 * kMaxElements);

  std::vector<uint8_t> bytes(PackedBytes(Scheme::kW4A16, {3, 256, 128}));
  const PackedWeight w{Scheme::kW4A16, {3, 256, 128}, bytes};
  EXPECT_EQ(w.values_bytes(), 3 * 128);
  EXPECT_EQ(w.scales(), bytes.data() + 3 * 128);
  EXPECT_EQ(w.zero_points(), nullptr);
  std::vector<uint8_t> zp_bytes(PackedBytes(Scheme::kW4A16, {3, 256, 128, true}));
  const PackedWeight zp{Scheme::kW4A16, {3, 256, 128, true}, zp_bytes};
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(zp.zero_points()), zp_bytes.data() + 3 * 128 + 12);
  EXPECT_EQ(w.permutation(), nullptr);
  EXPECT_EQ(zp.permutation(), nullptr);
  for (bool zero_points : {false, true}) {
    const WeightShape shape{3, 256, 128, zero_points, true};
    std::vector<uint8_t> act_bytes(PackedBytes(Scheme::kW4A16, shape));
    const PackedWeight act{Scheme::kW4A16, shape, act_bytes};
    EXPECT_EQ(act.permutation(), act_bytes.data() + act_bytes.size() - 4 * 256);
    const int32_t feature = 0x01020304;
    std::memcpy(act_bytes.data() + act_bytes.size() - 4, &feature, 4);
    EXPECT_EQ(act.Input(255), feature);
  }
  EXPECT_EQ(PackedWeight({Scheme::kFp16, {2, 8, 0}, bytes}).values_bytes(), 32);
  EXPECT_EQ(PackedWeight({Scheme::kW8A16, {2, 64, 0}, bytes}).values_bytes(), 128);
  EXPECT_EQ(PackedWeight({Scheme::kW2A8, {2, 128, 0}, bytes}).values_bytes(), 64);
}

TEST(FormatTest, ViewPackedChecksSize) {
  for (Scheme s : kAllSchemes) {
    const WeightShape shape{5, 2 * KAlignment(s), 0};
    std::vector<uint8_t> bytes(PackedBytes(s, shape), 0x55);  // W2A8: all codes 1 (t = 0)
    if (s == Scheme::kW8A16 || s == Scheme::kW2A8) {
      const float one = 1.0f;
      for (int n = 0; n < 5; ++n) std::memcpy(&bytes[bytes.size() - 4 * (n + 1)], &one, 4);
    }
    if (s == Scheme::kW4A16) {
      for (int n = 0; n < 5; ++n) bytes[bytes.size() - 2 * n - 1] = 0x3c;
      for (int n = 0; n < 5; ++n) bytes[bytes.size() - 2 * n - 2] = 0x00;
    }
    absl::StatusOr<PackedWeight> view = ViewPacked(s, shape, bytes);
    ASSERT_TRUE(view.ok()) << SchemeName(s) << ": " << view.status();
    EXPECT_EQ(view->bytes.data(), bytes.data());
    EXPECT_EQ(view->scheme, s);
    EXPECT_EQ(view->shape.k, shape.k);

    const std::string expected = absl::StrCat("must be ", bytes.size(), " bytes, got ");
    ExpectInvalid(ViewPacked(s, shape, std::span(bytes).first(bytes.size() - 1)).status(),
                  expected + std::to_string(bytes.size() - 1));
    bytes.push_back(0);
    ExpectInvalid(ViewPacked(s, shape, bytes).status(), expected + std::to_string(bytes.size()));
    ExpectInvalid(ViewPacked(s, shape, {}).status(), expected + "0");
  }
  ExpectInvalid(ViewPacked(Scheme::kW4A16, {1, 100, 0}, {}).status(), "k = 100");
}

TEST(FormatTest, ZeroPointsAreW4A16Only) {
  for (Scheme s : {Scheme::kFp16, Scheme::kBf16, Scheme::kW8A16, Scheme::kW2A8}) {
    ExpectInvalid(ValidateShape(s, {4, 256, 0, true}),
                  absl::StrCat("zero_points is only for W4A16, must be false for ",
                               std::string(SchemeName(s))));
  }
  EXPECT_TRUE(ValidateShape(Scheme::kW4A16, {4, 256, 0, true}).ok());
  EXPECT_TRUE(ValidateShape(Scheme::kW4A16, {4, 256, 128, true}).ok());
}

TEST(FormatTest, ViewPackedChecksZeroPoints) {
  const WeightShape shape{3, 256, 128, true};
  std::vector<uint8_t> bytes(PackedBytes(Scheme::kW4A16, shape), 0);
  const size_t zero_points = 3 * 128 + 3 * 2 * 2;
  for (int8_t z : {-8, 8, 0, 3}) {
    bytes[zero_points + 3] = static_cast<uint8_t>(z);
    EXPECT_TRUE(ViewPacked(Scheme::kW4A16, shape, bytes).ok()) << int{z};
  }
  // Row 1, group 1 (the fourth zero point) out of range either way.
  for (int8_t z : {-9, 9, 127, -128}) {
    bytes[zero_points + 3] = static_cast<uint8_t>(z);
    ExpectInvalid(ViewPacked(Scheme::kW4A16, shape, bytes).status(),
                  absl::StrCat("zero point of row 1, group 1 is ", int{z}, ", must be in [-8, 8]"));
  }
  ExpectInvalid(ViewPacked(Scheme::kW4A16, shape, std::span(bytes).first(zero_points)).status(),
                "with zero points must be " + std::to_string(bytes.size()) + " bytes");
}

TEST(FormatTest, ActOrderIsW4A16WithGroupsOnly) {
  for (Scheme s : {Scheme::kFp16, Scheme::kBf16, Scheme::kW8A16, Scheme::kW2A8}) {
    ExpectInvalid(
        ValidateShape(s, {4, 256, 0, false, true}),
        absl::StrCat("act_order is only for W4A16 with group_size 128, must be false for ",
                     std::string(SchemeName(s))));
  }
  ExpectInvalid(ValidateShape(Scheme::kW4A16, {4, 256, 0, false, true}),
                "act_order is only for W4A16 with group_size 128, must be false for W4A16 with "
                "one group per row");
  EXPECT_TRUE(ValidateShape(Scheme::kW4A16, {4, 256, 128, false, true}).ok());
  EXPECT_TRUE(ValidateShape(Scheme::kW4A16, {4, 256, 128, true, true}).ok());
}

TEST(FormatTest, ViewPackedChecksThePermutation) {
  const WeightShape shape{3, 256, 128, true, true};
  std::vector<uint8_t> bytes(PackedBytes(Scheme::kW4A16, shape), 0);
  const size_t perm = bytes.size() - 4 * 256;
  // A reversed order is as good as any.
  const auto set = [&](int64_t j, int32_t input) { std::memcpy(&bytes[perm + 4 * j], &input, 4); };
  for (int32_t j = 0; j < 256; ++j) set(j, 255 - j);
  absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW4A16, shape, bytes);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->Input(0), 255);
  EXPECT_EQ(view->Input(200), 55);
  for (const auto& [input, message] :
       {std::pair{int32_t{256}, "act_order permutation[7] = 256 is outside [0, 256)"},
        {int32_t{-1}, "act_order permutation[7] = -1 is outside [0, 256)"},
        {int32_t{255}, "act_order permutation[7] = 255 repeats permutation[0]"}}) {
    set(7, input);
    ExpectInvalid(ViewPacked(Scheme::kW4A16, shape, bytes).status(), message);
  }
  set(7, 248);
  EXPECT_TRUE(ViewPacked(Scheme::kW4A16, shape, bytes).ok());
  ExpectInvalid(ViewPacked(Scheme::kW4A16, shape, std::span(bytes).first(perm)).status(),
                "with zero points in act_order must be " + std::to_string(bytes.size()) + " bytes");
}

TEST(FormatTest, ViewPackedRejectsTernaryCodeThree) {
  const WeightShape shape{3, 256, 0};
  std::vector<uint8_t> bytes(PackedBytes(Scheme::kW2A8, shape), 0);
  // Codes 0, 1, 2 in every position are fine: 0b10'01'00'10 etc.
  for (int64_t i = 0; i < 3 * 64; ++i) bytes[i] = static_cast<uint8_t>(0x24 + (i % 3));
  ASSERT_TRUE(ViewPacked(Scheme::kW2A8, shape, bytes).ok());
  for (int j = 0; j < 4; ++j) {
    std::vector<uint8_t> bad = bytes;
    bad[64 + 17] = static_cast<uint8_t>((bad[64 + 17] & ~(3 << (2 * j))) | (3 << (2 * j)));
    ExpectInvalid(ViewPacked(Scheme::kW2A8, shape, bad).status(), "row 1, byte 17");
  }
  std::vector<uint8_t> last = bytes;
  last[3 * 64 - 1] = 0xc0;  // k = 255 of row 2
  ExpectInvalid(ViewPacked(Scheme::kW2A8, shape, last).status(), "row 2, byte 63");
}

TEST(FormatTest, ViewPackedRejectsNonFiniteScales) {
  const WeightShape shape{2, 128, 0};
  std::vector<uint8_t> w8(PackedBytes(Scheme::kW8A16, shape), 0);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(&w8[2 * 128 + 4], &inf, 4);
  ExpectInvalid(ViewPacked(Scheme::kW8A16, shape, w8).status(), "scale of row 1");

  std::vector<uint8_t> w2(PackedBytes(Scheme::kW2A8, shape), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&w2[2 * 32], &nan, 4);
  ExpectInvalid(ViewPacked(Scheme::kW2A8, shape, w2).status(), "scale of row 0");

  const WeightShape grouped{2, 256, 128};
  std::vector<uint8_t> w4(PackedBytes(Scheme::kW4A16, grouped), 0);
  const uint16_t half_nan = 0x7e00;
  std::memcpy(&w4[2 * 128 + 2 * 3], &half_nan, 2);
  ExpectInvalid(ViewPacked(Scheme::kW4A16, grouped, w4).status(), "scale of row 1, group 1");
}

}  // namespace
}  // namespace qmm
