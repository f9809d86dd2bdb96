#include "server/inference_json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

using nlohmann::json;

// Nested data arrays deeper than this are refused (the tensors here have rank 1 or 2).
constexpr int kMaxDataDepth = 8;

// A string as a JSON string literal; bytes that are not UTF-8 become U+FFFD.
std::string Quote(absl::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", why));
}

// Appends the leaves of `data` (a number or nested arrays of them) to `out` in row-major
// order.
absl::Status Flatten(const json& data, const std::string& field, int depth,
                     std::vector<const json*>& out) {
  if (!data.is_array()) {
    out.push_back(&data);
    return absl::OkStatus();
  }
  if (depth == kMaxDataDepth) {
    return Invalid(field, absl::StrCat("nests arrays deeper than ", kMaxDataDepth));
  }
  for (const json& item : data) {
    if (absl::Status s = Flatten(item, field, depth + 1, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

template <typename T>
void Append(T value, std::string& bytes) {
  char b[sizeof(T)];
  std::memcpy(b, &value, sizeof(T));
  bytes.append(b, sizeof(T));
}

// The JSON values of one input as little-endian bytes of `datatype`; there must be
// `expected` of them when that is known.
absl::StatusOr<std::string> DataBytes(const json& data, const std::string& field,
                                      const std::string& datatype, std::optional<int64_t> expected,
                                      absl::string_view shape) {
  std::vector<const json*> values;
  if (absl::Status s = Flatten(data, field, 0, values); !s.ok()) return s;
  if (expected && static_cast<int64_t>(values.size()) != *expected) {
    return Invalid(field, absl::StrCat("holds ", values.size(), " values, but shape ", shape,
                                       " has ", *expected));
  }
  const bool is_float = datatype == "FP32" || datatype == "FP16" || datatype == "BF16";
  const bool is_int = datatype == "INT32" || datatype == "INT64";
  if (!is_float && !is_int) {
    return Invalid(
        absl::StrCat(field.substr(0, field.rfind('.')), ".datatype"),
        absl::StrCat(Quote(datatype),
                     " cannot come as JSON data here (FP32, FP16, BF16, INT32 or INT64)"));
  }
  std::string bytes;
  for (size_t i = 0; i < values.size(); ++i) {
    const json& v = *values[i];
    if (is_float) {
      if (!v.is_number()) return Invalid(absl::StrCat(field, "[", i, "]"), "is not a number");
      const float f = static_cast<float>(v.get<double>());
      if (datatype == "FP32") {
        Append(f, bytes);
      } else if (datatype == "FP16") {
        Append(FloatToHalf(f), bytes);
      } else {
        Append(FloatToBf16(f), bytes);
      }
      continue;
    }
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return Invalid(absl::StrCat(field, "[", i, "]"), absl::StrCat("is not an ", datatype));
    }
    const int64_t n = v.get<int64_t>();
    if (datatype == "INT64") {
      Append(n, bytes);
    } else if (n < std::numeric_limits<int32_t>::min() || n > std::numeric_limits<int32_t>::max()) {
      return Invalid(absl::StrCat(field, "[", i, "]"), absl::StrCat("= ", n, " is not an INT32"));
    } else {
      Append(static_cast<int32_t>(n), bytes);
    }
  }
  return bytes;
}

// The bool parameter `key` of a "parameters" object (absent: false).
absl::StatusOr<bool> BoolParameter(const json& object, const std::string& field, const char* key) {
  if (!object.contains("parameters")) return false;
  const json& parameters = object["parameters"];
  if (!parameters.is_object())
    return Invalid(absl::StrCat(field, ".parameters"), "is not an object");
  if (!parameters.contains(key)) return false;
  if (!parameters[key].is_boolean()) {
    return Invalid(absl::StrCat(field, ".parameters.", key), "is not a boolean");
  }
  return parameters[key].get<bool>();
}

// The request's "timeout" parameter, copied as the gRPC request's int64 "timeout"
// parameter (InferTimeout checks its value on either transport); absent, nothing.
absl::Status CopyTimeout(const json& root, inference::ModelInferRequest* request) {
  if (!root.contains("parameters") || !root["parameters"].is_object() ||
      !root["parameters"].contains("timeout")) {
    return absl::OkStatus();
  }
  const json& timeout = root["parameters"]["timeout"];
  if (!timeout.is_number_integer() ||
      (timeout.is_number_unsigned() &&
       timeout.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})) {
    return Invalid("request.parameters.timeout", "is not an integer (microseconds)");
  }
  (*request->mutable_parameters())["timeout"].set_int64_param(timeout.get<int64_t>());
  return absl::OkStatus();
}

absl::StatusOr<std::string> StringField(const json& object, const std::string& field,
                                        const char* key) {
  if (!object.contains(key)) return std::string();
  if (!object[key].is_string()) return Invalid(absl::StrCat(field, key), "is not a string");
  return object[key].get<std::string>();
}

// One input of the request: its fields, and its bytes from JSON data or from `binary`
// (advanced past them).
absl::Status ParseInput(const json& input, const std::string& field, absl::string_view& binary,
                        inference::ModelInferRequest* out) {
  if (!input.is_object()) return Invalid(field, "is not an object");
  inference::ModelInferRequest::InferInputTensor* tensor = out->add_inputs();
  absl::StatusOr<std::string> name = StringField(input, field + ".", "name");
  if (!name.ok()) return name.status();
  absl::StatusOr<std::string> datatype = StringField(input, field + ".", "datatype");
  if (!datatype.ok()) return datatype.status();
  tensor->set_name(*name);
  tensor->set_datatype(*datatype);
  if (!input.contains("shape") || !input["shape"].is_array()) {
    return Invalid(field + ".shape", "is missing or not an array");
  }
  // The element count, when every dimension is a size and their product fits.
  std::optional<int64_t> elements = 1;
  for (const json& d : input["shape"]) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > (1ull << 62))) {
      return Invalid(field + ".shape", "holds something other than an integer");
    }
    const int64_t dim = d.get<int64_t>();
    tensor->add_shape(dim);
    int64_t product;
    elements = elements && dim >= 0 && !__builtin_mul_overflow(*elements, dim, &product)
                   ? std::optional<int64_t>(product)
                   : std::nullopt;
  }
  std::optional<int64_t> binary_size;
  if (input.contains("parameters")) {
    const json& parameters = input["parameters"];
    if (!parameters.is_object()) return Invalid(field + ".parameters", "is not an object");
    if (parameters.contains("binary_data_size")) {
      const json& size = parameters["binary_data_size"];
      if (!size.is_number_unsigned()) {
        return Invalid(field + ".parameters.binary_data_size", "is not a non-negative integer");
      }
      binary_size = static_cast<int64_t>(std::min<uint64_t>(size.get<uint64_t>(), 1ull << 62));
    }
  }
  if (binary_size) {
    if (input.contains("data")) {
      return Invalid(field, "has both data and parameters.binary_data_size; send one");
    }
    if (*binary_size > static_cast<int64_t>(binary.size())) {
      return Invalid(field + ".parameters.binary_data_size",
                     absl::StrCat("= ", *binary_size, " runs past the binary data (", binary.size(),
                                  " bytes left)"));
    }
    out->add_raw_input_contents(std::string(binary.substr(0, *binary_size)));
    binary.remove_prefix(*binary_size);
    return absl::OkStatus();
  }
  if (!input.contains("data")) {
    return Invalid(field, "has neither data nor parameters.binary_data_size");
  }
  absl::StatusOr<std::string> bytes =
      DataBytes(input["data"], field + ".data", *datatype, elements,
                json(std::vector<int64_t>(tensor->shape().begin(), tensor->shape().end())).dump());
  if (!bytes.ok()) return bytes.status();
  out->add_raw_input_contents(*std::move(bytes));
  return absl::OkStatus();
}

// `value` in the shortest text that reads back as the same float; null for NaN and the
// infinities, which JSON cannot hold.
void AppendNumber(float value, std::string& out) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, r.ptr);
}

void AppendValues(absl::string_view datatype, absl::string_view bytes, std::string& out) {
  out += '[';
  const size_t size = datatype == "FP32" ? 4 : 2;
  for (size_t i = 0; i + size <= bytes.size(); i += size) {
    if (i > 0) out += ',';
    if (size == 4) {
      float f;
      std::memcpy(&f, bytes.data() + i, 4);
      AppendNumber(f, out);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i, 2);
      AppendNumber(datatype == "FP16" ? HalfToFloat(h) : Bf16ToFloat(h), out);
    }
  }
  out += ']';
}

std::string ShapeJson(const google::protobuf::RepeatedField<int64_t>& shape) {
  return json(std::vector<int64_t>(shape.begin(), shape.end())).dump();
}

}  // namespace

absl::StatusOr<HttpInferRequest> ParseInferRequest(absl::string_view body,
                                                   std::optional<int64_t> json_length,
                                                   absl::string_view name,
                                                   absl::string_view version) {
  if (json_length && (*json_length < 0 || *json_length > static_cast<int64_t>(body.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length = ", *json_length, " is outside the body's ",
                     body.size(), " bytes"));
  }
  const absl::string_view text = json_length ? body.substr(0, *json_length) : body;
  absl::string_view binary = json_length ? body.substr(*json_length) : absl::string_view();
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  HttpInferRequest parsed;
  inference::ModelInferRequest& request = parsed.request;
  request.set_model_name(std::string(name));
  request.set_model_version(std::string(version));
  absl::StatusOr<std::string> id = StringField(root, "", "id");
  if (!id.ok()) return id.status();
  request.set_id(*id);
  absl::StatusOr<bool> binary_output = BoolParameter(root, "request", "binary_data_output");
  if (!binary_output.ok()) return binary_output.status();
  parsed.binary_output = *binary_output;
  if (absl::Status s = CopyTimeout(root, &request); !s.ok()) return s;

  if (!root.contains("inputs") || !root["inputs"].is_array()) {
    return absl::InvalidArgumentError("inputs is missing or not an array");
  }
  const json& inputs = root["inputs"];
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (absl::Status s = ParseInput(inputs[i], absl::StrCat("inputs[", i, "]"), binary, &request);
        !s.ok()) {
      return s;
    }
  }
  if (!binary.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(binary.size(),
                     " bytes of binary data follow the JSON that no input's binary_data_size "
                     "accounts for"));
  }
  if (root.contains("outputs")) {
    const json& outputs = root["outputs"];
    if (!outputs.is_array()) return absl::InvalidArgumentError("outputs is not an array");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string field = absl::StrCat("outputs[", i, "]");
      if (!outputs[i].is_object()) return Invalid(field, "is not an object");
      absl::StatusOr<std::string> output_name = StringField(outputs[i], field + ".", "name");
      if (!output_name.ok()) return output_name.status();
      request.add_outputs()->set_name(*output_name);
      absl::StatusOr<bool> binary_data = BoolParameter(outputs[i], field, "binary_data");
      if (!binary_data.ok()) return binary_data.status();
      parsed.binary_output |= *binary_data;
    }
  }
  return parsed;
}

std::string FormatInferResponse(const inference::ModelInferResponse& response, bool binary,
                                int64_t* json_length) {
  std::string out = absl::StrCat("{\"model_name\":", Quote(response.model_name()),
                                 ",\"model_version\":", Quote(response.model_version()));
  if (!response.id().empty()) absl::StrAppend(&out, ",\"id\":", Quote(response.id()));
  out += ",\"outputs\":[";
  for (int i = 0; i < response.outputs_size(); ++i) {
    const inference::ModelInferResponse::InferOutputTensor& tensor = response.outputs(i);
    const std::string& bytes = response.raw_output_contents(i);
    absl::StrAppend(&out, i > 0 ? "," : "", "{\"name\":", Quote(tensor.name()),
                    ",\"datatype\":", Quote(tensor.datatype()),
                    ",\"shape\":", ShapeJson(tensor.shape()));
    if (binary) {
      absl::StrAppend(&out, ",\"parameters\":{\"binary_data_size\":", bytes.size(), "}}");
    } else {
      out += ",\"data\":";
      AppendValues(tensor.datatype(), bytes, out);
      out += '}';
    }
  }
  out += "]}";
  if (binary) {
    *json_length = static_cast<int64_t>(out.size());
    for (const std::string& bytes : response.raw_output_contents()) out += bytes;
  }
  return out;
}

std::string ServerMetadataJson(const inference::ServerMetadataResponse& metadata) {
  return json{{"name", metadata.name()},
              {"version", metadata.version()},
              {"extensions", std::vector<std::string>(metadata.extensions().begin(),
                                                      metadata.extensions().end())}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelMetadataJson(const inference::ModelMetadataResponse& metadata) {
  auto tensors = [](const auto& list) {
    json out = json::array();
    for (const inference::ModelMetadataResponse::TensorMetadata& t : list) {
      out.push_back({{"name", t.name()},
                     {"datatype", t.datatype()},
                     {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
    }
    return out;
  };
  return json{{"name", metadata.name()},
              {"versions",
               std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
              {"platform", metadata.platform()},
              {"inputs", tensors(metadata.inputs())},
              {"outputs", tensors(metadata.outputs())}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelConfigJson(const inference::ModelConfig& config) {
  auto ints = [](const auto& list) { return std::vector<int64_t>(list.begin(), list.end()); };
  json inputs = json::array();
  for (const inference::ModelInput& in : config.input()) {
    json entry = {{"name", in.name()},
                  {"data_type", inference::DataType_Name(in.data_type())},
                  {"dims", ints(in.dims())}};
    if (in.has_reshape()) entry["reshape"] = {{"shape", ints(in.reshape().shape())}};
    inputs.push_back(std::move(entry));
  }
  json outputs = json::array();
  for (const inference::ModelOutput& out : config.output()) {
    outputs.push_back({{"name", out.name()},
                       {"data_type", inference::DataType_Name(out.data_type())},
                       {"dims", ints(out.dims())}});
  }
  json groups = json::array();
  for (const inference::ModelInstanceGroup& g : config.instance_group()) {
    groups.push_back({{"name", g.name()},
                      {"kind", inference::ModelInstanceGroup::Kind_Name(g.kind())},
                      {"count", g.count()}});
  }
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  return json{{"name", config.name()},
              {"platform", config.platform()},
              {"backend", config.backend()},
              {"max_batch_size", config.max_batch_size()},
              {"input", std::move(inputs)},
              {"output", std::move(outputs)},
              {"instance_group", std::move(groups)},
              {"dynamic_batching",
               {{"preferred_batch_size", ints(batching.preferred_batch_size())},
                {"max_queue_delay_microseconds", batching.max_queue_delay_microseconds()}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelStatisticsJson(const inference::ModelStatisticsResponse& response) {
  auto duration = [](const inference::StatisticDuration& d) {
    return json{{"count", d.count()}, {"ns", d.ns()}};
  };
  json models = json::array();
  for (const inference::ModelStatistics& m : response.model_stats()) {
    const inference::InferStatistics& s = m.inference_stats();
    json batches = json::array();
    for (const inference::InferBatchStatistics& b : m.batch_stats()) {
      batches.push_back({{"batch_size", b.batch_size()},
                         {"compute_input", duration(b.compute_input())},
                         {"compute_infer", duration(b.compute_infer())},
                         {"compute_output", duration(b.compute_output())}});
    }
    models.push_back({{"name", m.name()},
                      {"version", m.version()},
                      {"last_inference", m.last_inference()},
                      {"inference_count", m.inference_count()},
                      {"execution_count", m.execution_count()},
                      {"inference_stats",
                       {{"success", duration(s.success())},
                        {"fail", duration(s.fail())},
                        {"queue", duration(s.queue())},
                        {"compute_input", duration(s.compute_input())},
                        {"compute_infer", duration(s.compute_infer())},
                        {"compute_output", duration(s.compute_output())}}},
                      {"batch_stats", std::move(batches)}});
  }
  return json{{"model_stats", std::move(models)}}.dump(-1, ' ', false,
                                                       json::error_handler_t::replace);
}

std::string ErrorJson(absl::string_view message) {
  return absl::StrCat("{\"error\":", Quote(message), "}");
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

}  // namespace qmm
