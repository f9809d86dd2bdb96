// The one place where absl::Status becomes grpc::Status.
#ifndef QMM_SERVER_GRPC_STATUS_H_
#define QMM_SERVER_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace qmm {

// Same code and message; codes gRPC does not know become UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace qmm

#endif  // QMM_SERVER_GRPC_STATUS_H_
