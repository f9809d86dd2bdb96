// The MatMul path shared by the unary and the streaming RPC: validate on the gRPC
// thread (PrepareMatMul), queue on the weight's batching queue (DispatchMatMul), compute
// on a batch worker (RunMatMul alone, or Batcher's gathered launch).
#ifndef QMM_SERVER_MATMUL_RUNNER_H_
#define QMM_SERVER_MATMUL_RUNNER_H_

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "server/request_control.h"
#include "server/service_context.h"
#include "server/validation.h"
#include "server/weight_store.h"

namespace qmm {

// A validated request. Holds the weight, so a concurrent delete cannot free it; the
// request must stay alive and unchanged until RunMatMul returns.
struct MatMulJob {
  std::shared_ptr<const StoredWeight> weight;
  const v1::MatMulRequest* request = nullptr;
  // The input rows: request->input().data(), or where the transport keeps them (which must
  // stay valid as long as the request).
  absl::string_view x;
  MatMulSpec spec;
  // The input holds a finite value beyond fp16's range (|x| > 65504). A backend whose
  // kernels take fp16 activations scales a whole launch to fit such a value, which would
  // change the results of other requests in it: such a request is never batched.
  bool beyond_fp16 = false;
};

// INVALID_ARGUMENT for a bad name or input, NOT_FOUND for an unknown weight,
// RESOURCE_EXHAUSTED when the output would not fit in one message. `beside`: the input rows
// travel beside the message (CheckMatMulInput).
absl::StatusOr<MatMulJob> PrepareMatMul(const v1::MatMulRequest& request, const WeightStore& store,
                                        const ServiceLimits& limits,
                                        const InputRows* beside = nullptr);

// Runs the job on `worker` and writes the whole response (cleared first), or, with
// `output`, the result rows there (job.spec.y_bytes) and the rest of the response (its
// output.data empty); `transfer`, when set, receives the backend's transfer times
// (MatMulCall::transfer).
absl::Status RunMatMul(Backend& backend, int worker, const MatMulJob& job,
                       v1::MatMulResponse* response, void* output = nullptr,
                       TransferTimes* transfer = nullptr);

// Clears `response` and gives it the job's output tensor (dtype, shape [M, N]); returns
// its data, empty, for the caller to fill with job.spec.y_bytes bytes (or leave empty when
// the rows go elsewhere).
std::string* StartResponse(const MatMulJob& job, v1::MatMulResponse* response);

// Hands `job` to the weight's batching queue (server/batcher.h), which runs it into
// `response`, possibly in one launch with other requests of the same weight. A request
// whose deadline passed or whose client cancelled while it waited is dropped before
// launch and counted; the queue records the queue, batch and compute metrics.
//
// `done` runs exactly once with the request's status: on a worker, or on the calling
// thread when the request could not be queued (RESOURCE_EXHAUSTED for a full queue).
// What `control` refers to, `job.request` and `response` must stay valid until then.
// `output` and `registered`: as BatchRequest's.
void DispatchMatMul(const ServiceContext& context, RpcMethod method, RequestControl control,
                    MatMulJob job, v1::MatMulResponse* response,
                    absl::AnyInvocable<void(const absl::Status&) &&> done, void* output = nullptr,
                    bool registered = false);

}  // namespace qmm

#endif  // QMM_SERVER_MATMUL_RUNNER_H_
