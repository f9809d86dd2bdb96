#include "client/nd_array.h"

#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

template <typename T>
NdArray Make(ElementType type, const std::vector<T>& values) {
  NdArray a{type, {static_cast<int64_t>(values.size())}, {}};
  a.data.resize(values.size() * sizeof(T));
  std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

TEST(NdArrayTest, SizesAndNames) {
  EXPECT_EQ(ElementSize(ElementType::kU8), 1u);
  EXPECT_EQ(ElementSize(ElementType::kBF16), 2u);
  EXPECT_EQ(ElementSize(ElementType::kI32), 4u);
  EXPECT_EQ(ElementSize(ElementType::kF64), 8u);
  EXPECT_EQ(ElementTypeName(ElementType::kBF16), "bf16");
  EXPECT_EQ(ElementTypeName(ElementType::kU64), "u64");
  EXPECT_EQ(ToWireDType(ElementType::kF16), DType::kF16);
  EXPECT_EQ(ToWireDType(ElementType::kF64), std::nullopt);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(ToWireDType(FromWireDType(d)), d);
  }
}

TEST(NdArrayTest, ConvertsEveryTypeToFloat) {
  EXPECT_EQ(ToFloats(Make<int8_t>(ElementType::kI8, {-128, -3, 0, 127})),
            (std::vector<float>{-128, -3, 0, 127}));
  EXPECT_EQ(ToFloats(Make<uint8_t>(ElementType::kU8, {0, 7, 255})),
            (std::vector<float>{0, 7, 255}));
  EXPECT_EQ(ToFloats(Make<int16_t>(ElementType::kI16, {-30000, 5})),
            (std::vector<float>{-30000, 5}));
  EXPECT_EQ(ToFloats(Make<uint16_t>(ElementType::kU16, {65535})), (std::vector<float>{65535}));
  EXPECT_EQ(ToFloats(Make<int32_t>(ElementType::kI32, {-7, 1 << 20})),
            (std::vector<float>{-7, 1 << 20}));
  EXPECT_EQ(ToFloats(Make<uint32_t>(ElementType::kU32, {3})), (std::vector<float>{3}));
  EXPECT_EQ(ToFloats(Make<int64_t>(ElementType::kI64, {-9})), (std::vector<float>{-9}));
  EXPECT_EQ(ToFloats(Make<uint64_t>(ElementType::kU64, {11})), (std::vector<float>{11}));
  EXPECT_EQ(ToFloats(Make<double>(ElementType::kF64, {0.1, -2.5})),
            (std::vector<float>{0.1f, -2.5f}));
  EXPECT_EQ(ToFloats(Make<float>(ElementType::kF32, {1.25f, -3.5f})),
            (std::vector<float>{1.25f, -3.5f}));
  // fp16 0x3c00 = 1, 0xc000 = -2; bf16 0x3f80 = 1, 0x4040 = 3.
  EXPECT_EQ(ToFloats(Make<uint16_t>(ElementType::kF16, {0x3c00, 0xc000})),
            (std::vector<float>{1, -2}));
  EXPECT_EQ(ToFloats(Make<uint16_t>(ElementType::kBF16, {0x3f80, 0x4040})),
            (std::vector<float>{1, 3}));
}

TEST(NdArrayTest, FromFloatsRoundsToTheWireDtype) {
  const std::vector<float> values = {1.0f, 1.0f + 0x1p-12f, -0.333333f, 65504.0f};
  const NdArray f32 = FromFloats(DType::kF32, {2, 2}, values);
  EXPECT_EQ(f32.type, ElementType::kF32);
  EXPECT_EQ(ToFloats(f32), values);
  const NdArray f16 = FromFloats(DType::kF16, {2, 2}, values);
  EXPECT_EQ(f16.type, ElementType::kF16);
  EXPECT_EQ(f16.data.size(), 8u);
  const std::vector<float> back = ToFloats(f16);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f);  // 2^-12 is below half an fp16 ulp at 1
  EXPECT_NEAR(back[2], -0.333333f, 1e-3);
  EXPECT_EQ(back[3], 65504.0f);
  const NdArray bf16 = FromFloats(DType::kBF16, {4}, values);
  EXPECT_EQ(bf16.type, ElementType::kBF16);
  EXPECT_EQ(ToFloats(bf16)[3], 65536.0f);
}

TEST(NdArrayTest, CheckedElementCount) {
  EXPECT_EQ(*CheckedElementCount({}, 4), 1);
  EXPECT_EQ(*CheckedElementCount({3, 0, 5}, 4), 0);
  EXPECT_EQ(*CheckedElementCount({3, 5, 7}, 8), 105);
  EXPECT_THAT(CheckedElementCount({2, -1}, 1).status().message(), HasSubstr("dimension 1"));
  EXPECT_THAT(CheckedElementCount({int64_t{1} << 32, int64_t{1} << 32}, 1).status().message(),
              HasSubstr("element count overflows"));
  EXPECT_THAT(CheckedElementCount({int64_t{1} << 62}, 4).status().message(),
              HasSubstr("byte count overflows"));
  NdArray a{ElementType::kF32, {2, 3, 4}, {}};
  EXPECT_EQ(a.NumElements(), 24);
}

}  // namespace
}  // namespace qmm
