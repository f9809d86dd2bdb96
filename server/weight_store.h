// The named weights the server holds, under a memory budget.
//
// Uploads go through two steps so that the budget and the name are claimed before any
// data is loaded: Reserve() claims both (two concurrent uploads cannot both pass the
// budget check, nor both take a name), and Commit() publishes the loaded weight. A
// Reservation dropped without Commit() gives both back, so a failed upload leaves nothing.
//
// Readers get a shared_ptr: Delete() only unpublishes a weight, and its memory (and its
// share of the budget) is freed when the last in-flight request drops its reference.
//
// Thread-safe; every method may be called from any thread.
#ifndef QMM_SERVER_WEIGHT_STORE_H_
#define QMM_SERVER_WEIGHT_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/format.h"
#include "server/backend.h"
#include "server/memory_budget.h"
#include "server/usage_stats.h"

namespace qmm {

// What a weight is, independent of where it lives.
struct WeightDesc {
  Scheme scheme = Scheme::kFp16;
  WeightShape shape;
  int64_t packed_bytes = 0;  // size of the canonical packed form
};

// A published weight. Immutable; destroying it frees the backend memory and then returns
// the bytes it was charged to the budget.
class StoredWeight {
 public:
  StoredWeight(std::string name, const WeightDesc& desc, std::unique_ptr<BackendWeight> weight,
               std::shared_ptr<MemoryBudget> budget, int64_t charged_bytes);
  ~StoredWeight();

  StoredWeight(const StoredWeight&) = delete;
  StoredWeight& operator=(const StoredWeight&) = delete;

  const std::string& name() const { return name_; }
  const WeightDesc& desc() const { return desc_; }
  const BackendWeight& backend_weight() const { return *weight_; }
  int64_t device_bytes() const { return weight_->device_bytes(); }
  // What its requests did (the Open Inference Protocol's statistics); its own
  // synchronization makes it writable through a const weight.
  UsageStats& usage() const { return usage_; }

 private:
  const std::string name_;
  const WeightDesc desc_;
  std::unique_ptr<BackendWeight> weight_;
  const std::shared_ptr<MemoryBudget> budget_;
  const int64_t charged_bytes_;
  mutable UsageStats usage_;
};

class WeightStore {
 public:
  explicit WeightStore(int64_t memory_limit_bytes);

  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // A claim on a name and on budget bytes. Move-only; must not outlive the store.
  class Reservation {
   public:
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&&) = delete;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();

    const std::string& name() const { return name_; }
    int64_t bytes() const { return bytes_; }

   private:
    friend class WeightStore;
    Reservation(WeightStore* store, std::string name, int64_t bytes)
        : store_(store), name_(std::move(name)), bytes_(bytes) {}

    WeightStore* store_;  // nullptr once committed or moved from
    std::string name_;
    int64_t bytes_;
  };

  // Claims `name` and `bytes` (>= 0) of budget. ALREADY_EXISTS when the name is taken
  // (published, or reserved by an upload in progress); RESOURCE_EXHAUSTED naming the
  // bytes needed, used and the limit when the budget is short.
  absl::StatusOr<Reservation> Reserve(absl::string_view name, int64_t bytes);

  // Publishes `weight` under the reservation's name. The weight is charged its
  // device_bytes(): when that exceeds the reservation, the difference must still fit
  // (RESOURCE_EXHAUSTED otherwise, and nothing is published).
  absl::StatusOr<std::shared_ptr<const StoredWeight>> Commit(Reservation reservation,
                                                             const WeightDesc& desc,
                                                             std::unique_ptr<BackendWeight> weight);

  // NOT_FOUND when no weight of that name is published.
  absl::StatusOr<std::shared_ptr<const StoredWeight>> Get(absl::string_view name) const;
  // Every published weight, sorted by name.
  std::vector<std::shared_ptr<const StoredWeight>> List() const;
  // Unpublishes the weight; NOT_FOUND when there is none. Its memory is freed once the
  // requests still holding it finish.
  absl::Status Delete(absl::string_view name);

  int64_t size() const;
  int64_t used_bytes() const { return budget_->used_bytes(); }
  int64_t limit_bytes() const { return budget_->limit_bytes(); }

 private:
  void Cancel(const std::string& name, int64_t bytes);

  const std::shared_ptr<MemoryBudget> budget_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const StoredWeight>, std::less<>> weights_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace qmm

#endif  // QMM_SERVER_WEIGHT_STORE_H_
