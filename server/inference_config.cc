#include "server/inference_config.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/batcher.h"
#include "server/usage_stats.h"

namespace qmm {
namespace {

// Triton's enum names the protocol's datatypes with a prefix: "FP16" is TYPE_FP16.
inference::DataType ConfigDataType(absl::string_view datatype) {
  inference::DataType type = inference::TYPE_INVALID;
  inference::DataType_Parse(absl::StrCat("TYPE_", datatype), &type);
  return type;
}

void SetDuration(const UsageStats::Duration& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

void SetDuration(uint64_t count, uint64_t ns, inference::StatisticDuration* to) {
  to->set_count(count);
  to->set_ns(ns);
}

void AppendStatistics(const InferenceModel& target, inference::ModelStatisticsResponse* out) {
  const UsageStats::Snapshot s =
      (target.model != nullptr ? target.model->usage() : target.weight->usage()).snapshot();
  inference::ModelStatistics* stats = out->add_model_stats();
  stats->set_name(InferenceName(target));
  stats->set_version(std::string(kInferenceVersion));
  stats->set_last_inference(static_cast<uint64_t>(absl::ToUnixMillis(s.last_request)));
  stats->set_inference_count(s.rows);
  stats->set_execution_count(s.launches);
  inference::InferStatistics* infer = stats->mutable_inference_stats();
  SetDuration(s.success, infer->mutable_success());
  SetDuration(s.fail, infer->mutable_fail());
  SetDuration(s.queue, infer->mutable_queue());
  SetDuration(s.compute_input, infer->mutable_compute_input());
  SetDuration(s.compute_infer, infer->mutable_compute_infer());
  SetDuration(s.compute_output, infer->mutable_compute_output());
  for (const auto& [rows, batch] : s.batches) {
    inference::InferBatchStatistics* b = stats->add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(rows));
    SetDuration(batch.count, batch.input_ns, b->mutable_compute_input());
    SetDuration(batch.count, batch.infer_ns, b->mutable_compute_infer());
    SetDuration(batch.count, batch.output_ns, b->mutable_compute_output());
  }
}

}  // namespace

InferenceServing ServingOf(const ServiceContext& context) {
  const BatcherOptions& options = context.batcher->options();
  return {.max_rows = context.limits.max_rows,
          .max_batch_rows = options.max_batch_rows,
          .max_queue_delay = options.max_queue_delay,
          .gpu = context.backend->name() == "cuda",
          .workers = context.backend->num_workers()};
}

void FillModelConfig(const InferenceModel& target, const InferenceServing& serving,
                     inference::ModelConfigResponse* out) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  out->Clear();
  inference::ModelConfig* config = out->mutable_config();
  config->set_name(InferenceName(target));
  config->set_platform(InferencePlatform(target));
  config->set_backend("qmm");
  config->set_max_batch_size(static_cast<int32_t>(std::min(serving.max_rows, kInt32Max)));
  const InferenceTensors tensors = DescribeTensors(target);
  inference::ModelInput* input = config->add_input();
  input->set_name(std::string(tensors.input.name));
  input->set_data_type(ConfigDataType(tensors.input.datatype));
  if (tensors.input.width > 0) {
    input->add_dims(tensors.input.width);
  } else {
    input->add_dims(1);
    input->mutable_reshape();  // shape []: each row is one value
  }
  inference::ModelOutput* output = config->add_output();
  output->set_name(std::string(tensors.output.name));
  output->set_data_type(ConfigDataType(tensors.output.datatype));
  output->add_dims(tensors.output.width);
  inference::ModelInstanceGroup* group = config->add_instance_group();
  group->set_name(absl::StrCat(InferenceName(target), "_0"));
  group->set_kind(serving.gpu ? inference::ModelInstanceGroup::KIND_GPU
                              : inference::ModelInstanceGroup::KIND_CPU);
  group->set_count(serving.workers);
  inference::ModelDynamicBatching* batching = config->mutable_dynamic_batching();
  batching->add_preferred_batch_size(
      static_cast<int32_t>(std::min(serving.max_batch_rows, kInt32Max)));
  batching->set_max_queue_delay_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(serving.max_queue_delay)));
}

absl::Status FillModelStatistics(absl::string_view name, absl::string_view version,
                                 absl::string_view name_field, const ModelStore& models,
                                 const WeightStore& weights,
                                 inference::ModelStatisticsResponse* out) {
  out->Clear();
  if (!name.empty()) {
    absl::StatusOr<InferenceModel> target =
        ResolveInferenceModel(name, version, name_field, models, weights);
    if (!target.ok()) return target.status();
    AppendStatistics(*target, out);
    return absl::OkStatus();
  }
  if (!version.empty() && version != kInferenceVersion) {
    return absl::NotFoundError(
        absl::StrCat("qmm serves version \"", kInferenceVersion, "\" only, not \"", version, "\""));
  }
  // A model hides the weight of its name, as in ResolveInferenceModel.
  std::vector<InferenceModel> targets;
  absl::flat_hash_set<std::string> model_names;
  for (std::shared_ptr<const StoredModel>& model : models.List()) {
    model_names.insert(model->name());
    targets.push_back({.model = std::move(model), .weight = nullptr});
  }
  for (std::shared_ptr<const StoredWeight>& weight : weights.List()) {
    if (!model_names.contains(weight->name())) {
      targets.push_back({.model = nullptr, .weight = std::move(weight)});
    }
  }
  std::sort(targets.begin(), targets.end(), [](const InferenceModel& a, const InferenceModel& b) {
    return InferenceName(a) < InferenceName(b);
  });
  for (const InferenceModel& target : targets) AppendStatistics(target, out);
  return absl::OkStatus();
}

}  // namespace qmm
