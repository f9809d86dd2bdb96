#include "client/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace qmm::client_internal {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < static_cast<int>(absl::StatusCode::kCancelled) ||
      code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(absl::StrCat("gRPC code ", code, ": ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace qmm::client_internal
