// Triton's model configuration and statistics extensions of the Open Inference Protocol
// (ModelConfig, ModelStatistics; HTTP .../config and .../stats): how the server serves an
// inference model, described as the Triton config that would do the same, and what its
// requests did (server/usage_stats.h). Tools built on Triton's clients (perf_analyzer)
// read both.
#ifndef QMM_SERVER_INFERENCE_CONFIG_H_
#define QMM_SERVER_INFERENCE_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "inference/open_inference.pb.h"
#include "server/inference_convert.h"
#include "server/model_store.h"
#include "server/service_context.h"
#include "server/weight_store.h"

namespace qmm {

// What the config says of the server as a whole.
struct InferenceServing {
  int64_t max_rows = 0;        // rows of one request (--max_rows)
  int64_t max_batch_rows = 0;  // rows a launch gathers (--max_batch_rows)
  absl::Duration max_queue_delay;
  bool gpu = false;  // the CUDA backend
  int workers = 0;   // launches that run at once
};
InferenceServing ServingOf(const ServiceContext& context);

// `target`'s config: name, platform (as the metadata's), backend "qmm", max_batch_size the
// rows of one request, whose first dimension is the batch of rows, so that the input is
// "x" dims [K] (token ids: dims [1], reshaped to [] as Triton writes a batch of scalars),
// the output "y" dims [N]; dynamic batching with the server's delay and its launch size as
// the preferred batch size; one instance group of the backend's workers (KIND_GPU or
// KIND_CPU).
void FillModelConfig(const InferenceModel& target, const InferenceServing& serving,
                     inference::ModelConfigResponse* out);

// The statistics of the model `name` (ResolveInferenceModel's errors, `name_field` naming
// the name's field), or of every model and every weight that no model hides when `name`
// is empty (by name; NOT_FOUND for a version other than "1" or empty all the same).
absl::Status FillModelStatistics(absl::string_view name, absl::string_view version,
                                 absl::string_view name_field, const ModelStore& models,
                                 const WeightStore& weights,
                                 inference::ModelStatisticsResponse* out);

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_CONFIG_H_
