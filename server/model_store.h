// The named models the server holds, and the rule that keeps their weights alive: a weight
// that a model uses cannot be deleted (FAILED_PRECONDITION naming the model).
//
// Models and weights have separate namespaces. Deleting a weight must go through
// ModelStore::DeleteWeight: the in-use check and the delete happen under one lock, as do
// the check that a new model's weights are still published and its publication, so a
// CreateModel racing a DeleteWeight either sees the weight gone (and fails) or keeps it.
//
// Readers get a shared_ptr: Delete() only unpublishes a model, and it (with the weight
// references it holds) is freed when the last in-flight request drops it.
//
// Thread-safe; every method may be called from any thread.
#ifndef QMM_SERVER_MODEL_STORE_H_
#define QMM_SERVER_MODEL_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/model.h"
#include "server/usage_stats.h"
#include "server/weight_store.h"

namespace qmm {

// A published model: its checked description and what the backend prepared from it
// (nullptr in tests of the store alone). Immutable.
class StoredModel {
 public:
  explicit StoredModel(ModelSpec spec, std::unique_ptr<BackendModel> prepared = nullptr)
      : spec_(std::move(spec)), prepared_(std::move(prepared)) {}

  StoredModel(const StoredModel&) = delete;
  StoredModel& operator=(const StoredModel&) = delete;

  const std::string& name() const { return spec_.name; }
  const ModelSpec& spec() const { return spec_; }
  const BackendModel* prepared() const { return prepared_.get(); }
  // As StoredWeight::usage, for its Forward requests.
  UsageStats& usage() const { return usage_; }

 private:
  // Declared first, destroyed last: the prepared model refers to the weights it holds.
  const ModelSpec spec_;
  const std::unique_ptr<BackendModel> prepared_;
  mutable UsageStats usage_;
};

class ModelStore {
 public:
  // `weights` must outlive the store.
  explicit ModelStore(WeightStore& weights) : weights_(weights) {}

  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

  // Publishes `model` under its name. ALREADY_EXISTS when the name is taken;
  // FAILED_PRECONDITION when one of its weights was deleted (or replaced) after CheckModel
  // resolved it.
  absl::StatusOr<std::shared_ptr<const StoredModel>> Add(std::shared_ptr<const StoredModel> model);

  // NOT_FOUND when no model of that name is published.
  absl::StatusOr<std::shared_ptr<const StoredModel>> Get(absl::string_view name) const;
  // Every published model, sorted by name.
  std::vector<std::shared_ptr<const StoredModel>> List() const;
  // Unpublishes the model; NOT_FOUND when there is none.
  absl::Status Delete(absl::string_view name);

  // Deletes weight `name` from the WeightStore, unless a model uses it: then
  // FAILED_PRECONDITION naming the model(s). NOT_FOUND as WeightStore::Delete.
  absl::Status DeleteWeight(absl::string_view name);

  // Names of the models that use weight `name`, sorted.
  std::vector<std::string> ModelsUsing(absl::string_view weight) const;

  int64_t size() const;

 private:
  WeightStore& weights_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const StoredModel>, std::less<>> models_
      ABSL_GUARDED_BY(mu_);
  // weight name -> names of the models that use it.
  std::map<std::string, std::set<std::string>, std::less<>> users_ ABSL_GUARDED_BY(mu_);
};

}  // namespace qmm

#endif  // QMM_SERVER_MODEL_STORE_H_
