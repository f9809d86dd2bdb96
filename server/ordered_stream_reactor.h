// The bidirectional streams of the services (MatMulStream, ForwardStream, the Open
// Inference Protocol's ModelStreamInfer): requests answered in order, up to
// kMaxStreamInFlight of them in flight at once, so that a client that sends ahead gets its
// requests batched together. Read -> validate -> the batching queue shared with the unary
// calls (server/batcher.h) -> written in arrival order once it and every earlier one are
// answered. A failed request ends the stream with its status once the answers before it
// are written, unless Traits answers it in the stream (AnswerError below); the client's
// half-close ends it OK once every answer is written. Each request message is counted in
// the metrics on its own, under Traits::kMethod.
//
// Traits supplies Request, Response, kMethod and
//   static absl::StatusOr<Job> Prepare(const Request&, const ServiceContext&);
//   static void Dispatch(const ServiceContext&, grpc::CallbackServerContext*, Job,
//                        Response*, absl::AnyInvocable<void(const absl::Status&) &&> done);
// and may supply
//   static void AnswerError(const absl::Status&, const Request&, Response*);
// which writes a failed request's answer (the stream then goes on).
//
// Threads: gRPC's reactions and the requests' `done` (on batch workers) run concurrently;
// one mutex guards the in-flight requests and the stream's state. Dispatch runs outside
// it, since `done` may run on the calling thread.
#ifndef QMM_SERVER_ORDERED_STREAM_REACTOR_H_
#define QMM_SERVER_ORDERED_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc_status.h"
#include "server/planned_bidi_reactor.h"
#include "server/request_clock.h"
#include "server/service_context.h"

namespace qmm {

// Requests one stream may have read and not yet answered. Each holds its message (up to
// max_message_bytes), so the bound keeps a stream's memory to a few messages while
// leaving a client room to fill a batch by itself.
inline constexpr size_t kMaxStreamInFlight = 16;

template <typename Traits>
concept AnswersErrorsInStream = requires(const absl::Status& status,
                                         const typename Traits::Request& request,
                                         typename Traits::Response* response) {
  Traits::AnswerError(status, request, response);
};

// Deletes itself when gRPC is done with the call (OnDone).
template <typename Traits>
class OrderedStreamReactor
    : public PlannedBidiReactor<OrderedStreamReactor<Traits>, typename Traits::Request,
                                typename Traits::Response> {
  using Base = PlannedBidiReactor<OrderedStreamReactor<Traits>, typename Traits::Request,
                                  typename Traits::Response>;
  friend Base;
  using Base::incoming_;
  using Base::mu_;
  using Base::Perform;
  using Base::starting_;
  using typename Base::Actions;

 public:
  OrderedStreamReactor(const ServiceContext& context, grpc::CallbackServerContext* rpc)
      : context_(context), rpc_(rpc) {
    reading_ = true;
    this->StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    Slot* slot = nullptr;
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok || closing_) {
        // The end of the stream (not a request: nothing to count), or one that is
        // already ending.
        read_closed_ = true;
        if (!ok && rpc_->IsCancelled()) Close(grpc::Status::CANCELLED);
      } else {
        slot = &slots_.emplace_back(context_.metrics);
        slot->request.Swap(&incoming_);
        ++pending_;
      }
      actions = Plan();
    }
    Perform(this, actions);
    // A slot's request keeps the stream from finishing until it is answered, so `this`
    // lives on here.
    if (slot == nullptr) return;
    auto job = Traits::Prepare(slot->request, context_);
    if (!job.ok()) {
      Answered(*slot, job.status());
      return;
    }
    Traits::Dispatch(context_, rpc_, *std::move(job), &slot->response,
                     [this, slot](const absl::Status& status) { Answered(*slot, status); });
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) {
        slots_.pop_front();
      } else {
        Close(grpc::Status::CANCELLED);  // the client went away mid-stream
      }
      actions = Plan();
    }
    Perform(this, actions);
  }

  void OnDone() override { delete this; }

 private:
  struct Slot {
    explicit Slot(Metrics* metrics) : clock(metrics, Traits::kMethod) {}
    typename Traits::Request request;
    typename Traits::Response response;
    RequestClock clock;  // from the read
    bool answered = false;
    absl::Status status;
  };

  // A request's outcome, from its `done` or from a failed Prepare.
  void Answered(Slot& slot, const absl::Status& status) {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      slot.answered = true;
      slot.status = status;
      slot.clock.Finish(status);
      if constexpr (AnswersErrorsInStream<Traits>) {
        if (!status.ok()) Traits::AnswerError(status, slot.request, &slot.response);
        slot.status = absl::OkStatus();
      }
      actions = Plan();
    }
    Perform(this, actions);
  }

  // The next steps: read while the window has room and the stream goes on; write the
  // oldest answer once it is there (a failed request ends the stream instead); finish
  // once nothing is pending.
  Actions Plan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions actions;
    if (!reading_ && !read_closed_ && !closing_ && slots_.size() < kMaxStreamInFlight) {
      reading_ = true;
      actions.read = true;
    }
    if (!writing_ && !closing_ && !slots_.empty() && slots_.front().answered) {
      if (slots_.front().status.ok()) {
        writing_ = true;
        actions.write = &slots_.front().response;
      } else {
        Close(ToGrpcStatus(slots_.front().status));
      }
    }
    if (actions.read || actions.write != nullptr) {
      ++starting_;
      return actions;
    }
    // Once every `done` has run and no thread is about to start a read or a write,
    // nothing touches the stream or the slots any more.
    if (!finished_ && !writing_ && pending_ == 0 && starting_ == 0 &&
        (closing_ || (read_closed_ && slots_.empty()))) {
      finished_ = true;
      actions.finish = closing_ ? final_status_ : grpc::Status::OK;
    }
    return actions;
  }

  // No more reads or writes; the stream finishes with `status` once nothing is pending.
  void Close(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closing_) return;
    closing_ = true;
    final_status_ = status;
  }

  const ServiceContext& context_;
  grpc::CallbackServerContext* const rpc_;
  // In arrival order; references stay valid as slots are added at the back and written
  // ones removed at the front.
  std::deque<Slot> slots_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;  // slots whose request is not answered yet
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace qmm

#endif  // QMM_SERVER_ORDERED_STREAM_REACTOR_H_
