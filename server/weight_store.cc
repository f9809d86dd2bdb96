#include "server/weight_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {

StoredWeight::StoredWeight(std::string name, const WeightDesc& desc,
                           std::unique_ptr<BackendWeight> weight,
                           std::shared_ptr<MemoryBudget> budget, int64_t charged_bytes)
    : name_(std::move(name)),
      desc_(desc),
      weight_(std::move(weight)),
      budget_(std::move(budget)),
      charged_bytes_(charged_bytes) {}

StoredWeight::~StoredWeight() {
  // Free first: the budget must never show room the device does not have yet.
  weight_.reset();
  budget_->Release(charged_bytes_);
}

WeightStore::WeightStore(int64_t memory_limit_bytes)
    : budget_(std::make_shared<MemoryBudget>(memory_limit_bytes)) {}

WeightStore::Reservation::Reservation(Reservation&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      name_(std::move(other.name_)),
      bytes_(other.bytes_) {}

WeightStore::Reservation::~Reservation() {
  if (store_ != nullptr) store_->Cancel(name_, bytes_);
}

absl::StatusOr<WeightStore::Reservation> WeightStore::Reserve(absl::string_view name,
                                                              int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (weights_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("weight \"", name, "\" already exists"));
  }
  if (pending_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("weight \"", name, "\" is being uploaded by another call"));
  }
  if (absl::Status status = budget_->Reserve(bytes, absl::StrCat("weight \"", name, "\""));
      !status.ok()) {
    return status;
  }
  pending_.emplace(name);
  return Reservation(this, std::string(name), bytes);
}

absl::StatusOr<std::shared_ptr<const StoredWeight>> WeightStore::Commit(
    Reservation reservation, const WeightDesc& desc, std::unique_ptr<BackendWeight> weight) {
  const int64_t device_bytes = weight->device_bytes();
  if (device_bytes > reservation.bytes_) {
    absl::Status status =
        budget_->Reserve(device_bytes - reservation.bytes_,
                         absl::StrCat("weight \"", reservation.name_, "\" in the device layout"));
    if (!status.ok()) return status;  // the reservation's destructor gives everything back
  } else {
    budget_->Release(reservation.bytes_ - device_bytes);
  }
  auto stored = std::make_shared<const StoredWeight>(reservation.name_, desc, std::move(weight),
                                                     budget_, device_bytes);
  absl::MutexLock lock(&mu_);
  pending_.erase(reservation.name_);
  weights_.emplace(reservation.name_, stored);
  reservation.store_ = nullptr;  // the bytes now belong to `stored`
  return stored;
}

void WeightStore::Cancel(const std::string& name, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  pending_.erase(name);
  budget_->Release(bytes);
}

absl::StatusOr<std::shared_ptr<const StoredWeight>> WeightStore::Get(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = weights_.find(name);
  if (it == weights_.end()) {
    return absl::NotFoundError(absl::StrCat("weight \"", name, "\" not found"));
  }
  return it->second;
}

std::vector<std::shared_ptr<const StoredWeight>> WeightStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const StoredWeight>> out;
  out.reserve(weights_.size());
  for (const auto& [name, weight] : weights_) out.push_back(weight);
  return out;
}

absl::Status WeightStore::Delete(absl::string_view name) {
  std::shared_ptr<const StoredWeight> removed;  // dropped after the lock, maybe the last ref
  {
    absl::MutexLock lock(&mu_);
    auto it = weights_.find(name);
    if (it == weights_.end()) {
      return absl::NotFoundError(absl::StrCat("weight \"", name, "\" not found"));
    }
    removed = std::move(it->second);
    weights_.erase(it);
  }
  return absl::OkStatus();
}

int64_t WeightStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(weights_.size());
}

}  // namespace qmm
