#include "server/inference_convert.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/dtype.h"
#include "proto/enum_convert.h"
#include "server/validation.h"

namespace qmm {
namespace {

using inference::ModelInferRequest;

// The element types qmm takes, as the protocol names them.
enum class Element { kFp32, kFp16, kBf16, kInt32, kInt64 };

struct ElementInfo {
  Element element;
  absl::string_view name;
  int64_t size;
};
constexpr ElementInfo kElements[] = {
    {Element::kFp32, "FP32", 4},   {Element::kFp16, "FP16", 2},   {Element::kBf16, "BF16", 2},
    {Element::kInt32, "INT32", 4}, {Element::kInt64, "INT64", 8},
};

const ElementInfo& Info(Element element) { return kElements[static_cast<int>(element)]; }

std::optional<Element> ElementFromName(absl::string_view name) {
  for (const ElementInfo& info : kElements) {
    if (info.name == name) return info.element;
  }
  return std::nullopt;
}

absl::string_view DTypeElementName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "FP32";
    case DType::kF16:
      return "FP16";
    case DType::kBF16:
      return "BF16";
  }
  return "FP32";
}

DType ElementDType(Element element) {
  return element == Element::kFp16   ? DType::kF16
         : element == Element::kBf16 ? DType::kBF16
                                     : DType::kF32;
}

// A client's string in an error message: quoted, escaped, and cut short, since it could
// be anything.
std::string Quoted(absl::string_view s) {
  constexpr size_t kMaxShown = 40;
  std::string shown = absl::CHexEscape(s.substr(0, kMaxShown));
  return absl::StrCat("\"", shown, s.size() > kMaxShown ? "...\"" : "\"");
}

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Every requested output must be one the model has.
absl::Status CheckRequestedOutputs(const ModelInferRequest& request, absl::string_view target) {
  for (int i = 0; i < request.outputs_size(); ++i) {
    if (request.outputs(i).name() != kInferenceOutput) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name = ", Quoted(request.outputs(i).name()), " is not an output of ",
          target, "; its output is \"", kInferenceOutput, "\""));
    }
  }
  return absl::OkStatus();
}

// The request's one input, named `name`, of one of `accepted`; returns its element type.
absl::StatusOr<Element> CheckSingleInput(const ModelInferRequest& request, absl::string_view name,
                                         std::initializer_list<Element> accepted,
                                         absl::string_view target) {
  if (request.inputs_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("inputs has ", request.inputs_size(),
                                                   " tensors, but ", target,
                                                   " takes exactly one, \"", name, "\""));
  }
  const ModelInferRequest::InferInputTensor& input = request.inputs(0);
  if (input.name() != name) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].name = ", Quoted(input.name()),
                                                   " is not an input of ", target,
                                                   "; its input is \"", name, "\""));
  }
  const std::optional<Element> element = ElementFromName(input.datatype());
  bool ok = false;
  for (Element e : accepted) ok |= element == e;
  if (!ok) {
    std::vector<absl::string_view> names;
    for (Element e : accepted) names.push_back(Info(e).name);
    return absl::InvalidArgumentError(
        absl::StrCat("inputs[0].datatype = ", Quoted(input.datatype()), " is not one that ", target,
                     " takes (", absl::StrJoin(names, ", "), ")"));
  }
  if (request.raw_input_contents_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                     " entries for one input; send one per input, or none"));
  }
  return *element;
}

// How many values `contents` holds, all fields together.
int64_t ValueCount(const inference::InferTensorContents& c) {
  return int64_t{c.bool_contents_size()} + c.int_contents_size() + c.int64_contents_size() +
         c.uint_contents_size() + c.uint64_contents_size() + c.fp32_contents_size() +
         c.fp64_contents_size() + c.bytes_contents_size();
}

// How many values `contents` holds in the field of `element` (FP32, INT32 or INT64), or
// nullopt when some are in another field.
std::optional<int64_t> TypedCount(const inference::InferTensorContents& c, Element element) {
  const int64_t own = element == Element::kFp32    ? c.fp32_contents_size()
                      : element == Element::kInt32 ? c.int_contents_size()
                                                   : c.int64_contents_size();
  if (ValueCount(c) != own) return std::nullopt;
  return own;
}

// Checks that inputs[0], of shape [rows, cols] or [rows] (cols 1) as already checked,
// carries exactly its elements of `element`, raw or typed.
absl::Status CheckContents(const ModelInferRequest& request, Element element, int64_t rows,
                           int64_t cols) {
  const ModelInferRequest::InferInputTensor& input = request.inputs(0);
  const ElementInfo& info = Info(element);
  const std::string shape = ShapeText(input.shape());
  // rows <= max_rows and cols <= kMaxDim; a server with a huge max_rows could still
  // overflow.
  const std::optional<int64_t> elements = CheckedMul(rows, cols);
  const std::optional<int64_t> bytes = elements ? CheckedMul(*elements, info.size) : std::nullopt;
  if (!bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs[0].shape = ", shape, " has more elements than a message can hold"));
  }
  const int64_t count = *elements;
  if (request.raw_input_contents_size() == 1) {
    if (ValueCount(input.contents()) > 0) {
      return absl::InvalidArgumentError(
          "inputs[0].contents holds values as well as raw_input_contents[0]; send one or the "
          "other");
    }
    const int64_t got = static_cast<int64_t>(request.raw_input_contents(0).size());
    if (got != *bytes) {
      return absl::InvalidArgumentError(absl::StrCat("raw_input_contents[0] is ", got,
                                                     " bytes, but inputs[0] of shape ", shape,
                                                     " and ", info.name, " needs ", *bytes));
    }
    return absl::OkStatus();
  }
  if (element == Element::kFp16 || element == Element::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs[0] is ", info.name,
                     ", which has no typed contents field: send it in raw_input_contents"));
  }
  const std::optional<int64_t> typed = TypedCount(input.contents(), element);
  if (!typed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs[0].contents holds values in a field other than the one of ", info.name));
  }
  if (*typed != count) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].contents holds ", *typed,
                                                   " values, but shape ", shape, " has ", count));
  }
  return absl::OkStatus();
}

// Checks inputs[0] as the float rows [M, features] of `target` and returns M.
absl::StatusOr<int64_t> CheckFloatRows(const ModelInferRequest& request, int64_t features,
                                       const ServiceLimits& limits, absl::string_view target) {
  const google::protobuf::RepeatedField<int64_t>& shape = request.inputs(0).shape();
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].shape = ", ShapeText(shape), " has ",
                                                   shape.size(), " dimensions, but ", target,
                                                   " takes [M, ", features, "]"));
  }
  if (shape[0] < 1 || shape[0] > limits.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].shape[0] = ", shape[0],
                                                   " (M) must be in [1, ", limits.max_rows,
                                                   "] (max_rows)"));
  }
  if (shape[1] != features) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].shape[1] = ", shape[1], ", but ",
                                                   target, " takes ", features, " features"));
  }
  return shape[0];
}

// The float input's elements as little-endian bytes of its own dtype.
std::string FloatBytes(const ModelInferRequest& request) {
  if (request.raw_input_contents_size() == 1) return request.raw_input_contents(0);
  const google::protobuf::RepeatedField<float>& values =
      request.inputs(0).contents().fp32_contents();
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

void SetInputTensor(const ModelInferRequest& request, Element element, int64_t m, int64_t features,
                    v1::Tensor* tensor) {
  tensor->set_dtype(DTypeToProto(ElementDType(element)));
  tensor->add_shape(m);
  tensor->add_shape(features);
  *tensor->mutable_data() = FloatBytes(request);
}

// The token ids of inputs[0] (M of them, checked), each within int32 or reported as
// outside the vocabulary [0, vocab).
absl::Status ReadTokenIds(const ModelInferRequest& request, Element element, int64_t m,
                          int64_t vocab, google::protobuf::RepeatedField<int32_t>* ids) {
  ids->Reserve(static_cast<int>(m));
  const bool raw = request.raw_input_contents_size() == 1;
  const inference::InferTensorContents& typed = request.inputs(0).contents();
  for (int64_t i = 0; i < m; ++i) {
    int64_t id = 0;
    if (element == Element::kInt32) {
      int32_t v;
      if (raw) {
        std::memcpy(&v, request.raw_input_contents(0).data() + i * sizeof(v), sizeof(v));
      } else {
        v = typed.int_contents(static_cast<int>(i));
      }
      id = v;
    } else if (raw) {
      std::memcpy(&id, request.raw_input_contents(0).data() + i * sizeof(id), sizeof(id));
    } else {
      id = typed.int64_contents(static_cast<int>(i));
    }
    // Ids beyond int32 cannot be in any vocabulary; the rest CheckForwardInput checks.
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
    ids->Add(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferenceModel> ResolveInferenceModel(absl::string_view name,
                                                     absl::string_view version,
                                                     absl::string_view name_field,
                                                     const ModelStore& models,
                                                     const WeightStore& weights) {
  if (absl::Status s = CheckWeightName(name, name_field); !s.ok()) return s;
  if (!version.empty() && version != kInferenceVersion) {
    return absl::NotFoundError(absl::StrCat("model \"", name, "\" has no version ", Quoted(version),
                                            "; qmm serves version \"", kInferenceVersion,
                                            "\" only"));
  }
  InferenceModel target;
  if (absl::StatusOr<std::shared_ptr<const StoredModel>> model = models.Get(name); model.ok()) {
    target.model = *std::move(model);
    return target;
  }
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = weights.Get(name);
  if (!weight.ok()) {
    return absl::NotFoundError(
        absl::StrCat("no model or weight named \"", name, "\" on this server"));
  }
  target.weight = *std::move(weight);
  return target;
}

bool InferenceServerReady(const std::atomic<bool>& serving, const Backend& backend) {
  return serving.load(std::memory_order_acquire) && backend.healthy();
}

absl::StatusOr<bool> InferenceModelReady(absl::string_view name, absl::string_view version,
                                         absl::string_view name_field, bool server_ready,
                                         const ModelStore& models, const WeightStore& weights) {
  absl::StatusOr<InferenceModel> target =
      ResolveInferenceModel(name, version, name_field, models, weights);
  if (!target.ok() && target.status().code() != absl::StatusCode::kNotFound) {
    return target.status();
  }
  return target.ok() && server_ready;
}

void FillServerMetadata(inference::ServerMetadataResponse* out) {
  out->Clear();
  out->set_name("qmm");
  out->set_version(QMM_VERSION);
  // Triton's names for what server/inference_config.h serves; the other extensions (the
  // model repository, shared memory, ...) are not.
  out->add_extensions("model_configuration");
  out->add_extensions("statistics");
}

absl::StatusOr<absl::Duration> InferTimeout(const inference::ModelInferRequest& request) {
  const auto it = request.parameters().find("timeout");
  if (it == request.parameters().end()) return absl::InfiniteDuration();
  if (it->second.parameter_choice_case() != inference::InferParameter::kInt64Param) {
    return absl::InvalidArgumentError(
        "parameters[\"timeout\"] must be an int64_param: microseconds the request may wait "
        "before it launches (0: no limit)");
  }
  const int64_t us = it->second.int64_param();
  if (us < 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameters[\"timeout\"] = ", us,
                                                   " must be at least 0 (microseconds; 0: no "
                                                   "limit)"));
  }
  return us == 0 ? absl::InfiniteDuration() : absl::Microseconds(us);
}

InferenceTensors DescribeTensors(const InferenceModel& target) {
  // A float input may be any of FP32, FP16 and BF16 and the output follows it: FP16 is
  // what decode clients send.
  if (target.model != nullptr) {
    const ModelSpec& spec = target.model->spec();
    if (spec.token_input) {
      return {.input = {.name = kInferenceTokenInput, .datatype = "INT32", .width = 0},
              .output = {.name = kInferenceOutput, .datatype = "FP32", .width = spec.out_features}};
    }
    return {.input = {.name = kInferenceInput, .datatype = "FP16", .width = spec.in_features},
            .output = {.name = kInferenceOutput, .datatype = "FP16", .width = spec.out_features}};
  }
  const WeightShape& shape = target.weight->desc().shape;
  return {.input = {.name = kInferenceInput, .datatype = "FP16", .width = shape.k},
          .output = {.name = kInferenceOutput, .datatype = "FP16", .width = shape.n}};
}

const std::string& InferenceName(const InferenceModel& target) {
  return target.model != nullptr ? target.model->name() : target.weight->name();
}

std::string InferencePlatform(const InferenceModel& target) {
  if (target.model != nullptr) return "qmm_forward";
  return absl::StrCat("qmm_",
                      absl::AsciiStrToLower(std::string(SchemeName(target.weight->desc().scheme))));
}

void FillModelMetadata(const InferenceModel& target, inference::ModelMetadataResponse* out) {
  out->Clear();
  out->set_name(InferenceName(target));
  out->add_versions(std::string(kInferenceVersion));
  out->set_platform(InferencePlatform(target));
  const InferenceTensors tensors = DescribeTensors(target);
  for (const auto& [tensor, metadata] : {std::pair{tensors.input, out->add_inputs()},
                                         std::pair{tensors.output, out->add_outputs()}}) {
    metadata->set_name(std::string(tensor.name));
    metadata->set_datatype(std::string(tensor.datatype));
    metadata->add_shape(-1);  // the rows
    if (tensor.width > 0) metadata->add_shape(tensor.width);
  }
}

absl::Status ToMatMulRequest(const ModelInferRequest& request, const StoredWeight& weight,
                             const ServiceLimits& limits, v1::MatMulRequest* out) {
  out->Clear();
  const std::string target = absl::StrCat("weight \"", weight.name(), "\"");
  if (absl::Status s = CheckRequestedOutputs(request, target); !s.ok()) return s;
  absl::StatusOr<Element> element = CheckSingleInput(
      request, kInferenceInput, {Element::kFp32, Element::kFp16, Element::kBf16}, target);
  if (!element.ok()) return element.status();
  const int64_t k = weight.desc().shape.k;
  absl::StatusOr<int64_t> m = CheckFloatRows(request, k, limits, target);
  if (!m.ok()) return m.status();
  if (absl::Status s = CheckContents(request, *element, *m, k); !s.ok()) return s;
  out->set_weight(weight.name());
  SetInputTensor(request, *element, *m, k, out->mutable_input());
  return absl::OkStatus();
}

absl::Status ToForwardRequest(const ModelInferRequest& request, const ModelSpec& model,
                              const ServiceLimits& limits, v1::ForwardRequest* out) {
  out->Clear();
  const std::string target = absl::StrCat("model \"", model.name, "\"");
  if (absl::Status s = CheckRequestedOutputs(request, target); !s.ok()) return s;
  out->set_model(model.name);
  if (!model.token_input) {
    absl::StatusOr<Element> element = CheckSingleInput(
        request, kInferenceInput, {Element::kFp32, Element::kFp16, Element::kBf16}, target);
    if (!element.ok()) return element.status();
    absl::StatusOr<int64_t> m = CheckFloatRows(request, model.in_features, limits, target);
    if (!m.ok()) return m.status();
    if (absl::Status s = CheckContents(request, *element, *m, model.in_features); !s.ok()) {
      return s;
    }
    SetInputTensor(request, *element, *m, model.in_features, out->mutable_input());
    return absl::OkStatus();
  }
  absl::StatusOr<Element> element =
      CheckSingleInput(request, kInferenceTokenInput, {Element::kInt32, Element::kInt64}, target);
  if (!element.ok()) return element.status();
  const google::protobuf::RepeatedField<int64_t>& shape = request.inputs(0).shape();
  // [M, 1] is how Triton's clients send a batch of scalars (the model config's dims [1]).
  if (shape.size() != 1 && !(shape.size() == 2 && shape[1] == 1)) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].shape = ", ShapeText(shape),
                                                   " is not [M] or [M, 1], but ", target,
                                                   " takes token ids [M]"));
  }
  if (shape[0] < 1 || shape[0] > limits.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].shape[0] = ", shape[0],
                                                   " (M) must be in [1, ", limits.max_rows,
                                                   "] (max_rows)"));
  }
  if (absl::Status s = CheckContents(request, *element, shape[0], 1); !s.ok()) return s;
  // An embedding is layer 0 of a token model (server/model.h), its table weight's rows the
  // vocabulary.
  const int64_t vocab = model.layers[0].weights[0]->desc().shape.n;
  return ReadTokenIds(request, *element, shape[0], vocab, out->mutable_token_ids());
}

void ToInferResponse(const ModelInferRequest& request, v1::Tensor& output,
                     inference::ModelInferResponse* out) {
  out->Clear();
  out->set_model_name(request.model_name());
  out->set_model_version(std::string(kInferenceVersion));
  out->set_id(request.id());
  inference::ModelInferResponse::InferOutputTensor* tensor = out->add_outputs();
  tensor->set_name(std::string(kInferenceOutput));
  const std::optional<DType> dtype = DTypeFromProto(output.dtype());
  tensor->set_datatype(std::string(DTypeElementName(dtype.value_or(DType::kF32))));
  *tensor->mutable_shape() = output.shape();
  out->add_raw_output_contents()->swap(*output.mutable_data());
}

}  // namespace qmm
