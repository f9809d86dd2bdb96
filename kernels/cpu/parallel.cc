#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace qmm {
namespace {

int HardwareThreads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// One ParallelFor call. Participants (the caller and pool helpers) take chunk indices from
// `next` until none are left, so a helper that starts late finds nothing to do and the
// caller never depends on the pool making progress.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n;
  int64_t chunk;
  int64_t num_chunks;
  std::atomic<int64_t> next{0};
  absl::Mutex mu;
  int64_t done ABSL_GUARDED_BY(mu) = 0;

  bool Done() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return done == num_chunks; }

  // Runs chunks until none are left. `fn` may be gone once done == num_chunks, so a
  // participant touches nothing of the call after its last chunk is counted.
  void Work() {
    int64_t finished = 0;
    for (int64_t c = next.fetch_add(1); c < num_chunks; c = next.fetch_add(1)) {
      const int64_t begin = c * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      ++finished;
    }
    if (finished > 0) {
      absl::MutexLock lock(&mu);
      done += finished;
    }
  }
};

// A process-wide pool of hardware_concurrency - 1 threads, created on first use and never
// destroyed (threads parked on a condition at exit are harmless).
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }

  int size() const { return static_cast<int>(threads_.size()); }

  void Submit(std::shared_ptr<Job> job, int copies) {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < copies; ++i) queue_.push_back(job);
  }

 private:
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty(); }

  void Loop() {
    while (true) {
      std::shared_ptr<Job> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Pool::HasWork));
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->Work();
    }
  }

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

Pool& GlobalPool() {
  static Pool* pool = new Pool(HardwareThreads() - 1);
  return *pool;
}

}  // namespace

void ParallelFor(int64_t n, int64_t min_chunk, int num_threads,
                 const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (num_threads <= 0) num_threads = HardwareThreads();
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int participants =
      static_cast<int>(std::min<int64_t>({num_threads, max_chunks, GlobalPool().size() + 1}));
  if (participants <= 1) {
    fn(0, n);
    return;
  }
  // A few chunks per participant even out rows that finish at different speeds.
  const int64_t num_chunks = std::min<int64_t>(max_chunks, int64_t{4} * participants);
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->chunk = std::max(min_chunk, (n + num_chunks - 1) / num_chunks);
  job->num_chunks = (n + job->chunk - 1) / job->chunk;
  GlobalPool().Submit(job, participants - 1);
  job->Work();
  absl::MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(job.get(), &Job::Done));
}

}  // namespace qmm
