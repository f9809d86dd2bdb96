#include "server/memory_budget.h"

#include "absl/strings/str_cat.h"

namespace qmm {

absl::Status MemoryBudget::Reserve(int64_t bytes, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  // used_ <= limit_ always holds, so limit_ - used_ cannot overflow.
  if (bytes > limit_ - used_) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " needs ", bytes, " bytes but ", used_,
                                                     " of memory_limit_bytes ", limit_,
                                                     " are in use (", limit_ - used_, " free)"));
  }
  used_ += bytes;
  return absl::OkStatus();
}

void MemoryBudget::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_ -= bytes;
}

int64_t MemoryBudget::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace qmm
