#include "client/qmmctl/forward_verify.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "client/qmmctl/verify.h"
#include "kernels/cpu/chain.h"
#include "kernels/layers_reference.h"
#include "proto/enum_convert.h"

namespace qmm::ctl {

absl::StatusOr<std::map<std::string, RandomWeight, std::less<>>> RandomWeightsOf(
    Client& client, const v1::ModelInfo& model, const std::map<std::string, uint64_t>& seeds) {
  std::map<std::string, RandomWeight, std::less<>> out;
  for (const std::string& name : model.weights()) {
    auto seed = seeds.find(name);
    if (seed == seeds.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--verify_seeds has no seed for weight \"", name, "\""));
    }
    absl::StatusOr<v1::WeightInfo> w = client.GetWeight(name);
    if (!w.ok()) return w.status();
    const std::optional<Scheme> scheme = SchemeFromProto(w->scheme());
    if (!scheme) return absl::InvalidArgumentError("a weight's scheme is unknown to qmmctl");
    out[name] = RandomWeight{
        *scheme, {w->n(), w->k(), w->group_size(), w->zero_points(), w->act_order()}, seed->second};
  }
  return out;
}

absl::StatusOr<std::vector<double>> ReferenceForRandomModel(
    const v1::ModelInfo& model, const std::map<std::string, RandomWeight, std::less<>>& weights,
    std::span<const int32_t> ids, std::span<const float> x, int64_t m) {
  std::deque<std::vector<uint8_t>> bytes;
  std::deque<PackedWeight> views;
  const auto weight = [&](const std::string& name) -> absl::StatusOr<const PackedWeight*> {
    auto it = weights.find(name);
    if (it == weights.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight \"", name, "\" of model \"", model.name(), "\" has no seed in --verify_seeds"));
    }
    absl::StatusOr<std::vector<uint8_t>> packed =
        PackRandomWeight(it->second.scheme, it->second.shape, it->second.seed);
    if (!packed.ok()) return packed.status();
    bytes.push_back(*std::move(packed));
    views.push_back(PackedWeight{it->second.scheme, it->second.shape, bytes.back()});
    return &views.back();
  };
  const auto params = [](const google::protobuf::RepeatedField<float>& v) {
    return v.empty() ? nullptr : v.data();
  };

  std::vector<CpuChainLayer> layers;
  int64_t features = 0;
  for (const v1::Layer& l : model.layers()) {
    CpuChainLayer c;
    c.in_features = features;
    switch (l.kind_case()) {
      case v1::Layer::kEmbedding: {
        absl::StatusOr<const PackedWeight*> w = weight(l.embedding().weight());
        if (!w.ok()) return w.status();
        c.kind = LayerKind::kEmbedding;
        c.weights[0] = *w;
        c.out_features = (*w)->shape.k;
        break;
      }
      case v1::Layer::kLinear: {
        absl::StatusOr<const PackedWeight*> w = weight(l.linear().weight());
        if (!w.ok()) return w.status();
        c.kind = LayerKind::kLinear;
        c.weights[0] = *w;
        c.bias = params(l.linear().bias());
        c.in_features = (*w)->shape.k;
        c.out_features = (*w)->shape.n;
        break;
      }
      case v1::Layer::kDyt:
        c.kind = LayerKind::kDyT;
        c.alpha = l.dyt().alpha();
        c.gamma = params(l.dyt().gamma());
        c.beta = params(l.dyt().beta());
        c.in_features = c.out_features = l.dyt().gamma_size();
        break;
      case v1::Layer::kRmsNorm:
        c.kind = LayerKind::kRmsNorm;
        c.gamma = params(l.rms_norm().weight());
        c.epsilon = l.rms_norm().epsilon();
        c.in_features = c.out_features = l.rms_norm().weight_size();
        break;
      case v1::Layer::kActivation:
        c.kind = LayerKind::kActivation;
        // A model the server accepted names a known activation; unset is a gated MLP's SiLU.
        c.activation = ActivationFromProto(l.activation().kind()).value_or(Activation::kSilu);
        c.out_features = features;
        break;
      case v1::Layer::kGatedMlp: {
        const std::string names[] = {l.gated_mlp().gate(), l.gated_mlp().up(),
                                     l.gated_mlp().down()};
        for (int i = 0; i < 3; ++i) {
          absl::StatusOr<const PackedWeight*> w = weight(names[i]);
          if (!w.ok()) return w.status();
          c.weights[i] = *w;
        }
        c.kind = LayerKind::kGatedMlp;
        c.gate_activation =
            ActivationFromProto(l.gated_mlp().activation()).value_or(Activation::kSilu);
        if (l.gated_mlp().has_sub_norm()) {
          c.gamma = params(l.gated_mlp().sub_norm().weight());
          c.epsilon = l.gated_mlp().sub_norm().epsilon();
        }
        c.in_features = c.weights[0]->shape.k;
        c.out_features = c.weights[2]->shape.n;
        break;
      }
      case v1::Layer::kResidual:
        c.kind = LayerKind::kResidual;
        c.block_start = l.residual().block_start();
        c.out_features = features;
        break;
      case v1::Layer::KIND_NOT_SET:
        return absl::InvalidArgumentError("the model has a layer of no kind");
    }
    features = c.out_features;
    layers.push_back(c);
  }
  if (layers.empty()) return absl::InvalidArgumentError("the model has no layers");
  return ReferenceChain(layers, ids, x, m);
}

double ForwardTolerance(bool has_w2a8, bool bf16_activations, DType output_dtype,
                        std::string_view backend) {
  double tolerance = backend == "cuda" ? (bf16_activations ? 4e-2 : 1e-2) : 1e-4;
  if (has_w2a8) tolerance += 5e-3;
  if (output_dtype == DType::kF16) tolerance += 0x1p-10;
  if (output_dtype == DType::kBF16) tolerance += 0x1p-7;
  return tolerance;
}

}  // namespace qmm::ctl
