#include "server/inference_service.h"

#include <string>
#include <utility>

#include "server/inference_config.h"
#include "server/inference_convert.h"
#include "server/inference_runner.h"
#include "server/inference_stream_reactor.h"
#include "server/request_clock.h"

namespace qmm {

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* rpc, const inference::ServerLiveRequest* /*request*/,
    inference::ServerLiveResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kServerLive);
  response->set_live(true);
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* rpc, const inference::ServerReadyRequest* /*request*/,
    inference::ServerReadyResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kServerReady);
  response->set_ready(InferenceServerReady(ready_, *context_.backend));
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* rpc,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kModelReady);
  absl::StatusOr<bool> ready = InferenceModelReady(request->name(), request->version(), "name",
                                                   InferenceServerReady(ready_, *context_.backend),
                                                   *context_.models, *context_.store);
  if (ready.ok()) response->set_ready(*ready);
  return FinishNow(rpc, clock, ready.status());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* rpc, const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kServerMetadata);
  FillServerMetadata(response);
  return FinishNow(rpc, clock, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* rpc, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kModelMetadata);
  absl::StatusOr<InferenceModel> target = ResolveInferenceModel(
      request->name(), request->version(), "name", *context_.models, *context_.store);
  if (target.ok()) FillModelMetadata(*target, response);
  return FinishNow(rpc, clock, target.status());
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* rpc,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kModelInfer);
  absl::StatusOr<std::unique_ptr<InferJob>> job = PrepareInfer(*request, context_);
  if (!job.ok()) return FinishNow(rpc, clock, job.status());
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  DispatchInfer(
      context_, RpcMethod::kModelInfer, ControlOf(rpc), *std::move(job), response,
      [reactor, clock](const absl::Status& status) { reactor->Finish(clock.Finish(status)); });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* rpc) {
  return new InferenceStreamReactor(context_, rpc);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* rpc, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kModelConfig);
  absl::StatusOr<InferenceModel> target = ResolveInferenceModel(
      request->name(), request->version(), "name", *context_.models, *context_.store);
  if (target.ok()) FillModelConfig(*target, ServingOf(context_), response);
  return FinishNow(rpc, clock, target.status());
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* rpc, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  const RequestClock clock(context_.metrics, RpcMethod::kModelStatistics);
  return FinishNow(rpc, clock,
                   FillModelStatistics(request->name(), request->version(), "name",
                                       *context_.models, *context_.store, response));
}

}  // namespace qmm
