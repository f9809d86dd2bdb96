// CpuRunChain against ReferenceChain, the float64 composition of the single-layer
// references, for each layer kind alone and for mixed chains.
//
// Tolerance of an element: |y - ref| <= tol * (|ref| + rms(ref)), tol = 1e-4 for chains
// of fp32 math on exactly representable weights, 3e-3 when a W2A8 layer quantizes its
// activations (an fp32 intermediate and its float64 twin can round x / a on either side
// of .5: one quantization step of one element, about 1 / (127 sqrt(K)) of the output).
#include "kernels/cpu/chain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/layers_reference.h"
#include "kernels/quantize.h"

namespace qmm {
namespace {

class ChainTest : public ::testing::Test {
 protected:
  // A random weight in `scheme`, owned by the fixture.
  const PackedWeight* Weight(Scheme scheme, int64_t n, int64_t k, int32_t group = 0) {
    const WeightShape shape{.n = n, .k = k, .group_size = group};
    std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
    std::vector<float> w(n * k);
    for (float& v : w) v = dist(rng_);
    absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(
        scheme, shape, DType::kF32, {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4});
    EXPECT_TRUE(packed.ok()) << packed.status();
    bytes_.push_back(*std::move(packed));
    weights_.push_back(PackedWeight{scheme, shape, bytes_.back()});
    return &weights_.back();
  }
  const float* Params(int64_t count, float mean, float stddev) {
    std::normal_distribution<float> dist(mean, stddev);
    params_.emplace_back(count);
    for (float& v : params_.back()) v = dist(rng_);
    return params_.back().data();
  }

  CpuChainLayer Linear(const PackedWeight* w, bool bias) {
    return {.kind = LayerKind::kLinear,
            .weights = {w},
            .bias = bias ? Params(w->shape.n, 0.0f, 0.5f) : nullptr,
            .in_features = w->shape.k,
            .out_features = w->shape.n};
  }
  CpuChainLayer DyT(int64_t f, bool beta) {
    return {.kind = LayerKind::kDyT,
            .alpha = 0.6f,
            .gamma = Params(f, 1.0f, 0.3f),
            .beta = beta ? Params(f, 0.0f, 0.2f) : nullptr,
            .in_features = f,
            .out_features = f};
  }
  CpuChainLayer RmsNorm(int64_t f) {
    return {.kind = LayerKind::kRmsNorm,
            .gamma = Params(f, 1.0f, 0.3f),
            .epsilon = 1e-5f,
            .in_features = f,
            .out_features = f};
  }
  static CpuChainLayer Act(Activation a, int64_t f) {
    return {.kind = LayerKind::kActivation, .activation = a, .in_features = f, .out_features = f};
  }
  static CpuChainLayer Mlp(const PackedWeight* gate, const PackedWeight* up,
                           const PackedWeight* down, Activation act = Activation::kSilu) {
    return {.kind = LayerKind::kGatedMlp,
            .weights = {gate, up, down},
            .gate_activation = act,
            .in_features = gate->shape.k,
            .out_features = down->shape.n};
  }
  // BitNet b1.58's MLP: down(sub_norm(relu2(gate(x)) * up(x))).
  CpuChainLayer SubNormMlp(const PackedWeight* gate, const PackedWeight* up,
                           const PackedWeight* down) {
    CpuChainLayer l = Mlp(gate, up, down, Activation::kReluSquared);
    l.gamma = Params(gate->shape.n, 1.0f, 0.3f);
    l.epsilon = 1e-5f;
    return l;
  }
  static CpuChainLayer Residual(int32_t start, int64_t f) {
    return {
        .kind = LayerKind::kResidual, .block_start = start, .in_features = f, .out_features = f};
  }
  static CpuChainLayer Embedding(const PackedWeight* table) {
    return {.kind = LayerKind::kEmbedding, .weights = {table}, .out_features = table->shape.k};
  }

  void ExpectChain(const std::vector<CpuChainLayer>& layers, int64_t m, double tol,
                   const std::string& what) {
    std::vector<int32_t> ids;
    std::vector<float> x;
    if (layers[0].kind == LayerKind::kEmbedding) {
      std::uniform_int_distribution<int32_t> id(
          0, static_cast<int32_t>(layers[0].weights[0]->shape.n) - 1);
      for (int64_t i = 0; i < m; ++i) ids.push_back(id(rng_));
    } else {
      std::normal_distribution<float> dist(0.0f, 1.5f);
      x.resize(m * layers[0].in_features);
      for (float& v : x) v = dist(rng_);
    }
    const int64_t out = layers.back().out_features;
    std::vector<float> y(m * out, std::numeric_limits<float>::quiet_NaN());
    CpuRunChain(layers, ids.data(), x.data(), m, y.data(), 2);
    const std::vector<double> ref = ReferenceChain(layers, ids, x, m);
    ASSERT_EQ(ref.size(), y.size()) << what;
    double sum2 = 0.0;
    for (double r : ref) sum2 += r * r;
    const double rms = std::sqrt(sum2 / ref.size());
    ASSERT_GT(rms, 0.0) << what;
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << what << " element " << i;
      ASSERT_NEAR(y[i], ref[i], tol * (std::fabs(ref[i]) + rms)) << what << " element " << i;
    }
  }

  std::mt19937 rng_{7};
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<PackedWeight> weights_;
  std::deque<std::vector<float>> params_;
};

constexpr int64_t kRows[] = {1, 3, 17};

TEST_F(ChainTest, LinearOfEveryScheme) {
  struct Case {
    Scheme scheme;
    int32_t group;
    double tol;
  };
  for (const Case& c : {Case{Scheme::kFp16, 0, 1e-4}, Case{Scheme::kBf16, 0, 1e-4},
                        Case{Scheme::kW8A16, 0, 1e-4}, Case{Scheme::kW4A16, 0, 1e-4},
                        Case{Scheme::kW4A16, 128, 1e-4}, Case{Scheme::kW2A8, 0, 3e-3}}) {
    for (int64_t m : kRows) {
      for (bool bias : {false, true}) {
        ExpectChain(
            {Linear(Weight(c.scheme, 40, 256, c.group), bias)}, m, c.tol,
            std::string(SchemeName(c.scheme)) + " m" + std::to_string(m) + (bias ? " bias" : ""));
      }
    }
  }
}

TEST_F(ChainTest, EachOtherLayerKind) {
  for (int64_t m : kRows) {
    ExpectChain({DyT(96, true)}, m, 1e-4, "dyt");
    ExpectChain({DyT(96, false)}, m, 1e-4, "dyt without beta");
    for (Activation a : {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu}) {
      ExpectChain({DyT(64, true), Act(a, 64)}, m, 1e-4, std::string(ActivationName(a)));
    }
    for (Activation a :
         {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu, Activation::kReluSquared}) {
      ExpectChain({Mlp(Weight(Scheme::kW4A16, 192, 128, 128), Weight(Scheme::kW4A16, 192, 128, 128),
                       Weight(Scheme::kW8A16, 72, 192), a)},
                  m, 1e-4, "gated mlp " + std::string(ActivationName(a)));
    }
    ExpectChain(
        {SubNormMlp(Weight(Scheme::kW4A16, 192, 128, 128), Weight(Scheme::kW4A16, 192, 128, 128),
                    Weight(Scheme::kW8A16, 72, 192))},
        m, 1e-4, "gated mlp with a sub-norm");
    ExpectChain({DyT(64, false), Residual(0, 64)}, m, 1e-4, "residual");
    ExpectChain({RmsNorm(96)}, m, 1e-4, "rms_norm");
    ExpectChain({Embedding(Weight(Scheme::kBf16, 50, 48))}, m, 1e-4, "embedding");
    ExpectChain({Embedding(Weight(Scheme::kFp16, 50, 48))}, m, 1e-4, "embedding fp16");
  }
}

TEST_F(ChainTest, MixedChains) {
  const PackedWeight* table = Weight(Scheme::kFp16, 97, 128);
  const PackedWeight* gate = Weight(Scheme::kW4A16, 384, 128, 128);
  const PackedWeight* up = Weight(Scheme::kW4A16, 384, 128, 128);
  const PackedWeight* down = Weight(Scheme::kW2A8, 128, 384);
  const PackedWeight* head = Weight(Scheme::kW8A16, 50, 128);
  for (int64_t m : kRows) {
    // Llama-style: embedding, then a DyT + SwiGLU block with its residual, an RMSNorm
    // one, then an activation and a projection with a bias.
    ExpectChain({Embedding(table), DyT(128, true), Mlp(gate, up, down), Residual(1, 128),
                 RmsNorm(128), Mlp(gate, up, down), Residual(4, 128),
                 Act(Activation::kGeluTanh, 128), Linear(head, true)},
                m, 3e-3, "llama-style m" + std::to_string(m));
    // BitNet b1.58 2B4T's MLP block, every weight ternary.
    ExpectChain({RmsNorm(128),
                 SubNormMlp(Weight(Scheme::kW2A8, 384, 128), Weight(Scheme::kW2A8, 384, 128),
                            Weight(Scheme::kW2A8, 128, 384)),
                 Residual(0, 128)},
                m, 3e-3, "bitnet m" + std::to_string(m));
    // Nested residuals without quantized activations, blocks sharing a start.
    const PackedWeight* a = Weight(Scheme::kBf16, 128, 128);
    const PackedWeight* b = Weight(Scheme::kW4A16, 128, 128, 0);
    ExpectChain({Linear(a, true), Act(Activation::kRelu, 128), Linear(b, false), Residual(1, 128),
                 Residual(0, 128), DyT(128, true), Residual(5, 128)},
                m, 1e-4, "nested m" + std::to_string(m));
  }
}

}  // namespace
}  // namespace qmm
