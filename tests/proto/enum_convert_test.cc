#include "proto/enum_convert.h"

#include <gtest/gtest.h>

namespace qmm {
namespace {

TEST(EnumConvertTest, DTypesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(DTypeFromProto(DTypeToProto(d)), d);
  }
  EXPECT_EQ(DTypeToProto(DType::kF32), v1::DTYPE_FP32);
  EXPECT_EQ(DTypeToProto(DType::kF16), v1::DTYPE_FP16);
  EXPECT_EQ(DTypeToProto(DType::kBF16), v1::DTYPE_BF16);
}

TEST(EnumConvertTest, UnspecifiedAndUnknownDTypesAreRejected) {
  EXPECT_FALSE(DTypeFromProto(v1::DTYPE_UNSPECIFIED).has_value());
  EXPECT_FALSE(DTypeFromProto(static_cast<v1::DType>(4)).has_value());
  EXPECT_FALSE(DTypeFromProto(static_cast<v1::DType>(-1)).has_value());
}

TEST(EnumConvertTest, Activations) {
  EXPECT_EQ(ActivationFromProto(v1::ACTIVATION_SILU), Activation::kSilu);
  EXPECT_EQ(ActivationFromProto(v1::ACTIVATION_GELU_TANH), Activation::kGeluTanh);
  EXPECT_EQ(ActivationFromProto(v1::ACTIVATION_RELU), Activation::kRelu);
  EXPECT_EQ(ActivationFromProto(v1::ACTIVATION_RELU_SQUARED), Activation::kReluSquared);
  EXPECT_EQ(ActivationFromProto(v1::ACTIVATION_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(ActivationFromProto(static_cast<v1::Activation>(77)), std::nullopt);
}

TEST(EnumConvertTest, SchemesRoundTrip) {
  for (Scheme s : kAllSchemes) EXPECT_EQ(SchemeFromProto(SchemeToProto(s)), s);
  EXPECT_EQ(SchemeToProto(Scheme::kW2A8), v1::SCHEME_W2A8);
  EXPECT_EQ(SchemeToProto(Scheme::kW4A16), v1::SCHEME_W4A16);
  EXPECT_FALSE(SchemeFromProto(v1::SCHEME_UNSPECIFIED).has_value());
  EXPECT_FALSE(SchemeFromProto(static_cast<v1::Scheme>(6)).has_value());
}

TEST(EnumConvertTest, Int4CheckpointEncodings) {
  EXPECT_EQ(Int4CheckpointFromProto(v1::SOURCE_ENCODING_GPTQ), Int4Checkpoint::kGptq);
  EXPECT_EQ(Int4CheckpointFromProto(v1::SOURCE_ENCODING_GPTQ_V2), Int4Checkpoint::kGptqV2);
  EXPECT_EQ(Int4CheckpointFromProto(v1::SOURCE_ENCODING_PACK_QUANTIZED),
            Int4Checkpoint::kPackQuantized);
  EXPECT_EQ(Int4CheckpointFromProto(v1::SOURCE_ENCODING_AWQ), Int4Checkpoint::kAwq);
  for (v1::SourceEncoding other :
       {v1::SOURCE_ENCODING_UNSPECIFIED, v1::SOURCE_ENCODING_FLOAT, v1::SOURCE_ENCODING_PACKED,
        v1::SOURCE_ENCODING_BITNET_HF, static_cast<v1::SourceEncoding>(9)}) {
    EXPECT_FALSE(Int4CheckpointFromProto(other).has_value()) << other;
  }
}

}  // namespace
}  // namespace qmm
