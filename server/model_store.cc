#include "server/model_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace qmm {

absl::StatusOr<std::shared_ptr<const StoredModel>> ModelStore::Add(
    std::shared_ptr<const StoredModel> model) {
  const ModelSpec& spec = model->spec();
  absl::MutexLock lock(&mu_);
  if (models_.contains(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("model \"", spec.name, "\" already exists"));
  }
  for (const LayerSpec& layer : spec.layers) {
    for (const std::shared_ptr<const StoredWeight>& w : layer.weights) {
      absl::StatusOr<std::shared_ptr<const StoredWeight>> now = weights_.Get(w->name());
      if (!now.ok() || now->get() != w.get()) {
        return absl::FailedPreconditionError(absl::StrCat("weight \"", w->name(),
                                                          "\" was deleted while model \"",
                                                          spec.name, "\" was being created"));
      }
    }
  }
  for (const std::string& weight : spec.weight_names) users_[weight].insert(spec.name);
  models_.emplace(spec.name, model);
  return model;
}

absl::StatusOr<std::shared_ptr<const StoredModel>> ModelStore::Get(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model \"", name, "\" not found"));
  }
  return it->second;
}

std::vector<std::shared_ptr<const StoredModel>> ModelStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const StoredModel>> out;
  out.reserve(models_.size());
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

absl::Status ModelStore::Delete(absl::string_view name) {
  std::shared_ptr<const StoredModel> removed;  // dropped after the lock, maybe the last ref
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model \"", name, "\" not found"));
  }
  removed = std::move(it->second);
  models_.erase(it);
  for (const std::string& weight : removed->spec().weight_names) {
    auto user = users_.find(weight);
    user->second.erase(removed->name());
    if (user->second.empty()) users_.erase(user);
  }
  return absl::OkStatus();
}

absl::Status ModelStore::DeleteWeight(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(name);
  if (it != users_.end()) {
    const std::set<std::string>& models = it->second;
    return absl::FailedPreconditionError(
        absl::StrCat("weight \"", name, "\" is used by model", models.size() == 1 ? " \"" : "s \"",
                     absl::StrJoin(models, "\", \""), "\"; delete ",
                     models.size() == 1 ? "it" : "them", " first"));
  }
  return weights_.Delete(name);
}

std::vector<std::string> ModelStore::ModelsUsing(absl::string_view weight) const {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(weight);
  if (it == users_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

int64_t ModelStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(models_.size());
}

}  // namespace qmm
