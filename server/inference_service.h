// The Open Inference Protocol (KServe v2) service, inference.GRPCInferenceService, on the
// callback API beside qmm.v1.Qmm: the server's weights and models as inference models
// (server/inference_convert.h), ModelInfer through the same batching queues as MatMul and
// Forward. Handlers only resolve, validate and enqueue.
#ifndef QMM_SERVER_INFERENCE_SERVICE_H_
#define QMM_SERVER_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "inference/open_inference.grpc.pb.h"
#include "server/service_context.h"

namespace qmm {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // Everything `context` points to, and `ready` (whether the server takes requests; false
  // while it drains), must outlive every call this service handles.
  InferenceService(const ServiceContext& context, const std::atomic<bool>& ready)
      : context_(context), ready_(ready) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* rpc,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* rpc,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* rpc,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* rpc,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* rpc,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* rpc,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* rpc) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* rpc,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* rpc,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;

 private:
  const ServiceContext context_;
  const std::atomic<bool>& ready_;
};

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_SERVICE_H_
