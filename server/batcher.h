// Dynamic batching of MatMul and Forward requests: one queue per weight (MatMul) or per
// model (Forward), many requests per launch. What is said of weights below holds for
// models alike.
//
// Policy. A request joins its weight's queue. When nothing of that weight is running or
// scheduled, the queue is launched at once (after --max_queue_delay_us, if set, unless
// max_batch_rows rows are already waiting); while a launch runs, arriving requests wait
// and go together in the next one. A launch takes the oldest request and then, in order,
// every following request with the same input and output dtype (so that each result is
// exactly what the request would get alone) while the rows fit in max_batch_rows; a
// request is never split, and one larger than max_batch_rows, or one with values beyond
// fp16's range (MatMulJob::beyond_fp16), runs alone. A launch task binds its requests when
// a worker starts it, so requests that arrive while it waits for a worker still join. A
// weight gets a second concurrent launch only when a full batch is waiting beyond what is
// already scheduled (saturating load), never more than the backend has workers. Different
// weights run concurrently on the backend's workers, which take work in submission order;
// a worker that finishes a launch runs its weight's next one itself when no other work
// waits for a worker (rather than waking another worker for it).
//
// Admission. A request is refused with RESOURCE_EXHAUSTED when max_queued_requests
// requests already wait (all weights together) or when its weight's waiting rows plus its
// own would exceed max_queue_rows (a request is always admitted into an empty queue;
// max_rows bounds it). Rows and requests "waiting" exclude those already launched.
//
// Drops. Just before a launch, a request whose deadline passed gets DEADLINE_EXCEEDED, one
// whose client cancelled gets CANCELLED, and, when the weight was deleted (or replaced
// under its name) while they waited, every queued request of it gets NOT_FOUND; none of
// them launches. Launches already running when a weight is deleted finish normally: the
// queue holds a reference to the weight until it is empty and idle.
//
// Threads. Enqueue, stats and pool may be called from any thread. Each request's `done`
// runs exactly once: on a worker; for a launch of several requests, on the completion
// threads (BatcherOptions::completion_threads), so that handing the results to gRPC, which
// costs about as much per request as the kernel, does not hold the worker back from the
// next launch (nor do the request's queue metric and, for rows in registered memory, its
// response's fields, recorded there too); or on the thread that found its launch could
// not be queued (Enqueue refusing it, a full pool()). Destroy the batcher only after
// every request has finished (the server's Shutdown guarantees it); the destructor then
// stops the delay timer and joins the workers.
#ifndef QMM_SERVER_BATCHER_H_
#define QMM_SERVER_BATCHER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/compute_pool.h"
#include "server/matmul_runner.h"
#include "server/metrics.h"
#include "server/model_runner.h"
#include "server/model_store.h"
#include "server/weight_store.h"

namespace qmm {

struct BatcherOptions {
  // Most rows one launch carries (a single larger request runs alone).
  int64_t max_batch_rows = 64;
  // How long an idle weight's first request waits for company before launching.
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // Most rows waiting per weight.
  int64_t max_queue_rows = 65536;
  // Most requests waiting, all weights together.
  int64_t max_queued_requests = 4096;
  // How long an idle worker polls for the next launch before it sleeps (ComputePool).
  absl::Duration worker_spin = absl::ZeroDuration();
  // Threads that finish the requests of multi-request launches, in parallel chunks; 0: the
  // worker finishes them itself.
  int completion_threads = 2;
};

// INVALID_ARGUMENT naming the option when one is out of range.
absl::Status CheckBatcherOptions(const BatcherOptions& options);

// Counts since the batcher started, and what waits now.
struct BatchStats {
  int64_t waiting_requests = 0;  // all weights together
  int64_t waiting_rows = 0;
  int64_t launches = 0;  // backend calls, failed ones included
  int64_t failed_launches = 0;
  int64_t requests = 0;  // requests those launches carried
  int64_t rows = 0;
  int64_t multi_request_launches = 0;  // launches of more than one request
  int64_t max_requests_per_launch = 0;
  int64_t max_rows_per_launch = 0;
  // Requests that never launched, by reason.
  int64_t rejected_queue_full = 0;
  int64_t dropped_deadline = 0;
  int64_t dropped_cancelled = 0;
  int64_t dropped_weight_deleted = 0;
};

// One request handed to the batcher: a MatMul (`job` and `response`) or a Forward
// (`forward` and `forward_response`), never both.
struct BatchRequest {
  // Holds the weight and points at the request, which must stay unchanged until `done`.
  MatMulJob job = {};
  // Receives the whole result; written only by the batcher until `done`.
  v1::MatMulResponse* response = nullptr;
  // When set, the result rows go here (job.spec.y_bytes) and `response` gets the rest, its
  // output.data empty.
  void* output = nullptr;
  // job.x and `output` lie in host memory registered with the backend (RegisterHost): a
  // launch of several requests, all such, runs through Backend::MatMulBlocks, without host
  // copies.
  bool registered = false;
  // The same for a Forward: holds the model.
  ForwardJob forward = {};
  v1::ForwardResponse* forward_response = nullptr;
  RpcMethod method = RpcMethod::kMatMul;
  absl::Time deadline = absl::InfiniteFuture();
  // True once the client has cancelled; polled before launch. Empty: never cancelled.
  absl::AnyInvocable<bool() const> cancelled;
  // The request's final status (OK: `response` holds the result).
  absl::AnyInvocable<void(const absl::Status&) &&> done;
};

class Batcher {
 public:
  // Runs launches on backend.num_workers() workers of its own. `backend`, `store`,
  // `metrics` and `models` (nullptr: no Forward requests) must outlive the batcher.
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(Backend& backend, const WeightStore& store,
                                                         Metrics& metrics,
                                                         const BatcherOptions& options,
                                                         const ModelStore* models = nullptr);
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  void Enqueue(BatchRequest request);

  BatchStats stats() const;
  const BatcherOptions& options() const { return options_; }
  // The workers launches run on. Other work that needs a backend worker index may be
  // submitted here; it takes its turn between launches. At most max_queued_requests tasks
  // wait (a launch task counts once, whatever it carries).
  ComputePool& pool() { return *pool_; }
  // stats() and options() as ServerInfo reports them.
  void FillStats(v1::BatchingStats* out) const;

 private:
  struct Waiting {
    BatchRequest request;
    absl::Time enqueued;
  };
  // The queue of one weight or of one model (exactly one of the two is set).
  struct WeightQueue {
    WeightQueue(std::shared_ptr<const StoredWeight> w, std::shared_ptr<const StoredModel> m)
        : weight(std::move(w)), model(std::move(m)) {}
    const void* key() const {
      return weight != nullptr ? static_cast<const void*>(weight.get()) : model.get();
    }
    const std::shared_ptr<const StoredWeight> weight;
    const std::shared_ptr<const StoredModel> model;
    std::deque<Waiting> waiting;
    int64_t rows = 0;   // rows in `waiting`
    int scheduled = 0;  // launch tasks submitted to the pool and not started yet
    int running = 0;    // launches in progress
    bool timer_armed = false;
  };
  // `done` callbacks to run once the mutex is released.
  using Completions =
      std::vector<std::pair<absl::AnyInvocable<void(const absl::Status&) &&>, absl::Status>>;
  // Per worker: where a batch's activations are gathered and its results land. Only the
  // pool thread of that worker index touches its buffers.
  struct Staging {
    std::vector<uint8_t> x;
    std::vector<uint8_t> y;
    std::vector<RowBlock> blocks;  // LaunchBlocks'
  };

  Batcher(Backend& backend, const WeightStore& store, Metrics& metrics,
          const BatcherOptions& options, const ModelStore* models);

  // Submits launches (or arms the delay timer) as the policy in the header says. With
  // `run_here` (a worker that just finished a launch of `q`), the first launch is not
  // submitted when no task waits for a worker: *run_here is set and the caller runs it,
  // which saves waking another worker for it.
  void ScheduleLocked(WeightQueue& q, absl::Time now, Completions& completions,
                      bool* run_here = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmTimerLocked(WeightQueue& q, absl::Time due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `q` when nothing refers to it any more; `q` is gone if this returns true.
  bool EraseIfIdleLocked(WeightQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the oldest waiting request out of `q` and out of the waiting counts; the caller
  // takes it off the queue gauges (Metrics::AddQueued), after unlocking where it can.
  Waiting PopLocked(WeightQueue& q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves one launch's requests out of `q` into `batch`, and the requests to drop (with
  // their status) into `dropped`.
  void TakeBatchLocked(WeightQueue& q, bool published, absl::Time now, std::vector<Waiting>& batch,
                       std::vector<std::pair<Waiting, absl::Status>>& dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One pool task: takes a batch of `q`, launches it on `worker`, answers its requests;
  // then the next batch of `q` while ScheduleLocked hands it back (run_here).
  void RunBatch(WeightQueue* q, int worker);
  // One launch of RunBatch; true when the worker should run the next one of `q` itself.
  bool RunOneBatch(WeightQueue* q, int worker);
  // Runs `batch` (all of one weight and one dtype pair) and fills every response (but
  // LaunchBlocks'); returns the launch's compute time (Backend::MatMul's); `transfer`
  // receives the backend's transfer times.
  absl::StatusOr<int64_t> Launch(int worker, const StoredWeight& weight,
                                 std::vector<Waiting>& batch, TransferTimes& transfer);
  // Launch's path for requests whose rows all lie in registered host memory
  // (BatchRequest::registered): Backend::MatMulBlocks, no host copies. It leaves the
  // responses to FinishRequest.
  absl::StatusOr<int64_t> LaunchBlocks(int worker, const StoredWeight& weight,
                                       std::vector<Waiting>& batch, TransferTimes& transfer);
  // The same for a model's Forward requests.
  absl::StatusOr<int64_t> LaunchForward(int worker, const StoredModel& model,
                                        std::vector<Waiting>& batch, TransferTimes& transfer);
  // Records a launch of `batch` (`rows` rows, taken from the queue at `taken`) that ended
  // at `ended` with `status` and `compute_ns` into the weight's or model's statistics.
  void RecordUsage(UsageStats& usage, const std::vector<Waiting>& batch, int64_t rows,
                   absl::Time taken, absl::Time ended, const absl::Status& status,
                   int64_t compute_ns, const TransferTimes& transfer);
  void TimerLoop();
  // How a launch ended, for its requests.
  struct Finish {
    absl::Status status;
    absl::Time taken;              // when the launch took them from the queue
    int64_t compute_ns = 0;        // the launch's, when it succeeded
    bool start_responses = false;  // LaunchBlocks': the responses are still to be started
  };
  // Records a request's queue time, starts its response when `finish` says so, and runs
  // its `done`.
  void FinishRequest(Waiting& w, const Finish& finish);
  // FinishRequest for every request of a launch: on this thread for a single request (no
  // extra thread hop for it) unless the worker has another launch to run (`busy`), else
  // on the completion threads (FinishChunks), so that this per-request work stays off the
  // worker's path to its next launch. Leaves `batch` empty.
  void FinishBatch(std::vector<Waiting>& batch, const Finish& finish, bool busy);
  // On a completion thread: FinishRequest for every request of `all`, in chunks that it
  // hands to the other completion threads but the first, which it runs itself.
  void FinishChunks(const std::shared_ptr<std::vector<Waiting>>& all, const Finish& finish);
  // Whether `batch` runs through LaunchBlocks: several requests, all registered.
  static bool InPlace(const std::vector<Waiting>& batch);

  Backend& backend_;
  const WeightStore& store_;
  Metrics& metrics_;
  const ModelStore* const models_;
  const BatcherOptions options_;
  std::vector<Staging> staging_;

  mutable absl::Mutex mu_;
  absl::CondVar timer_cv_;
  // By WeightQueue::key().
  absl::flat_hash_map<const void*, std::unique_ptr<WeightQueue>> queues_ ABSL_GUARDED_BY(mu_);
  int64_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_rows_ ABSL_GUARDED_BY(mu_) = 0;
  std::multimap<absl::Time, WeightQueue*> timers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  BatchStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread timer_;  // only with a non-zero max_queue_delay
  // Finishes requests for pool_'s tasks (nullptr without completion threads); destroyed
  // after pool_, so that it runs what the last launches handed it.
  std::unique_ptr<ComputePool> completion_;
  // Last: its tasks use everything above, so it is destroyed (drained) first.
  std::unique_ptr<ComputePool> pool_;
};

}  // namespace qmm

#endif  // QMM_SERVER_BATCHER_H_
