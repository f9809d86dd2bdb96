#include "server/model_runner.h"

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/batcher.h"
#include "server/proto_convert.h"
#include "server/validation.h"

namespace qmm {

absl::StatusOr<std::shared_ptr<const StoredModel>> CreateModel(
    const v1::CreateModelRequest& request, const WeightStore& weights, ModelStore& models,
    Backend& backend) {
  absl::StatusOr<ModelSpec> spec = CheckModel(request, weights);
  if (!spec.ok()) return spec.status();
  // Fail fast on a taken name, before the backend copies anything (Add checks again).
  if (models.Get(spec->name).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("model \"", spec->name, "\" already exists"));
  }
  const std::vector<ModelLayer> layers = BackendLayers(*spec);
  absl::StatusOr<std::unique_ptr<BackendModel>> prepared = backend.LoadModel(layers);
  if (!prepared.ok()) return prepared.status();
  return models.Add(std::make_shared<const StoredModel>(*std::move(spec), *std::move(prepared)));
}

absl::StatusOr<ForwardJob> PrepareForward(const v1::ForwardRequest& request,
                                          const ModelStore& models, const ServiceLimits& limits) {
  if (absl::Status s = CheckWeightName(request.model(), "model"); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const StoredModel>> model = models.Get(request.model());
  if (!model.ok()) return model.status();
  absl::StatusOr<ForwardSpec> spec = CheckForwardInput(request, (*model)->spec(), limits);
  if (!spec.ok()) return spec.status();
  ForwardJob job{*std::move(model), &request, *spec};
  if (spec->x_dtype == DType::kF32 && !job.model->spec().token_input) {
    const std::string& data = request.input().data();
    for (size_t i = 0; i + sizeof(float) <= data.size() && !job.beyond_fp16; i += sizeof(float)) {
      float v;
      std::memcpy(&v, data.data() + i, sizeof(float));
      job.beyond_fp16 = std::isfinite(v) && std::fabs(v) > 65504.0f;
    }
  }
  return job;
}

std::string* StartForwardResponse(const ForwardJob& job, v1::ForwardResponse* response) {
  response->Clear();
  v1::Tensor* output = response->mutable_output();
  output->set_dtype(DTypeToProto(job.spec.y_dtype));
  output->add_shape(job.spec.m);
  output->add_shape(job.model->spec().out_features);
  std::string* data = output->mutable_data();
  data->resize(job.spec.y_bytes);
  return data;
}

absl::Status RunForward(Backend& backend, int worker, const ForwardJob& job,
                        v1::ForwardResponse* response, TransferTimes* transfer) {
  std::string* data = StartForwardResponse(job, response);
  const bool tokens = job.model->spec().token_input;
  ForwardCall call{
      .model = job.model->prepared(),
      .token_ids = tokens ? job.request->token_ids().data() : nullptr,
      .x_dtype = job.spec.x_dtype,
      .x = tokens ? nullptr : job.request->input().data().data(),
      .m = job.spec.m,
      .y_dtype = job.spec.y_dtype,
      .y = data->data(),
      .transfer = transfer,
  };
  absl::StatusOr<int64_t> compute_ns = backend.Forward(worker, call);
  if (!compute_ns.ok()) {
    response->Clear();
    return compute_ns.status();
  }
  response->set_compute_ns(*compute_ns);
  return absl::OkStatus();
}

void DispatchForward(const ServiceContext& context, RpcMethod method, RequestControl control,
                     ForwardJob job, v1::ForwardResponse* response,
                     absl::AnyInvocable<void(const absl::Status&) &&> done) {
  context.batcher->Enqueue(BatchRequest{
      .forward = std::move(job),
      .forward_response = response,
      .method = method,
      .deadline = control.deadline,
      .cancelled = std::move(control.cancelled),
      .done = std::move(done),
  });
}

}  // namespace qmm
