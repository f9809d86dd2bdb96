#include "client/grpc_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm::client_internal {
namespace {

TEST(FromGrpcStatusTest, KeepsEveryCodeAndTheMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s =
        FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "weight 'w' x"));
    EXPECT_EQ(static_cast<int>(s.code()), code);
    EXPECT_EQ(s.message(), "weight 'w' x");
  }
  const absl::Status not_found = FromGrpcStatus(grpc::Status(grpc::NOT_FOUND, "no weight 'a'"));
  EXPECT_EQ(not_found.ToString(), "NOT_FOUND: no weight 'a'");
}

TEST(FromGrpcStatusTest, UnknownCodesBecomeUnknown) {
  // 20: past the last code (16) yet a valid value of grpc::StatusCode, whose values span
  // 0..31; 42 would be undefined behaviour in grpc::Status itself (UBSan says so).
  const absl::Status s = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("gRPC code 20: odd"));
}

}  // namespace
}  // namespace qmm::client_internal
