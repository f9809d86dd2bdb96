#include "tests/server/gated_backend.h"

#include <algorithm>
#include <utility>

namespace qmm::testing {

void GatedBackend::Close(std::function<bool(const MatMulCall&)> holds) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  holds_ = std::move(holds);
}

void GatedBackend::Open() {
  absl::MutexLock lock(&mu_);
  closed_ = false;
}

bool GatedBackend::WaitForCalls(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(calls_.size()) >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&started), timeout);
}

std::vector<GatedBackend::Call> GatedBackend::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

int GatedBackend::max_concurrent() const {
  absl::MutexLock lock(&mu_);
  return max_running_;
}

void GatedBackend::Enter(const Call& call, bool held) {
  absl::MutexLock lock(&mu_);
  calls_.push_back(call);
  max_running_ = std::max(max_running_, ++running_);
  if (held) {
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !closed_; };
    mu_.Await(absl::Condition(&open));
  }
}

void GatedBackend::Leave() {
  absl::MutexLock lock(&mu_);
  --running_;
}

absl::StatusOr<int64_t> GatedBackend::MatMul(int worker, const MatMulCall& call) {
  bool held;
  {
    absl::MutexLock lock(&mu_);
    held = closed_ && (!holds_ || holds_(call));
  }
  Enter({call.weight, call.x_dtype, call.y_dtype, call.m}, held);
  absl::StatusOr<int64_t> result = inner_->MatMul(worker, call);
  Leave();
  return result;
}

absl::StatusOr<int64_t> GatedBackend::Forward(int worker, const ForwardCall& call) {
  bool held;
  {
    absl::MutexLock lock(&mu_);
    held = closed_ && !holds_;
  }
  Enter({nullptr, call.x_dtype, call.y_dtype, call.m}, held);
  absl::StatusOr<int64_t> result = inner_->Forward(worker, call);
  Leave();
  return result;
}

}  // namespace qmm::testing
