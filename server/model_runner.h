// The model path shared by the RPC handlers: CreateModel (check on the gRPC thread,
// prepare on the backend, publish), and Forward, which like MatMul validates on the gRPC
// thread (PrepareForward) and computes on a batch worker (RunForward alone, or the
// batcher's gathered launch).
#ifndef QMM_SERVER_MODEL_RUNNER_H_
#define QMM_SERVER_MODEL_RUNNER_H_

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/model.h"
#include "server/model_store.h"
#include "server/request_control.h"
#include "server/service_context.h"
#include "server/weight_store.h"

namespace qmm {

// CheckModel, Backend::LoadModel (RESOURCE_EXHAUSTED when the device is full), then
// ModelStore::Add. Errors as those.
absl::StatusOr<std::shared_ptr<const StoredModel>> CreateModel(
    const v1::CreateModelRequest& request, const WeightStore& weights, ModelStore& models,
    Backend& backend);

// A validated Forward request. Holds the model (and through it its weights), so a
// concurrent delete cannot free them; the request must stay alive and unchanged until
// the job has run.
struct ForwardJob {
  std::shared_ptr<const StoredModel> model;
  const v1::ForwardRequest* request = nullptr;
  ForwardSpec spec;
  // An fp32 input holds a finite value beyond fp16's range (|x| > 65504): a backend that
  // keeps fp16 intermediates switches the whole launch to bf16 for it, which would change
  // the results of other requests in it, so such a request is never batched.
  bool beyond_fp16 = false;
};

// INVALID_ARGUMENT for a bad name or input, NOT_FOUND for an unknown model,
// RESOURCE_EXHAUSTED when the output or the intermediates would be too large.
absl::StatusOr<ForwardJob> PrepareForward(const v1::ForwardRequest& request,
                                          const ModelStore& models, const ServiceLimits& limits);

// Clears `response` and gives it the job's output tensor (dtype, shape [M, out_features])
// with its data sized to the result; returns the data, for the caller to fill.
std::string* StartForwardResponse(const ForwardJob& job, v1::ForwardResponse* response);

// Runs the job alone on `worker` and writes the whole response (cleared first);
// `transfer` as RunMatMul's.
absl::Status RunForward(Backend& backend, int worker, const ForwardJob& job,
                        v1::ForwardResponse* response, TransferTimes* transfer = nullptr);

// Hands `job` to the model's batching queue (server/batcher.h), exactly as DispatchMatMul
// does for a weight: same admission, deadlines, cancellation and metrics; `done` runs
// exactly once with the request's status. What `control` refers to, `job.request` and
// `response` must stay valid until then.
void DispatchForward(const ServiceContext& context, RpcMethod method, RequestControl control,
                     ForwardJob job, v1::ForwardResponse* response,
                     absl::AnyInvocable<void(const absl::Status&) &&> done);

}  // namespace qmm

#endif  // QMM_SERVER_MODEL_RUNNER_H_
