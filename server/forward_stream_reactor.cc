#include "server/forward_stream_reactor.h"

#include <utility>

#include "server/model_runner.h"

namespace qmm {

ForwardStreamReactor::ForwardStreamReactor(const ServiceContext& context,
                                           grpc::CallbackServerContext* rpc)
    : context_(context), rpc_(rpc), clock_(context.metrics, RpcMethod::kForwardStream) {
  StartRead(&request_);
}

void ForwardStreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The end of the stream, not a request: nothing to count.
    Finish(rpc_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
    return;
  }
  clock_.Restart();
  absl::StatusOr<ForwardJob> job = PrepareForward(request_, *context_.models, context_.limits);
  if (!job.ok()) {
    Finish(clock_.Finish(job.status()));
    return;
  }
  DispatchForward(context_, RpcMethod::kForwardStream, rpc_, *std::move(job), &response_,
                  [this](const absl::Status& status) {
                    if (!status.ok()) {
                      Finish(clock_.Finish(status));
                      return;
                    }
                    clock_.Finish(grpc::Status::OK);
                    StartWrite(&response_);
                  });
}

void ForwardStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {
    Finish(grpc::Status::CANCELLED);
    return;
  }
  StartRead(&request_);
}

}  // namespace qmm
