#include "server/service.h"

#include <utility>

#include "kernels/format.h"
#include "server/grpc_status.h"
#include "server/matmul_runner.h"
#include "server/matmul_stream_reactor.h"
#include "server/proto_convert.h"
#include "server/upload_reactor.h"
#include "server/validation.h"

namespace qmm {
namespace {

// Finishes a unary call at once, on the gRPC thread (for cheap metadata calls).
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* rpc, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerReadReactor<v1::UploadWeightRequest>* QmmService::UploadWeight(
    grpc::CallbackServerContext* rpc, v1::UploadWeightResponse* response) {
  return new UploadReactor(context_, rpc, response);
}

grpc::ServerUnaryReactor* QmmService::GetWeight(grpc::CallbackServerContext* rpc,
                                                const v1::GetWeightRequest* request,
                                                v1::WeightInfo* response) {
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, s);
  }
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = context_.store->Get(request->name());
  if (weight.ok()) FillWeightInfo(**weight, response);
  return FinishNow(rpc, weight.status());
}

grpc::ServerUnaryReactor* QmmService::ListWeights(grpc::CallbackServerContext* rpc,
                                                  const v1::ListWeightsRequest* /*request*/,
                                                  v1::ListWeightsResponse* response) {
  for (const std::shared_ptr<const StoredWeight>& weight : context_.store->List()) {
    FillWeightInfo(*weight, response->add_weights());
  }
  return FinishNow(rpc, absl::OkStatus());
}

grpc::ServerUnaryReactor* QmmService::DeleteWeight(grpc::CallbackServerContext* rpc,
                                                   const v1::DeleteWeightRequest* request,
                                                   v1::DeleteWeightResponse* /*response*/) {
  if (absl::Status s = CheckWeightName(request->name(), "name"); !s.ok()) {
    return FinishNow(rpc, s);
  }
  return FinishNow(rpc, context_.store->Delete(request->name()));
}

grpc::ServerUnaryReactor* QmmService::ServerInfo(grpc::CallbackServerContext* rpc,
                                                 const v1::ServerInfoRequest* /*request*/,
                                                 v1::ServerInfoResponse* response) {
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
  return FinishNow(rpc, absl::OkStatus());
}

grpc::ServerUnaryReactor* QmmService::MatMul(grpc::CallbackServerContext* rpc,
                                             const v1::MatMulRequest* request,
                                             v1::MatMulResponse* response) {
  absl::StatusOr<MatMulJob> job = PrepareMatMul(*request, *context_.store, context_.limits);
  if (!job.ok()) return FinishNow(rpc, job.status());
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  Backend* backend = context_.backend;
  absl::Status queued = context_.compute->Submit(
      [rpc, reactor, backend, response, job = *std::move(job)](int worker) {
        if (rpc->IsCancelled()) {
          reactor->Finish(grpc::Status::CANCELLED);
          return;
        }
        reactor->Finish(ToGrpcStatus(RunMatMul(*backend, worker, job, response)));
      });
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse>* QmmService::MatMulStream(
    grpc::CallbackServerContext* rpc) {
  return new MatMulStreamReactor(context_, rpc);
}

}  // namespace qmm
