#include "server/unary_matmul.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/matmul_runner.h"
#include "server/request_clock.h"

namespace qmm {

struct UnaryMatMul::State {
  State(const ServiceContext& context, AsyncMatMulService* service)
      : context(context), service(service) {}

  const ServiceContext context;
  AsyncMatMulService* const service;
  absl::Mutex mu;
  // False from Shutdown on. Held shared while a call is handed to the batcher.
  bool queueing ABSL_GUARDED_BY(mu) = true;
  // Calls asked for and not yet deleted.
  int64_t calls ABSL_GUARDED_BY(mu) = 0;
};

namespace {

using State = UnaryMatMul::State;

// Calls each queue keeps asked for, so that a burst of arrivals finds one waiting.
constexpr int kCallsAsked = 8;

// One unary MatMul, from the ask for it to its last completion-queue event. It deletes
// itself after its last event: the ask coming back empty (shutdown), or else both the
// answer sent (Finish's tag) and the call's end (AsyncNotifyWhenDone's).
class Call {
 public:
  enum class Event { kArrived, kAnswered, kEnded };
  struct Tag {
    Call* call;
    Event event;
  };

  // Asks for the next MatMul on `queue`, unless the server stopped queueing.
  static void Ask(State* state, grpc::ServerCompletionQueue* queue) {
    {
      absl::MutexLock lock(&state->mu);
      if (!state->queueing) return;
      ++state->calls;
    }
    auto* call = new Call(state, queue);
    call->rpc_.AsyncNotifyWhenDone(&call->ended_);
    state->service->RequestMatMul(&call->rpc_, &call->request_, &call->writer_, queue, queue,
                                  &call->arrived_);
  }

  ~Call() {
    absl::MutexLock lock(&state_->mu);
    --state_->calls;
  }

  void On(Event event, bool ok) {
    switch (event) {
      case Event::kArrived:
        if (!ok) {  // the server shut down: the call never started, and never ends
          delete this;
          return;
        }
        Ask(state_, queue_);
        Handle();
        return;
      case Event::kEnded:
        // IsCancelled is safe from this event on (grpcpp/server_context.h).
        cancelled_.store(rpc_.IsCancelled(), std::memory_order_release);
        break;
      case Event::kAnswered:
        break;
    }
    if (--events_left_ == 0) delete this;
  }

 private:
  Call(State* state, grpc::ServerCompletionQueue* queue) : state_(state), queue_(queue) {}

  void Handle() {
    const ServiceContext& context = state_->context;
    clock_.emplace(context.metrics, RpcMethod::kMatMul);
    absl::StatusOr<MatMulJob> job = PrepareMatMul(request_, *context.store, context.limits);
    if (!job.ok()) {
      Answer(job.status());
      return;
    }
    absl::ReaderMutexLock lock(&state_->mu);
    if (!state_->queueing) {
      Answer(absl::UnavailableError("the server is shutting down"));
      return;
    }
    DispatchMatMul(
        context, RpcMethod::kMatMul, absl::FromChrono(rpc_.deadline()),
        [this] { return cancelled_.load(std::memory_order_acquire); }, *std::move(job), &response_,
        [this](const absl::Status& status) { Answer(status); });
  }

  void Answer(const absl::Status& status) {
    const grpc::Status answer = clock_->Finish(status);
    if (answer.ok()) {
      writer_.Finish(response_, answer, &answered_);
    } else {
      writer_.FinishWithError(answer, &answered_);
    }
  }

  State* const state_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext rpc_;
  v1::MatMulRequest request_;
  v1::MatMulResponse response_;
  grpc::ServerAsyncResponseWriter<v1::MatMulResponse> writer_{&rpc_};
  std::optional<RequestClock> clock_;
  // Set at the call's end: the batcher drops a cancelled request before its launch.
  std::atomic<bool> cancelled_{false};
  // The answer and the end; both come on this call's queue, so on one thread.
  int events_left_ = 2;
  Tag arrived_{this, Event::kArrived};
  Tag answered_{this, Event::kAnswered};
  Tag ended_{this, Event::kEnded};
};

}  // namespace

UnaryMatMul::UnaryMatMul(const ServiceContext& context, AsyncMatMulService* service,
                         grpc::ServerBuilder& builder, int threads)
    : state_(std::make_unique<State>(context, service)) {
  for (int i = 0; i < threads; ++i) queues_.push_back(builder.AddCompletionQueue());
}

UnaryMatMul::~UnaryMatMul() { Shutdown(); }

void UnaryMatMul::Start() {
  for (std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    for (int i = 0; i < kCallsAsked; ++i) Call::Ask(state_.get(), queue.get());
    threads_.emplace_back([queue = queue.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        auto* event = static_cast<Call::Tag*>(tag);
        event->call->On(event->event, ok);
      }
    });
  }
}

void UnaryMatMul::Shutdown() {
  if (queues_.empty()) return;
  {
    // Every call's last event is on its way: the server failed the asks at its shutdown,
    // and the batcher answers what it holds.
    absl::MutexLock lock(&state_->mu);
    state_->queueing = false;
    state_->mu.Await(absl::Condition(
        +[](int64_t* calls) { return *calls == 0; }, &state_->calls));
  }
  for (std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    queue->Shutdown();
    if (threads_.empty()) {  // never started: drain here, as gRPC requires before destruction
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
      }
    }
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  queues_.clear();
}

}  // namespace qmm
