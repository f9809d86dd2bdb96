// The Open Inference Protocol's view of what the server holds
// (proto/inference/open_inference.proto): which model or weight a name means, its
// metadata, and ModelInfer requests turned into qmm.v1 MatMul and Forward requests, whose
// results come back as ModelInferResponses. Checks that the protocol defines (one raw entry
// per input, contents that match the shape and datatype, known input and output names)
// are made here, with errors naming the protocol's fields ("inputs[0].shape"); the qmm.v1
// request they produce then goes through PrepareMatMul or PrepareForward like any other.
#ifndef QMM_SERVER_INFERENCE_CONVERT_H_
#define QMM_SERVER_INFERENCE_CONVERT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "inference/open_inference.pb.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/limits.h"
#include "server/model.h"
#include "server/model_store.h"
#include "server/weight_store.h"

namespace qmm {

// The one version of every inference model, and the tensor names.
inline constexpr absl::string_view kInferenceVersion = "1";
inline constexpr absl::string_view kInferenceInput = "x";
inline constexpr absl::string_view kInferenceTokenInput = "token_ids";
inline constexpr absl::string_view kInferenceOutput = "y";

// What an inference model name stands for: the model of that name when there is one,
// otherwise the weight of that name. Exactly one is set.
struct InferenceModel {
  std::shared_ptr<const StoredModel> model;
  std::shared_ptr<const StoredWeight> weight;
};

// INVALID_ARGUMENT for a malformed name (`name_field` names its field); NOT_FOUND when
// neither a model nor a weight has that name, or `version` is neither empty nor
// kInferenceVersion.
absl::StatusOr<InferenceModel> ResolveInferenceModel(absl::string_view name,
                                                     absl::string_view version,
                                                     absl::string_view name_field,
                                                     const ModelStore& models,
                                                     const WeightStore& weights);

// The protocol's server readiness: the server serves (`serving`, false while it drains)
// and its backend is healthy.
bool InferenceServerReady(const std::atomic<bool>& serving, const Backend& backend);

// The protocol's model readiness: the model resolves (ResolveInferenceModel) and the
// server is ready. An unknown model or version is not ready; a malformed name is
// INVALID_ARGUMENT.
absl::StatusOr<bool> InferenceModelReady(absl::string_view name, absl::string_view version,
                                         absl::string_view name_field, bool server_ready,
                                         const ModelStore& models, const WeightStore& weights);

// Name "qmm", the version, and the extensions "model_configuration" and "statistics".
void FillServerMetadata(inference::ServerMetadataResponse* out);

// One tensor of an inference model, its rows apart: `width` values a row, 0 for one value
// (the token ids [M]).
struct InferenceTensor {
  absl::string_view name;
  absl::string_view datatype;  // the protocol's name ("FP16")
  int64_t width = 0;
};
struct InferenceTensors {
  InferenceTensor input;
  InferenceTensor output;
};
// `target`'s input and output: "x" [M, K] (or "token_ids" [M]) and "y" [M, N], FP16 (a
// token model's output FP32) as the datatype a client would send and get.
InferenceTensors DescribeTensors(const InferenceModel& target);
const std::string& InferenceName(const InferenceModel& target);
// "qmm_forward" for a model, "qmm_" and the scheme ("qmm_w4a16") for a weight.
std::string InferencePlatform(const InferenceModel& target);

// Name, version, platform and the tensors of DescribeTensors, with -1 for the rows.
void FillModelMetadata(const InferenceModel& target, inference::ModelMetadataResponse* out);

// The request's "timeout" parameter (Triton's schedule-policy parameter): how long, in
// microseconds from its arrival, the request may wait before it launches; a request still
// queued then never launches and fails with DEADLINE_EXCEEDED, as one past its gRPC
// deadline does. Absent or 0: no limit (InfiniteDuration). INVALID_ARGUMENT naming
// parameters["timeout"] when it is not an int64_param or is negative.
absl::StatusOr<absl::Duration> InferTimeout(const inference::ModelInferRequest& request);

// Checks `request`'s tensors against `weight` and writes the MatMul they ask for into
// `out` (cleared first). INVALID_ARGUMENT naming the field for anything the weight cannot
// take: not exactly one input "x" of FP32, FP16 or BF16, a shape other than [M, K] with 1
// <= M <= max_rows, contents that are not exactly the shape's elements (raw or, for FP32,
// fp32_contents), a requested output other than "y".
absl::Status ToMatMulRequest(const inference::ModelInferRequest& request,
                             const StoredWeight& weight, const ServiceLimits& limits,
                             v1::MatMulRequest* out);

// The same against `model`: input "x" [M, in_features], or "token_ids" [M] of INT32 or
// INT64 (raw, int_contents or int64_contents) for a model that starts with an embedding.
absl::Status ToForwardRequest(const inference::ModelInferRequest& request, const ModelSpec& model,
                              const ServiceLimits& limits, v1::ForwardRequest* out);

// Writes the answer to `request` into `out` (cleared first): its model name and id, the
// version, and output "y" from `output`, whose data is moved into raw_output_contents.
void ToInferResponse(const inference::ModelInferRequest& request, v1::Tensor& output,
                     inference::ModelInferResponse* out);

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_CONVERT_H_
