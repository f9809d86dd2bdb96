// A byte budget for weight memory (--memory_limit_bytes), shared by the weight store and
// every stored weight, so that memory is counted until the weight is really freed.
//
// Thread-safe. Lock order: WeightStore's mutex may be held while calling in here, never
// the reverse.
#ifndef QMM_SERVER_MEMORY_BUDGET_H_
#define QMM_SERVER_MEMORY_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace qmm {

class MemoryBudget {
 public:
  // limit_bytes >= 0.
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Takes `bytes` (>= 0) out of the budget, or fails with RESOURCE_EXHAUSTED naming the
  // bytes needed, the bytes in use and the limit. `what` names the reason in the message.
  absl::Status Reserve(int64_t bytes, absl::string_view what);
  // Gives back bytes taken by an earlier Reserve.
  void Release(int64_t bytes);

  int64_t used_bytes() const;
  int64_t limit_bytes() const { return limit_; }

 private:
  const int64_t limit_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace qmm

#endif  // QMM_SERVER_MEMORY_BUDGET_H_
