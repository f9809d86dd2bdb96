// What the batching queue needs to know of a request's caller to drop the request before
// it launches (server/batcher.h): the deadline, and whether the caller has gone.
#ifndef QMM_SERVER_REQUEST_CONTROL_H_
#define QMM_SERVER_REQUEST_CONTROL_H_

#include <grpcpp/grpcpp.h>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

namespace qmm {

struct RequestControl {
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller has cancelled; empty: never cancelled.
  absl::AnyInvocable<bool() const> cancelled;
};

// A gRPC call's deadline and cancellation; `rpc` must outlive the request.
inline RequestControl ControlOf(grpc::CallbackServerContext* rpc) {
  return {.deadline = absl::FromChrono(rpc->deadline()),
          .cancelled = [rpc] { return rpc->IsCancelled(); }};
}

}  // namespace qmm

#endif  // QMM_SERVER_REQUEST_CONTROL_H_
