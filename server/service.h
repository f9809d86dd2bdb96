// The qmm.v1.Qmm gRPC service on the callback API. Handlers only parse, validate and
// enqueue; kernels and weight conversion run on the pools in ServiceContext.
#ifndef QMM_SERVER_SERVICE_H_
#define QMM_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "qmm/v1/qmm.grpc.pb.h"
#include "server/service_context.h"

namespace qmm {

class QmmService final : public v1::Qmm::CallbackService {
 public:
  // Everything `context` points to must outlive every call this service handles.
  explicit QmmService(const ServiceContext& context) : context_(context) {}

  grpc::ServerReadReactor<v1::UploadWeightRequest>* UploadWeight(
      grpc::CallbackServerContext* rpc, v1::UploadWeightResponse* response) override;
  grpc::ServerUnaryReactor* GetWeight(grpc::CallbackServerContext* rpc,
                                      const v1::GetWeightRequest* request,
                                      v1::WeightInfo* response) override;
  grpc::ServerUnaryReactor* ListWeights(grpc::CallbackServerContext* rpc,
                                        const v1::ListWeightsRequest* request,
                                        v1::ListWeightsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteWeight(grpc::CallbackServerContext* rpc,
                                         const v1::DeleteWeightRequest* request,
                                         v1::DeleteWeightResponse* response) override;
  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* rpc,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* rpc,
                                   const v1::MatMulRequest* request,
                                   v1::MatMulResponse* response) override;
  grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse>* MatMulStream(
      grpc::CallbackServerContext* rpc) override;

  grpc::ServerUnaryReactor* CreateModel(grpc::CallbackServerContext* rpc,
                                        const v1::CreateModelRequest* request,
                                        v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* rpc,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* rpc,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteModel(grpc::CallbackServerContext* rpc,
                                        const v1::DeleteModelRequest* request,
                                        v1::DeleteModelResponse* response) override;
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* rpc,
                                    const v1::ForwardRequest* request,
                                    v1::ForwardResponse* response) override;
  grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse>* ForwardStream(
      grpc::CallbackServerContext* rpc) override;

 private:
  const ServiceContext context_;
};

}  // namespace qmm

#endif  // QMM_SERVER_SERVICE_H_
