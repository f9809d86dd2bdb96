// The ModelInfer path shared by the unary and the streaming RPC of the Open Inference
// Protocol: resolve and convert on the gRPC thread (PrepareInfer), then the batching queue
// of the weight or model, shared with qmm.v1's MatMul and Forward (DispatchInfer).
#ifndef QMM_SERVER_INFERENCE_RUNNER_H_
#define QMM_SERVER_INFERENCE_RUNNER_H_

#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference/open_inference.pb.h"
#include "qmm/v1/qmm.pb.h"
#include "server/matmul_runner.h"
#include "server/metrics.h"
#include "server/model_runner.h"
#include "server/request_control.h"
#include "server/service_context.h"

namespace qmm {

// A validated ModelInfer request as the MatMul or the Forward it became, with the qmm.v1
// messages those jobs point into. Not movable: the jobs hold pointers to its members.
struct InferJob {
  InferJob() = default;
  InferJob(const InferJob&) = delete;
  InferJob& operator=(const InferJob&) = delete;

  // The client's request; it must stay alive and unchanged until the job has run.
  const inference::ModelInferRequest* request = nullptr;
  // From the request's "timeout" parameter (InferTimeout), counted from PrepareInfer.
  absl::Time deadline = absl::InfiniteFuture();
  bool forward = false;
  // forward == false.
  v1::MatMulRequest matmul_request;
  v1::MatMulResponse matmul_response;
  MatMulJob matmul;
  // forward == true.
  v1::ForwardRequest forward_request;
  v1::ForwardResponse forward_response;
  ForwardJob forward_job;
};

// Resolves request.model_name (server/inference_convert.h), converts the request and
// prepares the job as MatMul and Forward do. Errors as ResolveInferenceModel, InferTimeout,
// ToMatMulRequest / ToForwardRequest, then PrepareMatMul / PrepareForward.
absl::StatusOr<std::unique_ptr<InferJob>> PrepareInfer(const inference::ModelInferRequest& request,
                                                       const ServiceContext& context);

// Queues `job` as DispatchMatMul or DispatchForward would, dropped at the earlier of
// `control`'s deadline and the job's; when it has run, fills
// `response` (ToInferResponse) and then runs `done` with the status, exactly once. What
// `control` refers to, the request and `response` must stay valid until then.
void DispatchInfer(const ServiceContext& context, RpcMethod method, RequestControl control,
                   std::unique_ptr<InferJob> job, inference::ModelInferResponse* response,
                   absl::AnyInvocable<void(const absl::Status&) &&> done);

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_RUNNER_H_
