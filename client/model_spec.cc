#include "client/model_spec.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/nd_array.h"
#include "client/npy.h"
#include "client/safetensors.h"
#include "kernels/format.h"
#include "nlohmann/json.hpp"

namespace qmm {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

absl::StatusOr<std::string> String(const Json& j, const std::string& path) {
  if (!j.is_string()) return Bad(path, "must be a string");
  return j.get<std::string>();
}

// j[key] as a string, from an object that must hold it.
absl::StatusOr<std::string> Field(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) return Bad(path, absl::StrCat("needs \"", key, "\""));
  return String(j.at(key), absl::StrCat(path, ".", key));
}

// A weight name given directly or as {"weight": name}.
absl::StatusOr<std::string> WeightName(const Json& j, const std::string& path) {
  if (j.is_object()) return Field(j, "weight", path);
  return String(j, path);
}

// "silu", "gelu_tanh" (or "gelu"), "relu" or "relu2" (or "relu_squared").
absl::StatusOr<v1::Activation> ActivationOf(const Json& j, const std::string& path) {
  absl::StatusOr<std::string> name = String(j, path);
  if (!name.ok()) return name.status();
  if (*name == "silu") return v1::ACTIVATION_SILU;
  if (*name == "gelu" || *name == "gelu_tanh") return v1::ACTIVATION_GELU_TANH;
  if (*name == "relu") return v1::ACTIVATION_RELU;
  if (*name == "relu2" || *name == "relu_squared") return v1::ACTIVATION_RELU_SQUARED;
  return Bad(path, absl::StrCat("\"", *name, "\" is not silu, gelu_tanh, relu or relu2"));
}

// The one-dimensional float tensor that `v` names: {"npy": FILE} or {"safetensors": FILE,
// "tensor": NAME}, a relative FILE taken from `dir`.
absl::StatusOr<std::vector<float>> FileVector(const Json& v, const std::string& at,
                                              const std::string& dir) {
  const bool npy = v.contains("npy");
  if (npy == v.contains("safetensors")) {
    return Bad(at,
               "a vector read from a file is {\"npy\": FILE} or {\"safetensors\": FILE, "
               "\"tensor\": NAME}");
  }
  absl::StatusOr<std::string> file = Field(v, npy ? "npy" : "safetensors", at);
  if (!file.ok()) return file.status();
  std::filesystem::path path(*file);
  if (path.is_relative() && !dir.empty()) path = std::filesystem::path(dir) / path;
  std::string what = path.string();
  absl::StatusOr<NdArray> array;
  if (npy) {
    array = ReadNpy(path.string());
  } else {
    absl::StatusOr<std::string> tensor = Field(v, "tensor", at);
    if (!tensor.ok()) return tensor.status();
    absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(path.string());
    array = opened.ok() ? opened->Read(*tensor) : absl::StatusOr<NdArray>(opened.status());
    absl::StrAppend(&what, " tensor ", *tensor);
  }
  if (!array.ok()) {
    return absl::Status(array.status().code(), absl::StrCat(at, ": ", array.status().message()));
  }
  const ElementType t = array->type;
  if (t != ElementType::kF16 && t != ElementType::kBF16 && t != ElementType::kF32 &&
      t != ElementType::kF64) {
    return Bad(at, absl::StrCat(what, " holds ", std::string(ElementTypeName(t)),
                                "; a vector must be f16, bf16, f32 or f64"));
  }
  if (array->shape.size() != 1) {
    return Bad(at,
               absl::StrCat(what, " has ", array->shape.size(), " dimensions; a vector has one"));
  }
  return ToFloats(*array);
}

// Appends the vector j[key] (a list, a number repeated `features` times, or a file's
// tensor) to `out`.
template <typename Repeated>
absl::Status Vector(const Json& layer, const char* key, const std::string& path,
                    const std::string& dir, Repeated* out) {
  if (!layer.contains(key)) return absl::OkStatus();
  const Json& v = layer.at(key);
  const std::string at = absl::StrCat(path, ".", key);
  if (v.is_object()) {
    absl::StatusOr<std::vector<float>> values = FileVector(v, at, dir);
    if (!values.ok()) return values.status();
    out->Add(values->begin(), values->end());
    return absl::OkStatus();
  }
  if (v.is_number()) {
    if (!layer.contains("features") || !layer.at("features").is_number_integer() ||
        layer.at("features").get<int64_t>() < 1) {
      return Bad(at, "a single number needs \"features\", a positive integer, beside it");
    }
    const int64_t n = layer.at("features").get<int64_t>();
    // No weight has more features (the server's max_dim), so no more values are sent.
    if (n > kMaxDim) {
      return Bad(absl::StrCat(path, ".features"),
                 absl::StrCat(n, " exceeds the largest dimension of a weight, ", kMaxDim));
    }
    for (int64_t i = 0; i < n; ++i) out->Add(v.get<float>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return Bad(at, "must be a number, a list of numbers or a file's tensor");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) return Bad(absl::StrCat(at, "[", i, "]"), "must be a number");
    out->Add(v[i].get<float>());
  }
  return absl::OkStatus();
}

// {"weight": VECTOR, "epsilon": number}: a rms_norm layer, or a gated_mlp's sub_norm.
absl::Status RmsNormOf(const Json& v, const std::string& at, const std::string& dir,
                       v1::RmsNormLayer* norm) {
  if (!v.is_object()) return Bad(at, "must be an object");
  if (!v.contains("epsilon") || !v.at("epsilon").is_number()) {
    return Bad(at, "needs \"epsilon\", a number");
  }
  norm->set_epsilon(v.at("epsilon").get<float>());
  if (!v.contains("weight")) return Bad(at, "needs \"weight\"");
  return Vector(v, "weight", at, dir, norm->mutable_weight());
}

absl::Status ParseLayer(const Json& j, const std::string& path, const std::string& dir,
                        v1::Layer* layer) {
  if (!j.is_object() || j.size() != 1) {
    return Bad(path, "must be an object with exactly one key, the layer kind");
  }
  const std::string kind = j.begin().key();
  const Json& v = j.begin().value();
  const std::string at = absl::StrCat(path, ".", kind);
  if (kind == "embedding") {
    absl::StatusOr<std::string> w = WeightName(v, at);
    if (!w.ok()) return w.status();
    layer->mutable_embedding()->set_weight(*w);
  } else if (kind == "linear") {
    absl::StatusOr<std::string> w = WeightName(v, at);
    if (!w.ok()) return w.status();
    layer->mutable_linear()->set_weight(*w);
    if (v.is_object()) return Vector(v, "bias", at, dir, layer->mutable_linear()->mutable_bias());
  } else if (kind == "dyt") {
    if (!v.is_object()) return Bad(at, "must be an object");
    if (!v.contains("alpha") || !v.at("alpha").is_number())
      return Bad(at, "needs \"alpha\", a number");
    v1::DyTLayer* dyt = layer->mutable_dyt();
    dyt->set_alpha(v.at("alpha").get<float>());
    if (!v.contains("gamma")) return Bad(at, "needs \"gamma\"");
    if (absl::Status s = Vector(v, "gamma", at, dir, dyt->mutable_gamma()); !s.ok()) return s;
    return Vector(v, "beta", at, dir, dyt->mutable_beta());
  } else if (kind == "rms_norm") {
    return RmsNormOf(v, at, dir, layer->mutable_rms_norm());
  } else if (kind == "activation") {
    absl::StatusOr<v1::Activation> act = ActivationOf(v, at);
    if (!act.ok()) return act.status();
    layer->mutable_activation()->set_kind(*act);
  } else if (kind == "gated_mlp") {
    if (!v.is_object()) return Bad(at, "must be an object");
    v1::GatedMlpLayer* mlp = layer->mutable_gated_mlp();
    for (const char* part : {"gate", "up", "down"}) {
      absl::StatusOr<std::string> w = Field(v, part, at);
      if (!w.ok()) return w.status();
      if (part[0] == 'g') mlp->set_gate(*w);
      if (part[0] == 'u') mlp->set_up(*w);
      if (part[0] == 'd') mlp->set_down(*w);
    }
    if (v.contains("activation")) {
      absl::StatusOr<v1::Activation> act = ActivationOf(v.at("activation"), at + ".activation");
      if (!act.ok()) return act.status();
      mlp->set_activation(*act);
    }
    if (v.contains("sub_norm")) {
      return RmsNormOf(v.at("sub_norm"), at + ".sub_norm", dir, mlp->mutable_sub_norm());
    }
  } else if (kind == "residual") {
    const Json& start = v.is_object() && v.contains("block_start") ? v.at("block_start") : v;
    if (!start.is_number_integer()) return Bad(at, "needs block_start, an integer");
    layer->mutable_residual()->set_block_start(start.get<int32_t>());
  } else {
    return Bad(path, absl::StrCat("unknown layer kind \"", kind,
                                  "\" (embedding, linear, dyt, rms_norm, activation, gated_mlp, "
                                  "residual)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CreateModelRequest> ParseModelSpec(std::string_view json_text,
                                                      const std::string& spec_dir) {
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the model spec is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the model spec must be a JSON object");
  v1::CreateModelRequest request;
  absl::StatusOr<std::string> name = Field(j, "name", "spec");
  if (!name.ok()) return name.status();
  request.set_name(*name);
  if (!j.contains("layers") || !j.at("layers").is_array()) {
    return absl::InvalidArgumentError("spec: needs \"layers\", a list");
  }
  const Json& layers = j.at("layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (absl::Status s =
            ParseLayer(layers[i], absl::StrCat("layers[", i, "]"), spec_dir, request.add_layers());
        !s.ok()) {
      return s;
    }
  }
  return request;
}

}  // namespace qmm
