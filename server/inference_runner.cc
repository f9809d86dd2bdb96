#include "server/inference_runner.h"

#include <algorithm>
#include <utility>

#include "server/inference_convert.h"

namespace qmm {

absl::StatusOr<std::unique_ptr<InferJob>> PrepareInfer(const inference::ModelInferRequest& request,
                                                       const ServiceContext& context) {
  absl::StatusOr<InferenceModel> target = ResolveInferenceModel(
      request.model_name(), request.model_version(), "model_name", *context.models, *context.store);
  if (!target.ok()) return target.status();
  absl::StatusOr<absl::Duration> timeout = InferTimeout(request);
  if (!timeout.ok()) return timeout.status();
  auto job = std::make_unique<InferJob>();
  job->request = &request;
  job->deadline = absl::Now() + *timeout;
  job->forward = target->model != nullptr;
  if (job->forward) {
    if (absl::Status s =
            ToForwardRequest(request, target->model->spec(), context.limits, &job->forward_request);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<ForwardJob> prepared =
        PrepareForward(job->forward_request, *context.models, context.limits);
    if (!prepared.ok()) return prepared.status();
    job->forward_job = *std::move(prepared);
    return job;
  }
  if (absl::Status s =
          ToMatMulRequest(request, *target->weight, context.limits, &job->matmul_request);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<MatMulJob> prepared =
      PrepareMatMul(job->matmul_request, *context.store, context.limits);
  if (!prepared.ok()) return prepared.status();
  job->matmul = *std::move(prepared);
  return job;
}

void DispatchInfer(const ServiceContext& context, RpcMethod method, RequestControl control,
                   std::unique_ptr<InferJob> job, inference::ModelInferResponse* response,
                   absl::AnyInvocable<void(const absl::Status&) &&> done) {
  InferJob& j = *job;
  control.deadline = std::min(control.deadline, j.deadline);
  // The callback owns the job, so the qmm.v1 messages it points into live until the
  // batcher is done with the request.
  auto finish = [job = std::move(job), response,
                 done = std::move(done)](const absl::Status& status) mutable {
    if (status.ok()) {
      v1::Tensor& output = job->forward ? *job->forward_response.mutable_output()
                                        : *job->matmul_response.mutable_output();
      ToInferResponse(*job->request, output, response);
    }
    std::move(done)(status);
  };
  if (j.forward) {
    DispatchForward(context, method, std::move(control), std::move(j.forward_job),
                    &j.forward_response, std::move(finish));
  } else {
    DispatchMatMul(context, method, std::move(control), std::move(j.matmul), &j.matmul_response,
                   std::move(finish));
  }
}

}  // namespace qmm
