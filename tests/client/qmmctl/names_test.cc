#include "client/qmmctl/names.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm::ctl {
namespace {

TEST(NamesTest, SchemesRoundTripThroughTheirFlagNames) {
  for (Scheme s : kAllSchemes) {
    absl::StatusOr<Scheme> parsed = ParseScheme(SchemeFlagName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(*ParseScheme("w4a16"), Scheme::kW4A16);
  EXPECT_EQ(*ParseScheme("w2a8"), Scheme::kW2A8);
  const absl::Status bad = ParseScheme("W4A16").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("unknown scheme 'W4A16' (one of fp16"));
}

TEST(NamesTest, ProtoSchemeNames) {
  EXPECT_EQ(ProtoSchemeName(v1::SCHEME_W8A16), "w8a16");
  EXPECT_EQ(ProtoSchemeName(v1::SCHEME_UNSPECIFIED), "scheme#0");
  EXPECT_EQ(ProtoSchemeName(static_cast<v1::Scheme>(12)), "scheme#12");
}

TEST(NamesTest, DTypes) {
  EXPECT_EQ(*ParseDType("fp32"), DType::kF32);
  EXPECT_EQ(*ParseDType("fp16"), DType::kF16);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_THAT(ParseDType("f32").status().message(),
              ::testing::HasSubstr("unknown dtype 'f32' (one of fp32, fp16, bf16)"));
}

}  // namespace
}  // namespace qmm::ctl
