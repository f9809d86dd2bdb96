// A fixed set of worker threads that run compute tasks, so that no gRPC thread ever runs
// a kernel or a weight conversion.
//
// Each thread has a worker index in [0, size()) and runs one task at a time, which is the
// guarantee Backend::MatMul relies on for per-worker resources. Tasks run in submission
// order (a per-weight batching queue can sit in front and submit whole batches).
//
// Thread-safe. Destruction runs every task already queued, then joins the threads.
#ifndef QMM_SERVER_COMPUTE_POOL_H_
#define QMM_SERVER_COMPUTE_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace qmm {

class ComputePool {
 public:
  using Task = absl::AnyInvocable<void(int worker) &&>;

  // num_workers >= 1; at most max_queued tasks wait at once. `name` appears in errors.
  // An idle worker polls for new work for `spin` before it goes to sleep: a sleeping
  // thread takes tens of microseconds to wake, which a latency-bound caller pays on every
  // request. Zero: sleep at once.
  ComputePool(std::string name, int num_workers, int64_t max_queued,
              absl::Duration spin = absl::ZeroDuration());
  ~ComputePool();

  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Queues `task`. RESOURCE_EXHAUSTED (naming the limit) when the queue is full; the task
  // is then dropped without running, and the caller answers its RPC itself.
  absl::Status Submit(Task task);

  int size() const { return static_cast<int>(threads_.size()); }
  // Tasks waiting for a worker now (a snapshot).
  int64_t queued() const { return queued_.load(std::memory_order_relaxed); }

 private:
  void Loop(int worker);
  // Returns once a task waits or `spin_` has passed.
  void Spin() const;

  const std::string name_;
  const int64_t max_queued_;
  const absl::Duration spin_;
  absl::Mutex mu_;
  // queue_.size(), readable without the mutex by spinning workers.
  std::atomic<int64_t> queued_{0};
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace qmm

#endif  // QMM_SERVER_COMPUTE_POOL_H_
