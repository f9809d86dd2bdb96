#include "server/matmul_stream_reactor.h"

#include <utility>

#include "server/matmul_runner.h"

namespace qmm {

MatMulStreamReactor::MatMulStreamReactor(const ServiceContext& context,
                                         grpc::CallbackServerContext* rpc)
    : context_(context), rpc_(rpc), clock_(context.metrics, RpcMethod::kMatMulStream) {
  StartRead(&request_);
}

void MatMulStreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The end of the stream, not a request: nothing to count.
    Finish(rpc_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
    return;
  }
  clock_.Restart();
  absl::StatusOr<MatMulJob> job = PrepareMatMul(request_, *context_.store, context_.limits);
  if (!job.ok()) {
    Finish(clock_.Finish(job.status()));
    return;
  }
  DispatchMatMul(context_, RpcMethod::kMatMulStream, rpc_, *std::move(job), &response_,
                 [this](const absl::Status& status) {
                   if (!status.ok()) {
                     Finish(clock_.Finish(status));
                     return;
                   }
                   clock_.Finish(grpc::Status::OK);
                   StartWrite(&response_);
                 });
}

void MatMulStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {
    // The client went away mid-stream.
    Finish(grpc::Status::CANCELLED);
    return;
  }
  StartRead(&request_);
}

}  // namespace qmm
