#include "tests/server/gated_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
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

bool GatedBackend::Held(const MatMulCall& call) const {
  absl::MutexLock lock(&mu_);
  return closed_ && (!holds_ || holds_(call));
}

absl::StatusOr<int64_t> GatedBackend::MatMul(int worker, const MatMulCall& call) {
  Enter({call.weight, call.x_dtype, call.y_dtype, call.m}, Held(call));
  absl::StatusOr<int64_t> result = inner_->MatMul(worker, call);
  Leave();
  return result;
}

class GatedBackend::Registration : public HostRegistration {
 public:
  Registration(GatedBackend& backend, const uint8_t* data) : backend_(backend), data_(data) {}
  ~Registration() override {
    absl::MutexLock lock(&backend_.mu_);
    std::erase_if(backend_.registered_, [this](const auto& r) { return r.first == data_; });
  }

 private:
  GatedBackend& backend_;
  const uint8_t* const data_;
};

void GatedBackend::RegistersHost(bool on) {
  absl::MutexLock lock(&mu_);
  registers_ = on;
}

int GatedBackend::registrations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(registered_.size());
}

absl::StatusOr<std::unique_ptr<HostRegistration>> GatedBackend::RegisterHost(void* data,
                                                                             size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (!registers_) return nullptr;
  registered_.emplace_back(static_cast<const uint8_t*>(data), bytes);
  return std::make_unique<Registration>(*this, static_cast<const uint8_t*>(data));
}

bool GatedBackend::Registered(const void* p, size_t bytes) const {
  const auto* b = static_cast<const uint8_t*>(p);
  absl::MutexLock lock(&mu_);
  return std::ranges::any_of(
      registered_, [&](const auto& r) { return b >= r.first && b + bytes <= r.first + r.second; });
}

absl::StatusOr<int64_t> GatedBackend::MatMulBlocks(int worker, const BlocksMatMulCall& call) {
  const WeightShape& shape = call.weight->shape();
  const size_t x_row = shape.k * DTypeSize(call.x_dtype);
  const size_t y_row = shape.n * DTypeSize(call.y_dtype);
  std::string x, y;
  for (const RowBlock& b : call.blocks) {
    if (!Registered(b.x, b.rows * x_row) || !Registered(b.y, b.rows * y_row)) {
      return absl::InternalError("MatMulBlocks: a block lies outside registered memory");
    }
    x.append(static_cast<const char*>(b.x), b.rows * x_row);
  }
  y.resize(x.size() / x_row * y_row);
  const MatMulCall gathered{.weight = call.weight,
                            .x_dtype = call.x_dtype,
                            .x = x.data(),
                            .m = static_cast<int64_t>(x.size() / x_row),
                            .y_dtype = call.y_dtype,
                            .y = y.data(),
                            .transfer = call.transfer};
  Enter({call.weight, call.x_dtype, call.y_dtype, gathered.m, /*blocks=*/true}, Held(gathered));
  absl::StatusOr<int64_t> result = inner_->MatMul(worker, gathered);
  Leave();
  if (!result.ok()) return result;
  size_t at = 0;
  for (const RowBlock& b : call.blocks) {
    std::memcpy(b.y, y.data() + at, b.rows * y_row);
    at += b.rows * y_row;
  }
  return result;
}

absl::StatusOr<int64_t> GatedBackend::Forward(int worker, const ForwardCall& call) {
  bool held;
  {
    absl::MutexLock lock(&mu_);
    held = closed_ && !holds_;
  }
  Enter({nullptr, call.x_dtype, call.y_dtype, call.m, false}, held);
  absl::StatusOr<int64_t> result = inner_->Forward(worker, call);
  Leave();
  return result;
}

}  // namespace qmm::testing
