// The bidirectional streams of the services (MatMulStream, ForwardStream, the Open
// Inference Protocol's ModelStreamInfer): one request at a time, answered in order. Read ->
// validate (gRPC thread) -> the batching queue shared with the unary calls
// (server/batcher.h) -> write -> read the next. A failed request ends the stream with its
// status, unless Traits answers it in the stream (AnswerError below); the client's
// half-close ends it OK. Each request message is counted in the metrics on its own, under
// Traits::kMethod.
//
// Traits supplies Request, Response, kMethod and
//   static absl::StatusOr<Job> Prepare(const Request&, const ServiceContext&);
//   static void Dispatch(const ServiceContext&, grpc::CallbackServerContext*, Job,
//                        Response*, absl::AnyInvocable<void(const absl::Status&) &&> done);
// and may supply
//   static void AnswerError(const absl::Status&, const Request&, Response*);
// which writes a failed request's answer (the stream then goes on to the next request).
#ifndef QMM_SERVER_ORDERED_STREAM_REACTOR_H_
#define QMM_SERVER_ORDERED_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/status/status.h"
#include "server/request_clock.h"
#include "server/service_context.h"

namespace qmm {

template <typename Traits>
concept AnswersErrorsInStream = requires(const absl::Status& status,
                                         const typename Traits::Request& request,
                                         typename Traits::Response* response) {
  Traits::AnswerError(status, request, response);
};

// Deletes itself when gRPC is done with the call (OnDone).
template <typename Traits>
class OrderedStreamReactor
    : public grpc::ServerBidiReactor<typename Traits::Request, typename Traits::Response> {
 public:
  OrderedStreamReactor(const ServiceContext& context, grpc::CallbackServerContext* rpc)
      : context_(context), rpc_(rpc), clock_(context.metrics, Traits::kMethod) {
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The end of the stream, not a request: nothing to count.
      this->Finish(rpc_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
      return;
    }
    clock_.Restart();
    auto job = Traits::Prepare(request_, context_);
    if (!job.ok()) {
      Fail(job.status());
      return;
    }
    Traits::Dispatch(context_, rpc_, *std::move(job), &response_,
                     [this](const absl::Status& status) {
                       if (!status.ok()) {
                         Fail(status);
                         return;
                       }
                       clock_.Finish(grpc::Status::OK);
                       this->StartWrite(&response_);
                     });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      // The client went away mid-stream.
      this->Finish(grpc::Status::CANCELLED);
      return;
    }
    this->StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  // Answers the request in flight with `status`: in the stream where Traits does so,
  // otherwise by ending the stream.
  void Fail(const absl::Status& status) {
    if constexpr (AnswersErrorsInStream<Traits>) {
      clock_.Finish(status);
      Traits::AnswerError(status, request_, &response_);
      this->StartWrite(&response_);
    } else {
      this->Finish(clock_.Finish(status));
    }
  }

  const ServiceContext& context_;
  grpc::CallbackServerContext* const rpc_;
  // Reused for every request; only one is in flight at a time.
  typename Traits::Request request_;
  typename Traits::Response response_;
  // Times the request in flight.
  RequestClock clock_;
};

}  // namespace qmm

#endif  // QMM_SERVER_ORDERED_STREAM_REACTOR_H_
