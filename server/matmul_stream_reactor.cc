#include "server/matmul_stream_reactor.h"

#include <utility>

#include "server/grpc_status.h"
#include "server/matmul_runner.h"

namespace qmm {

MatMulStreamReactor::MatMulStreamReactor(const ServiceContext& context,
                                         grpc::CallbackServerContext* rpc)
    : context_(context), rpc_(rpc) {
  StartRead(&request_);
}

void MatMulStreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    Finish(rpc_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
    return;
  }
  absl::StatusOr<MatMulJob> job = PrepareMatMul(request_, *context_.store, context_.limits);
  if (!job.ok()) {
    Finish(ToGrpcStatus(job.status()));
    return;
  }
  absl::Status queued = context_.compute->Submit([this, job = *std::move(job)](int worker) {
    if (rpc_->IsCancelled()) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    absl::Status status = RunMatMul(*context_.backend, worker, job, &response_);
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    StartWrite(&response_);
  });
  if (!queued.ok()) Finish(ToGrpcStatus(queued));
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
