#include "server/compute_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {

ComputePool::ComputePool(std::string name, int num_workers, int64_t max_queued, absl::Duration spin)
    : name_(std::move(name)), max_queued_(max_queued), spin_(spin) {
  threads_.reserve(num_workers);
  for (int i = 0; i < num_workers; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

ComputePool::~ComputePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status ComputePool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError(absl::StrCat(name_, " queue is shutting down"));
  }
  if (static_cast<int64_t>(queue_.size()) >= max_queued_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, " queue is full (", max_queued_, " requests waiting)"));
  }
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

void ComputePool::Spin() const {
  if (queued_.load(std::memory_order_acquire) > 0) return;
  const absl::Time until = absl::Now() + spin_;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (queued_.load(std::memory_order_acquire) > 0) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (absl::Now() >= until) return;
  }
}

void ComputePool::Loop(int worker) {
  auto has_work = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
  while (true) {
    if (spin_ > absl::ZeroDuration()) Spin();
    Task task;
    {
      absl::MutexLock lock(&mu_, absl::Condition(&has_work));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    std::move(task)(worker);
  }
}

}  // namespace qmm
