#include "client/matmul_messages.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm::client_internal {
namespace {

using ::testing::HasSubstr;

TEST(BuildMatMulRequestTest, CopiesTheTensor) {
  const NdArray x = FromFloats(DType::kF16, {2, 3}, std::vector<float>{1, -2, 3.5f, 4, 5, -6});
  v1::MatMulRequest request;
  ASSERT_TRUE(BuildMatMulRequest("w", x, DType::kBF16, &request).ok());
  EXPECT_EQ(request.weight(), "w");
  EXPECT_EQ(request.input().dtype(), v1::DTYPE_FP16);
  EXPECT_THAT(request.input().shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(request.input().data(), std::string(x.data.begin(), x.data.end()));
  EXPECT_EQ(request.output_dtype(), v1::DTYPE_BF16);

  ASSERT_TRUE(BuildMatMulRequest("w", x, std::nullopt, &request).ok());
  EXPECT_EQ(request.output_dtype(), v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(request.input().shape_size(), 2);  // replaced, not appended
}

TEST(BuildMatMulRequestTest, RejectsTypesWithoutAWireDtype) {
  NdArray x{ElementType::kF64, {1, 2}, std::vector<uint8_t>(16, 1)};
  v1::MatMulRequest request;
  const absl::Status status = BuildMatMulRequest("w", x, std::nullopt, &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("activations of type f64 cannot be sent"));
}

TEST(TakeMatMulResultTest, TakesTheOutput) {
  v1::MatMulResponse response;
  response.set_compute_ns(1234);
  response.mutable_output()->set_dtype(v1::DTYPE_FP32);
  response.mutable_output()->add_shape(1);
  response.mutable_output()->add_shape(2);
  const float values[2] = {0.5f, -7.25f};
  response.mutable_output()->set_data(values, sizeof(values));
  absl::StatusOr<MatMulResult> result = TakeMatMulResult(response);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->compute_ns, 1234);
  EXPECT_EQ(result->output.type, ElementType::kF32);
  EXPECT_EQ(result->output.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ToFloats(result->output), (std::vector<float>{0.5f, -7.25f}));
}

TEST(TakeMatMulResultTest, RejectsInconsistentOutputs) {
  v1::MatMulResponse response;
  response.mutable_output()->set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(TakeMatMulResult(response).status().message(), HasSubstr("unknown dtype"));
  response.mutable_output()->set_dtype(v1::DTYPE_BF16);
  response.mutable_output()->add_shape(3);
  response.mutable_output()->set_data("abcd");
  const absl::Status status = TakeMatMulResult(response).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("4 bytes of output where its shape needs 6"));
  response.mutable_output()->set_shape(0, -3);
  EXPECT_THAT(TakeMatMulResult(response).status().message(), HasSubstr("invalid output shape"));
}

}  // namespace
}  // namespace qmm::client_internal
