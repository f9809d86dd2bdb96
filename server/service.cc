#include "server/service.h"

#include <utility>

#include "kernels/format.h"
#include "server/batcher.h"
#include "server/forward_stream_reactor.h"
#include "server/matmul_runner.h"
#include "server/matmul_stream_reactor.h"
#include "server/model_runner.h"
#include "server/proto_convert.h"
#include "server/request_clock.h"
#include "server/upload_reactor.h"
#include "server/validation.h"

namespace qmm {

grpc::ServerReadReactor<v1::UploadWeightRequest>* QmmService::UploadWeight(
    grpc::CallbackServerContext* rpc, v1::UploadWeightResponse* response) {
  return new UploadReactor(context_, rpc, response);
}

grpc::ServerUnaryReactor* QmmService::GetWeight(grpc::CallbackServerContext* rpc,
                                                const v1::GetWeightRequest* request,
                                                v1::WeightInfo* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kGetWeight);
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = context_.store->Get(request->name());
  if (weight.ok()) FillWeightInfo(**weight, response);
  return FinishNow(rpc, clock, weight.status());
}

grpc::ServerUnaryReactor* QmmService::ListWeights(grpc::CallbackServerContext* rpc,
                                                  const v1::ListWeightsRequest* /*request*/,
                                                  v1::ListWeightsResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kListWeights);
  for (const std::shared_ptr<const StoredWeight>& weight : context_.store->List()) {
    FillWeightInfo(*weight, response->add_weights());
  }
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* QmmService::DeleteWeight(grpc::CallbackServerContext* rpc,
                                                   const v1::DeleteWeightRequest* request,
                                                   v1::DeleteWeightResponse* /*response*/) {
  const RequestClock clock(context_.metrics, RpcMethod::kDeleteWeight);
  if (absl::Status s = context_.access->CheckAdmin(*rpc, "DeleteWeight"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  // Through the model store: a weight a model uses is refused (FAILED_PRECONDITION).
  absl::Status deleted = context_.models->DeleteWeight(request->name());
  if (deleted.ok()) context_.metrics->ForgetWeight(request->name());
  return FinishNow(rpc, clock, deleted);
}

grpc::ServerUnaryReactor* QmmService::ServerInfo(grpc::CallbackServerContext* rpc,
                                                 const v1::ServerInfoRequest* /*request*/,
                                                 v1::ServerInfoResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kServerInfo);
  response->set_version(QMM_VERSION);
  response->set_backend(std::string(context_.backend->name()));
  response->set_device_name(context_.backend->device_name());
  response->set_memory_used_bytes(context_.store->used_bytes());
  response->set_memory_limit_bytes(context_.store->limit_bytes());
  for (Scheme scheme : kAllSchemes) response->add_schemes(SchemeToProto(scheme));
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(context_.limits.max_message_bytes);
  limits->set_max_chunk_bytes(kMaxChunkBytes);
  limits->set_max_dim(kMaxDim);
  limits->set_max_rows(context_.limits.max_rows);
  limits->set_max_name_length(kMaxNameLength);
  response->set_weights(context_.store->size());
  context_.batcher->FillStats(response->mutable_batching());
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* QmmService::MatMul(grpc::CallbackServerContext* rpc,
                                             const v1::MatMulRequest* request,
                                             v1::MatMulResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kMatMul);
  absl::StatusOr<MatMulJob> job = PrepareMatMul(*request, *context_.store, context_.limits);
  if (!job.ok()) return FinishNow(rpc, clock, job.status());
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  DispatchMatMul(
      context_, RpcMethod::kMatMul, ControlOf(rpc), *std::move(job), response,
      [reactor, clock](const absl::Status& status) { reactor->Finish(clock.Finish(status)); });
  return reactor;
}

grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse>* QmmService::MatMulStream(
    grpc::CallbackServerContext* rpc) {
  return new MatMulStreamReactor(context_, rpc);
}

grpc::ServerUnaryReactor* QmmService::CreateModel(grpc::CallbackServerContext* rpc,
                                                  const v1::CreateModelRequest* request,
                                                  v1::ModelInfo* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kCreateModel);
  if (absl::Status s = context_.access->CheckAdmin(*rpc, "CreateModel"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  // The backend copies the model's parameters to the device: off the gRPC thread.
  absl::Status submitted =
      context_.loader->Submit([this, request, response, reactor, clock](int /*worker*/) {
        absl::StatusOr<std::shared_ptr<const StoredModel>> model =
            qmm::CreateModel(*request, *context_.store, *context_.models, *context_.backend);
        if (model.ok()) FillModelInfo((*model)->spec(), /*with_params=*/false, response);
        reactor->Finish(clock.Finish(model.status()));
      });
  if (!submitted.ok()) reactor->Finish(clock.Finish(submitted));
  return reactor;
}

grpc::ServerUnaryReactor* QmmService::GetModel(grpc::CallbackServerContext* rpc,
                                               const v1::GetModelRequest* request,
                                               v1::ModelInfo* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kGetModel);
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  absl::StatusOr<std::shared_ptr<const StoredModel>> model = context_.models->Get(request->name());
  if (model.ok()) FillModelInfo((*model)->spec(), /*with_params=*/true, response);
  return FinishNow(rpc, clock, model.status());
}

grpc::ServerUnaryReactor* QmmService::ListModels(grpc::CallbackServerContext* rpc,
                                                 const v1::ListModelsRequest* /*request*/,
                                                 v1::ListModelsResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kListModels);
  for (const std::shared_ptr<const StoredModel>& model : context_.models->List()) {
    FillModelInfo(model->spec(), /*with_params=*/false, response->add_models());
  }
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* QmmService::DeleteModel(grpc::CallbackServerContext* rpc,
                                                  const v1::DeleteModelRequest* request,
                                                  v1::DeleteModelResponse* /*response*/) {
  const RequestClock clock(context_.metrics, RpcMethod::kDeleteModel);
  if (absl::Status s = context_.access->CheckAdmin(*rpc, "DeleteModel"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, clock, s);
  }
  return FinishNow(rpc, clock, context_.models->Delete(request->name()));
}

grpc::ServerUnaryReactor* QmmService::Forward(grpc::CallbackServerContext* rpc,
                                              const v1::ForwardRequest* request,
                                              v1::ForwardResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kForward);
  absl::StatusOr<ForwardJob> job = PrepareForward(*request, *context_.models, context_.limits);
  if (!job.ok()) return FinishNow(rpc, clock, job.status());
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  DispatchForward(
      context_, RpcMethod::kForward, ControlOf(rpc), *std::move(job), response,
      [reactor, clock](const absl::Status& status) { reactor->Finish(clock.Finish(status)); });
  return reactor;
}

grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse>* QmmService::ForwardStream(
    grpc::CallbackServerContext* rpc) {
  return new ForwardStreamReactor(context_, rpc);
}

}  // namespace qmm
