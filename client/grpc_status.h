// grpc::Status -> absl::Status, for every result the client hands back.
#ifndef QMM_CLIENT_GRPC_STATUS_H_
#define QMM_CLIENT_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace qmm::client_internal {

// The same code and message (the two code spaces share their numbering); codes outside it
// become UNKNOWN with the original number in the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace qmm::client_internal

#endif  // QMM_CLIENT_GRPC_STATUS_H_
