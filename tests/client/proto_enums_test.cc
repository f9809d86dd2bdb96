#include "client/proto_enums.h"

#include "gtest/gtest.h"

namespace qmm::client_internal {
namespace {

TEST(ProtoEnumsTest, SchemesRoundTrip) {
  for (Scheme s : kAllSchemes) {
    EXPECT_NE(SchemeToProto(s), v1::SCHEME_UNSPECIFIED);
    EXPECT_EQ(SchemeFromProto(SchemeToProto(s)), s);
  }
  EXPECT_EQ(SchemeToProto(Scheme::kW8A16), v1::SCHEME_W8A16);
  EXPECT_EQ(SchemeFromProto(v1::SCHEME_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(SchemeFromProto(static_cast<v1::Scheme>(77)), std::nullopt);
}

TEST(ProtoEnumsTest, DTypesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(DTypeFromProto(DTypeToProto(d)), d);
  }
  EXPECT_EQ(DTypeToProto(DType::kBF16), v1::DTYPE_BF16);
  EXPECT_EQ(DTypeFromProto(v1::DTYPE_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(DTypeFromProto(static_cast<v1::DType>(9)), std::nullopt);
}

}  // namespace
}  // namespace qmm::client_internal
