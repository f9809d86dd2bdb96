#include "kernels/layers_reference.h"

#include <cmath>

#include "kernels/dtype.h"
#include "kernels/reference.h"

namespace qmm {

std::vector<double> ReferenceEmbedding(const PackedWeight& table, std::span<const int32_t> ids) {
  const int64_t dim = table.shape.k;
  std::vector<double> y(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t byte = (ids[i] * dim + j) * 2;
      const uint16_t bits =
          static_cast<uint16_t>(table.values()[byte] | (table.values()[byte + 1] << 8));
      y[i * dim + j] = table.scheme == Scheme::kBf16 ? Bf16ToFloat(bits) : HalfToFloat(bits);
    }
  }
  return y;
}

std::vector<double> ReferenceDyT(std::span<const double> x, int64_t f, double alpha,
                                 std::span<const float> gamma, std::span<const float> beta) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t j = i % f;
    y[i] = gamma[j] * std::tanh(alpha * x[i]) + (beta.empty() ? 0.0 : double{beta[j]});
  }
  return y;
}

std::vector<double> ReferenceRmsNorm(std::span<const double> x, int64_t f,
                                     std::span<const float> weight, double epsilon) {
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size(); row += f) {
    double squares = 0.0;
    for (int64_t j = 0; j < f; ++j) squares += x[row + j] * x[row + j];
    const double rms = std::sqrt(squares / static_cast<double>(f) + epsilon);
    for (int64_t j = 0; j < f; ++j) y[row + j] = weight[j] * x[row + j] / rms;
  }
  return y;
}

double ReferenceActivation(Activation act, double x) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return x / (1.0 + std::exp(-x));
    case Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x)));
    case Activation::kRelu:
      return x > 0.0 ? x : 0.0;
    case Activation::kReluSquared:
      return x > 0.0 ? x * x : 0.0;
  }
  return x;
}

std::vector<double> ReferenceBiasActivation(Activation act, std::span<const double> x, int64_t n,
                                            std::span<const float> bias) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = ReferenceActivation(act, x[i] + (bias.empty() ? 0.0 : double{bias[i % n]}));
  }
  return y;
}

std::vector<double> ReferenceGlu(Activation act, std::span<const double> gate,
                                 std::span<const double> up) {
  std::vector<double> y(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) y[i] = ReferenceActivation(act, gate[i]) * up[i];
  return y;
}

std::vector<double> ReferenceAdd(std::span<const double> a, std::span<const double> b) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

std::vector<double> ReferenceLinear(const PackedWeight& w, std::span<const double> x, int64_t m) {
  const std::vector<float> x_f32(x.begin(), x.end());
  return ReferenceMatMul(w, x_f32.data(), m);
}

std::vector<double> ReferenceChain(std::span<const CpuChainLayer> layers,
                                   std::span<const int32_t> ids, std::span<const float> x,
                                   int64_t m) {
  // inputs[i] is the input of layer i; all are kept (a reference has no memory budget).
  std::vector<std::vector<double>> inputs(layers.size() + 1);
  inputs[0].assign(x.begin(), x.end());
  for (size_t i = 0; i < layers.size(); ++i) {
    const CpuChainLayer& l = layers[i];
    const std::vector<double>& in = inputs[i];
    const auto params = [](const float* p, int64_t n) {
      return p == nullptr ? std::span<const float>() : std::span<const float>(p, n);
    };
    switch (l.kind) {
      case LayerKind::kEmbedding:
        inputs[i + 1] = ReferenceEmbedding(*l.weights[0], ids);
        break;
      case LayerKind::kLinear:
        inputs[i + 1] =
            ReferenceBiasActivation(Activation::kIdentity, ReferenceLinear(*l.weights[0], in, m),
                                    l.out_features, params(l.bias, l.out_features));
        break;
      case LayerKind::kDyT:
        inputs[i + 1] = ReferenceDyT(in, l.in_features, l.alpha, params(l.gamma, l.in_features),
                                     params(l.beta, l.in_features));
        break;
      case LayerKind::kRmsNorm:
        inputs[i + 1] =
            ReferenceRmsNorm(in, l.in_features, params(l.gamma, l.in_features), l.epsilon);
        break;
      case LayerKind::kActivation:
        inputs[i + 1] = ReferenceBiasActivation(l.activation, in, l.in_features, {});
        break;
      case LayerKind::kGatedMlp: {
        std::vector<double> h =
            ReferenceGlu(l.gate_activation, ReferenceLinear(*l.weights[0], in, m),
                         ReferenceLinear(*l.weights[1], in, m));
        const int64_t hidden = l.weights[0]->shape.n;
        if (l.gamma != nullptr) h = ReferenceRmsNorm(h, hidden, params(l.gamma, hidden), l.epsilon);
        inputs[i + 1] = ReferenceLinear(*l.weights[2], h, m);
        break;
      }
      case LayerKind::kResidual:
        inputs[i + 1] = ReferenceAdd(in, inputs[l.block_start]);
        break;
    }
  }
  return inputs.back();
}

}  // namespace qmm
