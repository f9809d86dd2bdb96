#include "kernels/cpu/chain.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/layers.h"
#include "kernels/cpu/matmul.h"

namespace qmm {

void CpuRunChain(std::span<const CpuChainLayer> layers, const int32_t* ids, const float* x,
                 int64_t m, float* y, int num_threads) {
  const size_t count = layers.size();
  // values[i] is the input of layer i (values[count] the output); last_use[i] the last
  // layer that reads it: layer i itself, or a residual closing a block that starts at i.
  std::vector<std::vector<float>> values(count + 1);
  std::vector<size_t> last_use(count + 1);
  for (size_t i = 0; i <= count; ++i) last_use[i] = i;
  for (size_t i = 0; i < count; ++i) {
    if (layers[i].kind == LayerKind::kResidual) {
      last_use[layers[i].block_start] = std::max(last_use[layers[i].block_start], i);
    }
  }
  if (layers[0].kind != LayerKind::kEmbedding) {
    values[0].assign(x, x + m * layers[0].in_features);
  }
  std::vector<float> gate, up;
  for (size_t i = 0; i < count; ++i) {
    const CpuChainLayer& layer = layers[i];
    const std::vector<float>& in = values[i];
    std::vector<float>& out = values[i + 1];
    out.resize(m * layer.out_features);
    switch (layer.kind) {
      case LayerKind::kEmbedding:
        CpuEmbedding(*layer.weights[0], ids, m, out.data());
        break;
      case LayerKind::kLinear:
        CpuMatMul(*layer.weights[0], in.data(), m, out.data(), num_threads);
        if (layer.bias != nullptr) {
          CpuBiasActivation(Activation::kIdentity, out.data(), layer.bias, m, layer.out_features,
                            out.data());
        }
        break;
      case LayerKind::kDyT:
        CpuDyT(in.data(), m, layer.in_features, layer.alpha, layer.gamma, layer.beta, out.data());
        break;
      case LayerKind::kRmsNorm:
        CpuRmsNorm(in.data(), m, layer.in_features, layer.gamma, layer.epsilon, out.data());
        break;
      case LayerKind::kActivation:
        CpuBiasActivation(layer.activation, in.data(), nullptr, m, layer.in_features, out.data());
        break;
      case LayerKind::kGatedMlp: {
        const int64_t hidden = layer.weights[0]->shape.n;
        gate.resize(m * hidden);
        up.resize(m * hidden);
        CpuMatMul(*layer.weights[0], in.data(), m, gate.data(), num_threads);
        CpuMatMul(*layer.weights[1], in.data(), m, up.data(), num_threads);
        CpuGlu(layer.gate_activation, gate.data(), up.data(), m * hidden, gate.data());
        if (layer.gamma != nullptr) {
          CpuRmsNorm(gate.data(), m, hidden, layer.gamma, layer.epsilon, gate.data());
        }
        CpuMatMul(*layer.weights[2], gate.data(), m, out.data(), num_threads);
        break;
      }
      case LayerKind::kResidual:
        CpuAdd(in.data(), values[layer.block_start].data(), m * layer.in_features, out.data());
        break;
    }
    // Free every value whose last reader was this layer.
    for (size_t v = 0; v <= i; ++v) {
      if (last_use[v] == i) std::vector<float>().swap(values[v]);
    }
  }
  std::memcpy(y, values[count].data(), values[count].size() * sizeof(float));
}

}  // namespace qmm
