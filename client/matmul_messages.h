// MatMul and Forward requests from host arrays, and host arrays from their responses.
#ifndef QMM_CLIENT_MATMUL_MESSAGES_H_
#define QMM_CLIENT_MATMUL_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/nd_array.h"
#include "kernels/dtype.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm {

struct MatMulResult {
  NdArray output;          // [M, N] of the requested dtype
  int64_t compute_ns = 0;  // backend time of the batch this request ran in
};

namespace client_internal {

// Fills `request` for y = x * W^T with W the weight `weight`. `output_dtype` nullopt
// means the input's dtype. INVALID_ARGUMENT when x is not f32, f16 or bf16 (the server
// checks the rest: shape, K, sizes).
absl::Status BuildMatMulRequest(std::string_view weight, const NdArray& x,
                                std::optional<DType> output_dtype, v1::MatMulRequest* request);

// Takes the output tensor out of `response`. INTERNAL when the server sent an unknown
// dtype or data whose size does not match the shape.
absl::StatusOr<MatMulResult> TakeMatMulResult(v1::MatMulResponse& response);

// Fills `request` for y = model(x), x encoded as BuildMatMulRequest encodes it.
absl::Status BuildForwardRequest(std::string_view model, const NdArray& x,
                                 std::optional<DType> output_dtype, v1::ForwardRequest* request);
// Fills `request` for y = model(token_ids); `output_dtype` nullopt: the server's (fp32).
void BuildForwardRequest(std::string_view model, std::span<const int32_t> token_ids,
                         std::optional<DType> output_dtype, v1::ForwardRequest* request);

// A ForwardResponse carries what a MatMulResponse does: decoded the same way.
absl::StatusOr<MatMulResult> TakeForwardResult(v1::ForwardResponse& response);

}  // namespace client_internal
}  // namespace qmm

#endif  // QMM_CLIENT_MATMUL_MESSAGES_H_
