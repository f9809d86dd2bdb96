#include "client/matmul_messages.h"

#include "absl/strings/str_cat.h"
#include "proto/enum_convert.h"

namespace qmm::client_internal {

absl::Status BuildMatMulRequest(std::string_view weight, const NdArray& x,
                                std::optional<DType> output_dtype, v1::MatMulRequest* request) {
  const std::optional<DType> dtype = ToWireDType(x.type);
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat("activations of type ",
                                                   std::string(ElementTypeName(x.type)),
                                                   " cannot be sent; convert to f32, f16 or bf16"));
  }
  request->set_weight(std::string(weight));
  v1::Tensor* input = request->mutable_input();
  input->set_dtype(DTypeToProto(*dtype));
  input->clear_shape();
  for (int64_t d : x.shape) input->add_shape(d);
  input->set_data(x.data.data(), x.data.size());
  request->set_output_dtype(output_dtype ? DTypeToProto(*output_dtype) : v1::DTYPE_UNSPECIFIED);
  return absl::OkStatus();
}

absl::StatusOr<MatMulResult> TakeMatMulResult(v1::MatMulResponse& response) {
  const v1::Tensor& output = response.output();
  const std::optional<DType> dtype = DTypeFromProto(output.dtype());
  if (!dtype) {
    return absl::InternalError(
        absl::StrCat("the server sent an output of unknown dtype ", output.dtype()));
  }
  MatMulResult result;
  result.compute_ns = response.compute_ns();
  result.output.type = FromWireDType(*dtype);
  result.output.shape.assign(output.shape().begin(), output.shape().end());
  absl::StatusOr<int64_t> count = CheckedElementCount(result.output.shape, DTypeSize(*dtype));
  if (!count.ok()) {
    return absl::InternalError(
        absl::StrCat("the server sent an invalid output shape: ", count.status().message()));
  }
  const uint64_t expected = static_cast<uint64_t>(*count) * DTypeSize(*dtype);
  if (output.data().size() != expected) {
    return absl::InternalError(absl::StrCat("the server sent ", output.data().size(),
                                            " bytes of output where its shape needs ", expected));
  }
  result.output.data.assign(output.data().begin(), output.data().end());
  return result;
}

absl::Status BuildForwardRequest(std::string_view model, const NdArray& x,
                                 std::optional<DType> output_dtype, v1::ForwardRequest* request) {
  v1::MatMulRequest matmul;
  if (absl::Status status = BuildMatMulRequest(model, x, output_dtype, &matmul); !status.ok()) {
    return status;
  }
  request->set_model(std::string(model));
  request->mutable_input()->Swap(matmul.mutable_input());
  request->set_output_dtype(matmul.output_dtype());
  return absl::OkStatus();
}

void BuildForwardRequest(std::string_view model, std::span<const int32_t> token_ids,
                         std::optional<DType> output_dtype, v1::ForwardRequest* request) {
  request->set_model(std::string(model));
  request->mutable_token_ids()->Add(token_ids.begin(), token_ids.end());
  request->set_output_dtype(output_dtype ? DTypeToProto(*output_dtype) : v1::DTYPE_UNSPECIFIED);
}

absl::StatusOr<MatMulResult> TakeForwardResult(v1::ForwardResponse& response) {
  v1::MatMulResponse as_matmul;
  as_matmul.mutable_output()->Swap(response.mutable_output());
  as_matmul.set_compute_ns(response.compute_ns());
  return TakeMatMulResult(as_matmul);
}

}  // namespace qmm::client_internal
