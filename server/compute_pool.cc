#include "server/compute_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {

ComputePool::ComputePool(std::string name, int num_workers, int64_t max_queued)
    : name_(std::move(name)), max_queued_(max_queued) {
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
  return absl::OkStatus();
}

void ComputePool::Loop(int worker) {
  auto has_work = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_, absl::Condition(&has_work));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)(worker);
  }
}

}  // namespace qmm
