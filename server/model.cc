#include "server/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/format.h"
#include "proto/enum_convert.h"
#include "server/proto_convert.h"
#include "server/validation.h"

namespace qmm {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

absl::Status CheckFinite(std::span<const float> values, absl::string_view field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", values[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

// Empty, or exactly `count` finite values.
absl::Status CheckOptionalVector(std::span<const float> values, int64_t count,
                                 absl::string_view field, absl::string_view count_name) {
  if (!values.empty() && static_cast<int64_t>(values.size()) != count) {
    return Invalid(field, absl::StrCat("has ", values.size(), " values; must be empty or ", count,
                                       " (", count_name, ")"));
  }
  return CheckFinite(values, field);
}

absl::StatusOr<std::shared_ptr<const StoredWeight>> Resolve(const WeightStore& store,
                                                            const std::string& name,
                                                            const std::string& field) {
  if (absl::Status s = CheckWeightName(name, field); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = store.Get(name);
  if (!weight.ok()) {
    return absl::NotFoundError(absl::StrCat(field, ": weight \"", name, "\" not found"));
  }
  return weight;
}

std::string WeightLabel(const StoredWeight& w) {
  const WeightShape& s = w.desc().shape;
  return absl::StrCat("weight \"", w.name(), "\" [N = ", s.n, ", K = ", s.k, "]");
}

// `features` is the layer's input width (0 before a first layer fixed it).
absl::Status CheckInputWidth(const StoredWeight& w, int64_t features, const std::string& field) {
  if (features != 0 && w.desc().shape.k != features) {
    return Invalid(field, absl::StrCat(WeightLabel(w), " needs ", w.desc().shape.k,
                                       " input features, but the layer's input has ", features));
  }
  return absl::OkStatus();
}

// An RMSNorm's weight, `f` values (or as many as it has, when f is 0: a first layer), each
// one `per` (what a value scales), and its epsilon; fills layer.gamma and layer.epsilon.
absl::Status CheckRmsNorm(const v1::RmsNormLayer& norm, int64_t f, const std::string& field,
                          absl::string_view per, LayerSpec& layer) {
  const std::span<const float> weight(norm.weight().data(), norm.weight_size());
  if (f == 0) f = static_cast<int64_t>(weight.size());
  if (weight.empty() || static_cast<int64_t>(weight.size()) != f) {
    return Invalid(
        field + ".weight",
        absl::StrCat("has ", weight.size(), " values; must have one per ", per, " (", f, ")"));
  }
  if (f > kMaxDim) {
    return Invalid(field + ".weight",
                   absl::StrCat("has ", f, " values, more than the ", kMaxDim, " allowed"));
  }
  if (absl::Status s = CheckFinite(weight, field + ".weight"); !s.ok()) return s;
  // A zero epsilon would divide a row of zeros by zero.
  if (!std::isfinite(norm.epsilon()) || norm.epsilon() <= 0.0f) {
    return Invalid(field + ".epsilon",
                   absl::StrCat(norm.epsilon(), " must be finite and positive"));
  }
  layer.gamma.assign(weight.begin(), weight.end());
  layer.epsilon = norm.epsilon();
  return absl::OkStatus();
}

// The activations a layer may name.
absl::StatusOr<Activation> CheckActivation(v1::Activation kind, const std::string& field) {
  const std::optional<Activation> act = ActivationFromProto(kind);
  if (!act) {
    return Invalid(field, absl::StrCat(static_cast<int>(kind),
                                       " is not ACTIVATION_SILU, ACTIVATION_GELU_TANH, "
                                       "ACTIVATION_RELU or ACTIVATION_RELU_SQUARED"));
  }
  return *act;
}

// Checks layer `index` given its input width `features` (0: not fixed yet) and fills
// `layer`, including its out_features.
absl::Status CheckLayer(const v1::Layer& proto, int index, int64_t features,
                        const std::vector<LayerSpec>& previous, const WeightStore& store,
                        LayerSpec& layer) {
  const std::string at = absl::StrCat("layers[", index, "]");
  layer.in_features = features;
  switch (proto.kind_case()) {
    case v1::Layer::kEmbedding: {
      const std::string field = at + ".embedding.weight";
      if (index != 0) {
        return Invalid(field, "an embedding can only be layer 0 (it takes token ids)");
      }
      absl::StatusOr<std::shared_ptr<const StoredWeight>> table =
          Resolve(store, proto.embedding().weight(), field);
      if (!table.ok()) return table.status();
      const Scheme scheme = (*table)->desc().scheme;
      if (scheme != Scheme::kFp16 && scheme != Scheme::kBf16) {
        return Invalid(field,
                       absl::StrCat(WeightLabel(**table), " is ", std::string(SchemeName(scheme)),
                                    "; an embedding table must be FP16 or BF16"));
      }
      layer.kind = LayerKind::kEmbedding;
      layer.out_features = (*table)->desc().shape.k;
      layer.weights.push_back(*std::move(table));
      return absl::OkStatus();
    }
    case v1::Layer::kLinear: {
      const std::string field = at + ".linear.weight";
      absl::StatusOr<std::shared_ptr<const StoredWeight>> w =
          Resolve(store, proto.linear().weight(), field);
      if (!w.ok()) return w.status();
      if (absl::Status s = CheckInputWidth(**w, features, field); !s.ok()) return s;
      const int64_t n = (*w)->desc().shape.n;
      const std::span<const float> bias(proto.linear().bias().data(), proto.linear().bias_size());
      if (absl::Status s = CheckOptionalVector(bias, n, at + ".linear.bias", "the weight's N");
          !s.ok()) {
        return s;
      }
      layer.kind = LayerKind::kLinear;
      layer.in_features = (*w)->desc().shape.k;
      layer.out_features = n;
      layer.bias.assign(bias.begin(), bias.end());
      layer.weights.push_back(*std::move(w));
      return absl::OkStatus();
    }
    case v1::Layer::kDyt: {
      const v1::DyTLayer& dyt = proto.dyt();
      if (!std::isfinite(dyt.alpha())) {
        return Invalid(at + ".dyt.alpha", absl::StrCat(dyt.alpha(), " is not finite"));
      }
      const std::span<const float> gamma(dyt.gamma().data(), dyt.gamma_size());
      const int64_t f = features != 0 ? features : static_cast<int64_t>(gamma.size());
      if (gamma.empty() || static_cast<int64_t>(gamma.size()) != f) {
        return Invalid(at + ".dyt.gamma", absl::StrCat("has ", gamma.size(),
                                                       " values; must have one per input "
                                                       "feature (",
                                                       f, ")"));
      }
      if (f > kMaxDim) {
        return Invalid(at + ".dyt.gamma",
                       absl::StrCat("has ", f, " values, more than the ", kMaxDim, " allowed"));
      }
      if (absl::Status s = CheckFinite(gamma, at + ".dyt.gamma"); !s.ok()) return s;
      const std::span<const float> beta(dyt.beta().data(), dyt.beta_size());
      if (absl::Status s = CheckOptionalVector(beta, f, at + ".dyt.beta", "one per feature");
          !s.ok()) {
        return s;
      }
      layer.kind = LayerKind::kDyT;
      layer.alpha = dyt.alpha();
      layer.gamma.assign(gamma.begin(), gamma.end());
      layer.beta.assign(beta.begin(), beta.end());
      layer.in_features = layer.out_features = f;
      return absl::OkStatus();
    }
    case v1::Layer::kRmsNorm: {
      if (absl::Status s =
              CheckRmsNorm(proto.rms_norm(), features, at + ".rms_norm", "input feature", layer);
          !s.ok()) {
        return s;
      }
      layer.kind = LayerKind::kRmsNorm;
      layer.in_features = layer.out_features = static_cast<int64_t>(layer.gamma.size());
      return absl::OkStatus();
    }
    case v1::Layer::kActivation: {
      const absl::StatusOr<Activation> act =
          CheckActivation(proto.activation().kind(), at + ".activation.kind");
      if (!act.ok()) return act.status();
      if (features == 0) {
        return Invalid(at,
                       "an activation cannot be layer 0: the model's first layer fixes its "
                       "input features (embedding, linear, dyt, rms_norm or gated_mlp)");
      }
      layer.kind = LayerKind::kActivation;
      layer.activation = *act;
      layer.out_features = features;
      return absl::OkStatus();
    }
    case v1::Layer::kGatedMlp: {
      const v1::GatedMlpLayer& mlp = proto.gated_mlp();
      const std::string names[] = {mlp.gate(), mlp.up(), mlp.down()};
      const char* parts[] = {"gate", "up", "down"};
      for (int p = 0; p < 3; ++p) {
        const std::string field = absl::StrCat(at, ".gated_mlp.", parts[p]);
        absl::StatusOr<std::shared_ptr<const StoredWeight>> w = Resolve(store, names[p], field);
        if (!w.ok()) return w.status();
        layer.weights.push_back(*std::move(w));
      }
      const StoredWeight& gate = *layer.weights[0];
      const StoredWeight& up = *layer.weights[1];
      const StoredWeight& down = *layer.weights[2];
      if (absl::Status s = CheckInputWidth(gate, features, at + ".gated_mlp.gate"); !s.ok()) {
        return s;
      }
      const int64_t f = gate.desc().shape.k;
      if (up.desc().shape.k != f || up.desc().shape.n != gate.desc().shape.n) {
        return Invalid(
            at + ".gated_mlp.up",
            absl::StrCat(WeightLabel(up), " must have the shape of the gate, ", WeightLabel(gate)));
      }
      if (down.desc().shape.k != gate.desc().shape.n) {
        return Invalid(
            at + ".gated_mlp.down",
            absl::StrCat(WeightLabel(down), " needs K = ", gate.desc().shape.n, " (the gate's N)"));
      }
      if (mlp.activation() != v1::ACTIVATION_UNSPECIFIED) {
        const absl::StatusOr<Activation> act =
            CheckActivation(mlp.activation(), at + ".gated_mlp.activation");
        if (!act.ok()) return act.status();
        layer.gate_activation = *act;
      }
      if (mlp.has_sub_norm()) {
        if (absl::Status s =
                CheckRmsNorm(mlp.sub_norm(), gate.desc().shape.n, at + ".gated_mlp.sub_norm",
                             "feature of act(gate) * up (the gate's N)", layer);
            !s.ok()) {
          return s;
        }
      }
      layer.kind = LayerKind::kGatedMlp;
      layer.in_features = f;
      layer.out_features = down.desc().shape.n;
      return absl::OkStatus();
    }
    case v1::Layer::kResidual: {
      const int32_t start = proto.residual().block_start();
      const std::string field = at + ".residual.block_start";
      if (start < 0 || start >= index) {
        return Invalid(field,
                       absl::StrCat(start, " must name an earlier layer, in [0, ", index, ")"));
      }
      const LayerSpec& first = previous[start];
      if (first.kind == LayerKind::kEmbedding) {
        return Invalid(field, "the block cannot start at the embedding: its input is token ids");
      }
      if (first.in_features != features) {
        return Invalid(field, absl::StrCat("the block's input has ", first.in_features,
                                           " features but its output has ", features,
                                           "; a residual adds the two"));
      }
      layer.kind = LayerKind::kResidual;
      layer.block_start = start;
      layer.out_features = features;
      return absl::OkStatus();
    }
    case v1::Layer::KIND_NOT_SET:
      break;
  }
  return Invalid(at, "no layer kind is set");
}

}  // namespace

absl::StatusOr<ModelSpec> CheckModel(const v1::CreateModelRequest& request,
                                     const WeightStore& store) {
  if (absl::Status s = CheckWeightName(request.name(), "name"); !s.ok()) return s;
  if (request.layers_size() < 1 || request.layers_size() > kMaxModelLayers) {
    return absl::InvalidArgumentError(absl::StrCat("layers has ", request.layers_size(),
                                                   " entries; a model has 1 to ", kMaxModelLayers));
  }
  ModelSpec spec;
  spec.name = request.name();
  spec.layers.reserve(request.layers_size());
  std::set<std::string> weight_names;
  int64_t features = 0;
  for (int i = 0; i < request.layers_size(); ++i) {
    LayerSpec layer;
    if (absl::Status s = CheckLayer(request.layers(i), i, features, spec.layers, store, layer);
        !s.ok()) {
      return s;
    }
    if (i == 0) {
      spec.token_input = layer.kind == LayerKind::kEmbedding;
      spec.in_features = layer.in_features;
    }
    spec.max_features = std::max({spec.max_features, layer.in_features, layer.out_features});
    for (const auto& w : layer.weights) {
      weight_names.insert(w->name());
      // A GatedMLP's intermediate (the gate's N) is wider than its ends, often.
      spec.max_features = std::max(spec.max_features, w->desc().shape.n);
      spec.has_w2a8 |= w->desc().scheme == Scheme::kW2A8;
    }
    spec.param_bytes += static_cast<int64_t>(
        (layer.bias.size() + layer.gamma.size() + layer.beta.size()) * sizeof(float));
    features = layer.out_features;
    spec.layers.push_back(std::move(layer));
    spec.layer_protos.push_back(request.layers(i));
  }
  spec.out_features = features;
  spec.weight_names.assign(weight_names.begin(), weight_names.end());
  return spec;
}

std::vector<ModelLayer> BackendLayers(const ModelSpec& spec) {
  std::vector<ModelLayer> out;
  out.reserve(spec.layers.size());
  for (const LayerSpec& l : spec.layers) {
    ModelLayer b;
    b.kind = l.kind;
    for (size_t i = 0; i < l.weights.size() && i < 3; ++i) {
      b.weights[i] = &l.weights[i]->backend_weight();
    }
    b.bias = l.bias;
    b.alpha = l.alpha;
    b.epsilon = l.epsilon;
    b.gamma = l.gamma;
    b.beta = l.beta;
    b.activation = l.activation;
    b.gate_activation = l.gate_activation;
    b.block_start = l.block_start;
    b.in_features = l.in_features;
    b.out_features = l.out_features;
    out.push_back(b);
  }
  return out;
}

void FillModelInfo(const ModelSpec& spec, bool with_params, v1::ModelInfo* info) {
  info->set_name(spec.name);
  for (const v1::Layer& layer : spec.layer_protos) {
    v1::Layer* out = info->add_layers();
    *out = layer;
    if (!with_params) {
      if (out->has_linear()) out->mutable_linear()->clear_bias();
      if (out->has_dyt()) {
        out->mutable_dyt()->clear_gamma();
        out->mutable_dyt()->clear_beta();
      }
      if (out->has_rms_norm()) out->mutable_rms_norm()->clear_weight();
      if (out->has_gated_mlp() && out->gated_mlp().has_sub_norm()) {
        out->mutable_gated_mlp()->mutable_sub_norm()->clear_weight();
      }
    }
  }
  info->set_token_input(spec.token_input);
  info->set_in_features(spec.in_features);
  info->set_out_features(spec.out_features);
  for (const std::string& name : spec.weight_names) info->add_weights(name);
  info->set_param_bytes(spec.param_bytes);
}

namespace {

absl::StatusOr<DType> CheckTensorDType(v1::DType dtype, absl::string_view field) {
  std::optional<DType> out = DTypeFromProto(dtype);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", static_cast<int>(dtype),
                     " is not a supported dtype (DTYPE_FP32, DTYPE_FP16 or DTYPE_BF16)"));
  }
  return *out;
}

absl::Status CheckRows(int64_t m, absl::string_view field, const ServiceLimits& limits) {
  if (m < 1)
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", m, " (M) must be at least 1"));
  if (m > limits.max_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", m, " (M) exceeds max_rows ", limits.max_rows));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ForwardSpec> CheckForwardInput(const v1::ForwardRequest& request,
                                              const ModelSpec& model, const ServiceLimits& limits) {
  ForwardSpec spec;
  if (model.token_input) {
    if (request.has_input()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input is set, but model \"", model.name, "\" starts with an embedding: send token_ids"));
    }
    spec.m = request.token_ids_size();
    if (absl::Status s = CheckRows(spec.m, "token_ids size", limits); !s.ok()) return s;
    const int64_t vocab = model.layers[0].weights[0]->desc().shape.n;
    for (int64_t i = 0; i < spec.m; ++i) {
      const int32_t id = request.token_ids(static_cast<int>(i));
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token_ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
    spec.x_dtype = DType::kF32;
  } else {
    if (request.token_ids_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat("token_ids are set, but model \"", model.name,
                                                     "\" takes an input tensor (no embedding)"));
    }
    const v1::Tensor& input = request.input();
    absl::StatusOr<DType> x_dtype = CheckTensorDType(input.dtype(), "input.dtype");
    if (!x_dtype.ok()) return x_dtype.status();
    spec.x_dtype = *x_dtype;
    if (input.shape_size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("input.shape has ", input.shape_size(),
                                                     " dimensions, must be 2 ([M, in_features])"));
    }
    spec.m = input.shape(0);
    if (absl::Status s = CheckRows(spec.m, "input.shape[0]", limits); !s.ok()) return s;
    if (input.shape(1) != model.in_features) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input.shape[1] = ", input.shape(1), " does not match in_features = ", model.in_features,
          " of model \"", model.name, "\""));
    }
    // M <= max_rows and features <= kMaxDim keep these products far from overflow.
    const int64_t x_elements = spec.m * model.in_features;
    const int64_t x_bytes = x_elements * static_cast<int64_t>(DTypeSize(spec.x_dtype));
    if (static_cast<int64_t>(input.data().size()) != x_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input.data is ", input.data().size(), " bytes, but shape [", spec.m, ", ",
          model.in_features, "] of ", std::string(DTypeName(spec.x_dtype)), " needs ", x_bytes));
    }
    if (model.has_w2a8) {
      std::vector<float> x(x_elements);
      ToFloat(spec.x_dtype, input.data().data(), x.size(), x.data());
      for (int64_t i = 0; i < x_elements; ++i) {
        if (!std::isfinite(x[i])) {
          return absl::InvalidArgumentError(
              absl::StrCat("input.data[", i / model.in_features, "][", i % model.in_features,
                           "] = ", x[i], " is not finite; model \"", model.name,
                           "\" quantizes activations to int8 (W2A8), which needs finite values"));
        }
      }
    }
  }
  if (request.output_dtype() == v1::DTYPE_UNSPECIFIED) {
    spec.y_dtype = spec.x_dtype;
  } else {
    absl::StatusOr<DType> y_dtype = CheckTensorDType(request.output_dtype(), "output_dtype");
    if (!y_dtype.ok()) return y_dtype.status();
    spec.y_dtype = *y_dtype;
  }
  const int64_t y_row_bytes = model.out_features * static_cast<int64_t>(DTypeSize(spec.y_dtype));
  const int64_t y_limit = limits.max_message_bytes - kResponseOverheadBytes;
  spec.y_bytes = spec.m * y_row_bytes;
  if (spec.y_bytes > y_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output [", spec.m, ", ", model.out_features, "] of ", std::string(DTypeName(spec.y_dtype)),
        " would exceed max_message_bytes ", limits.max_message_bytes, "; send at most ",
        y_limit / y_row_bytes, " rows per request"));
  }
  const int64_t wide_row_bytes = model.max_features * static_cast<int64_t>(sizeof(float));
  const int64_t wide_limit = kIntermediateMessageFactor * limits.max_message_bytes;
  if (spec.m * wide_row_bytes > wide_limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model \"", model.name, "\" has activations of ", model.max_features,
                     " features; as fp32 for ", spec.m, " rows they would exceed ", wide_limit,
                     " bytes (", kIntermediateMessageFactor, " x max_message_bytes); send at most ",
                     wide_limit / wide_row_bytes, " rows per request"));
  }
  return spec;
}

}  // namespace qmm
