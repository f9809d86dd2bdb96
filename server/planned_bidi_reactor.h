// The base of the bidirectional streams' reactors (server/ordered_stream_reactor.h,
// server/echo/echo_service.cc): what to start next (a read, a write, the finish) is
// decided under one mutex and started outside it, since gRPC may run a reaction inline
// from a Start call (an operation that fails at once), which would then wait for that
// mutex.
//
// Derived (CRTP) supplies `Actions Plan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)`, which
// counts each plan with a read or a write in starting_ and plans the finish only while
// starting_ is 0, and befriends this class so that Perform can call it.
#ifndef QMM_SERVER_PLANNED_BIDI_REACTOR_H_
#define QMM_SERVER_PLANNED_BIDI_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace qmm {

template <typename Derived, typename Request, typename Response>
class PlannedBidiReactor : public grpc::ServerBidiReactor<Request, Response> {
 protected:
  // Either a read (into incoming_) and/or a write, or the finish, or none.
  struct Actions {
    bool read = false;
    const Response* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // Starts `actions` (from Plan, on the thread that made them, without the mutex), and what
  // became due meanwhile. Static, and touching the reactor only when there is something to
  // start: once another thread has finished the stream, gRPC may delete it at any time, so
  // a thread whose plan is empty must not use it.
  static void Perform(Derived* self, Actions actions) {
    while (actions.read || actions.write != nullptr || actions.finish) {
      if (actions.finish) {
        self->Finish(*actions.finish);
        return;
      }
      if (actions.read) self->StartRead(&self->incoming_);
      if (actions.write != nullptr) self->StartWrite(actions.write);
      absl::MutexLock lock(&self->mu_);
      --self->starting_;
      actions = self->Plan();
    }
  }

  absl::Mutex mu_;
  Request incoming_;                       // where the read in progress puts its request
  int starting_ ABSL_GUARDED_BY(mu_) = 0;  // plans of reads or writes not started yet
};

}  // namespace qmm

#endif  // QMM_SERVER_PLANNED_BIDI_REACTOR_H_
