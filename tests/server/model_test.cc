#include "server/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

class FakeWeight : public BackendWeight {
 public:
  FakeWeight(Scheme scheme, WeightShape shape) : scheme_(scheme), shape_(shape) {}
  Scheme scheme() const override { return scheme_; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return 64; }

 private:
  Scheme scheme_;
  WeightShape shape_;
};

class ModelTest : public ::testing::Test {
 protected:
  ModelTest() : store_(int64_t{1} << 30) {
    Put("emb", Scheme::kBf16, 100, 64);     // vocab 100, dim 64
    Put("emb8", Scheme::kW8A16, 100, 64);   // not a valid table
    Put("up", Scheme::kW4A16, 256, 64);     // 64 -> 256
    Put("gate", Scheme::kW4A16, 256, 64);   // 64 -> 256
    Put("down", Scheme::kW2A8, 64, 256);    // 256 -> 64
    Put("proj", Scheme::kFp16, 32, 64);     // 64 -> 32
    Put("wide", Scheme::kW8A16, 300, 128);  // 128 -> 300
  }

  void Put(const std::string& name, Scheme scheme, int64_t n, int64_t k) {
    const WeightShape shape{.n = n, .k = k};
    absl::StatusOr<WeightStore::Reservation> r = store_.Reserve(name, 64);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(store_
                    .Commit(*std::move(r), WeightDesc{scheme, shape, 64},
                            std::make_unique<FakeWeight>(scheme, shape))
                    .ok());
  }

  static v1::Layer Embedding(const std::string& w) {
    v1::Layer l;
    l.mutable_embedding()->set_weight(w);
    return l;
  }
  static v1::Layer Linear(const std::string& w, int bias = 0) {
    v1::Layer l;
    l.mutable_linear()->set_weight(w);
    for (int i = 0; i < bias; ++i) l.mutable_linear()->add_bias(0.5f * i);
    return l;
  }
  static v1::Layer DyT(int features, int beta = 0, float alpha = 0.5f) {
    v1::Layer l;
    l.mutable_dyt()->set_alpha(alpha);
    for (int i = 0; i < features; ++i) l.mutable_dyt()->add_gamma(1.0f + i);
    for (int i = 0; i < beta; ++i) l.mutable_dyt()->add_beta(-0.25f * i);
    return l;
  }
  static v1::Layer RmsNorm(int features, float epsilon = 1e-5f) {
    v1::Layer l;
    l.mutable_rms_norm()->set_epsilon(epsilon);
    for (int i = 0; i < features; ++i) l.mutable_rms_norm()->add_weight(1.0f + 0.01f * i);
    return l;
  }
  static v1::Layer Act(v1::Activation a) {
    v1::Layer l;
    l.mutable_activation()->set_kind(a);
    return l;
  }
  static v1::Layer Mlp(const std::string& gate, const std::string& up, const std::string& down) {
    v1::Layer l;
    l.mutable_gated_mlp()->set_gate(gate);
    l.mutable_gated_mlp()->set_up(up);
    l.mutable_gated_mlp()->set_down(down);
    return l;
  }
  static v1::Layer Residual(int start) {
    v1::Layer l;
    l.mutable_residual()->set_block_start(start);
    return l;
  }
  static v1::CreateModelRequest Request(std::vector<v1::Layer> layers,
                                        const std::string& name = "m") {
    v1::CreateModelRequest r;
    r.set_name(name);
    for (v1::Layer& l : layers) *r.add_layers() = std::move(l);
    return r;
  }

  void ExpectError(const v1::CreateModelRequest& r, absl::StatusCode code,
                   absl::string_view needle) {
    const absl::Status s = CheckModel(r, store_).status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos)
        << "message: " << s.message() << "\nwanted: " << needle;
  }

  WeightStore store_;
};

TEST_F(ModelTest, LlamaStyleBlockWithEmbedding) {
  absl::StatusOr<ModelSpec> spec =
      CheckModel(Request({Embedding("emb"), DyT(64, 64), Mlp("gate", "up", "down"), Residual(1),
                          Act(v1::ACTIVATION_GELU_TANH), Linear("proj", 32)}),
                 store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->token_input);
  EXPECT_EQ(spec->in_features, 0);
  EXPECT_EQ(spec->out_features, 32);
  EXPECT_EQ(spec->max_features, 256);
  EXPECT_TRUE(spec->has_w2a8);
  EXPECT_EQ(spec->weight_names, (std::vector<std::string>{"down", "emb", "gate", "proj", "up"}));
  EXPECT_EQ(spec->param_bytes, (64 + 64 + 32) * 4);
  ASSERT_EQ(spec->layers.size(), 6u);
  EXPECT_EQ(spec->layers[0].kind, LayerKind::kEmbedding);
  EXPECT_EQ(spec->layers[0].out_features, 64);
  EXPECT_EQ(spec->layers[1].gamma.size(), 64u);
  EXPECT_EQ(spec->layers[1].beta.size(), 64u);
  EXPECT_FLOAT_EQ(spec->layers[1].alpha, 0.5f);
  EXPECT_EQ(spec->layers[2].weights.size(), 3u);
  EXPECT_EQ(spec->layers[2].weights[2]->name(), "down");
  EXPECT_EQ(spec->layers[3].block_start, 1);
  EXPECT_EQ(spec->layers[4].activation, Activation::kGeluTanh);
  EXPECT_EQ(spec->layers[5].bias.size(), 32u);
  EXPECT_EQ(spec->layers[5].bias[3], 1.5f);

  v1::ModelInfo full, brief;
  FillModelInfo(*spec, true, &full);
  FillModelInfo(*spec, false, &brief);
  EXPECT_EQ(full.name(), "m");
  EXPECT_EQ(full.layers_size(), 6);
  EXPECT_EQ(full.layers(1).dyt().gamma_size(), 64);
  EXPECT_EQ(brief.layers(1).dyt().gamma_size(), 0);
  EXPECT_EQ(brief.layers(5).linear().bias_size(), 0);
  EXPECT_EQ(brief.layers(5).linear().weight(), "proj");
  EXPECT_TRUE(full.token_input());
  EXPECT_EQ(full.out_features(), 32);
  EXPECT_EQ(full.weights_size(), 5);
  EXPECT_EQ(full.param_bytes(), (64 + 64 + 32) * 4);
}

TEST_F(ModelTest, FloatInputFixedByFirstLayer) {
  absl::StatusOr<ModelSpec> spec = CheckModel(Request({DyT(64), Linear("up")}), store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->token_input);
  EXPECT_EQ(spec->in_features, 64);
  EXPECT_EQ(spec->out_features, 256);
  EXPECT_FALSE(spec->has_w2a8);
  spec = CheckModel(Request({Mlp("gate", "up", "down"), Residual(0)}), store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->in_features, 64);
}

TEST_F(ModelTest, NameAndLayerCount) {
  ExpectError(Request({Linear("up")}, ""), absl::StatusCode::kInvalidArgument, "name");
  ExpectError(Request({Linear("up")}, "bad name"), absl::StatusCode::kInvalidArgument, "name");
  ExpectError(Request({}), absl::StatusCode::kInvalidArgument, "layers has 0 entries");
  std::vector<v1::Layer> many(kMaxModelLayers + 1, Act(v1::ACTIVATION_RELU));
  many[0] = Linear("proj");
  ExpectError(Request(many), absl::StatusCode::kInvalidArgument, "layers has 257 entries");
  ExpectError(Request({v1::Layer{}}), absl::StatusCode::kInvalidArgument,
              "layers[0]: no layer kind is set");
}

TEST_F(ModelTest, WeightsMustExistAndFitTheirRole) {
  ExpectError(Request({Linear("nope")}), absl::StatusCode::kNotFound,
              "layers[0].linear.weight: weight \"nope\" not found");
  ExpectError(Request({Mlp("gate", "up", "missing")}), absl::StatusCode::kNotFound,
              "layers[0].gated_mlp.down");
  ExpectError(Request({Embedding("emb8")}), absl::StatusCode::kInvalidArgument,
              "an embedding table must be FP16 or BF16");
  ExpectError(Request({Linear("proj"), Embedding("emb")}), absl::StatusCode::kInvalidArgument,
              "layers[1].embedding.weight: an embedding can only be layer 0");
  ExpectError(Request({Linear("bad name!")}), absl::StatusCode::kInvalidArgument,
              "layers[0].linear.weight");
}

TEST_F(ModelTest, FeaturesMustLineUp) {
  ExpectError(Request({Linear("proj"), Linear("up")}), absl::StatusCode::kInvalidArgument,
              "layers[1].linear.weight: weight \"up\" [N = 256, K = 64] needs 64 input features, "
              "but the layer's input has 32");
  ExpectError(Request({Embedding("emb"), DyT(65)}), absl::StatusCode::kInvalidArgument,
              "layers[1].dyt.gamma: has 65 values; must have one per input feature (64)");
  ExpectError(Request({Linear("wide"), Mlp("gate", "up", "down")}),
              absl::StatusCode::kInvalidArgument, "layers[1].gated_mlp.gate");
  ExpectError(Request({Mlp("gate", "proj", "down")}), absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.up: weight \"proj\" [N = 32, K = 64] must have the shape of "
              "the gate");
  ExpectError(Request({Mlp("gate", "up", "proj")}), absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.down: weight \"proj\" [N = 32, K = 64] needs K = 256");
}

TEST_F(ModelTest, ParametersMustHaveTheRightLengthAndBeFinite) {
  ExpectError(Request({Linear("proj", 31)}), absl::StatusCode::kInvalidArgument,
              "layers[0].linear.bias: has 31 values; must be empty or 32");
  ExpectError(Request({DyT(64, 63)}), absl::StatusCode::kInvalidArgument,
              "layers[0].dyt.beta: has 63 values; must be empty or 64");
  ExpectError(Request({DyT(0)}), absl::StatusCode::kInvalidArgument, "layers[0].dyt.gamma");
  ExpectError(Request({DyT(8, 0, std::numeric_limits<float>::infinity())}),
              absl::StatusCode::kInvalidArgument, "layers[0].dyt.alpha: inf is not finite");
  v1::CreateModelRequest r = Request({DyT(8, 8)});
  r.mutable_layers(0)->mutable_dyt()->set_gamma(3, std::nanf(""));
  ExpectError(r, absl::StatusCode::kInvalidArgument, "layers[0].dyt.gamma[3] = nan is not finite");
  r = Request({DyT(8, 8)});
  r.mutable_layers(0)->mutable_dyt()->set_beta(7, -std::numeric_limits<float>::infinity());
  ExpectError(r, absl::StatusCode::kInvalidArgument, "layers[0].dyt.beta[7] = -inf");
  r = Request({Linear("proj", 32)});
  r.mutable_layers(0)->mutable_linear()->set_bias(0, std::nanf(""));
  ExpectError(r, absl::StatusCode::kInvalidArgument, "layers[0].linear.bias[0]");
  ExpectError(Request({Linear("proj"), Act(v1::ACTIVATION_UNSPECIFIED)}),
              absl::StatusCode::kInvalidArgument, "layers[1].activation.kind: 0 is not");
  ExpectError(Request({Linear("proj"), Act(static_cast<v1::Activation>(42))}),
              absl::StatusCode::kInvalidArgument, "layers[1].activation.kind: 42");
  ExpectError(Request({Act(v1::ACTIVATION_SILU)}), absl::StatusCode::kInvalidArgument,
              "layers[0]: an activation cannot be layer 0");
  r = Request({Mlp("gate", "up", "down")});
  r.mutable_layers(0)->mutable_gated_mlp()->set_activation(static_cast<v1::Activation>(9));
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.activation: 9 is not ACTIVATION_SILU, ACTIVATION_GELU_TANH, "
              "ACTIVATION_RELU or ACTIVATION_RELU_SQUARED");
}

// A gated MLP's activation: SiLU unset (SwiGLU), else the one named (GeGLU, ReGLU).
TEST_F(ModelTest, GatedMlpActivation) {
  v1::CreateModelRequest r = Request({Mlp("gate", "up", "down")});
  absl::StatusOr<ModelSpec> spec = CheckModel(r, store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers[0].gate_activation, Activation::kSilu);
  r.mutable_layers(0)->mutable_gated_mlp()->set_activation(v1::ACTIVATION_GELU_TANH);
  spec = CheckModel(r, store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers[0].gate_activation, Activation::kGeluTanh);
  r.mutable_layers(0)->mutable_gated_mlp()->set_activation(v1::ACTIVATION_RELU);
  spec = CheckModel(r, store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers[0].gate_activation, Activation::kRelu);
  EXPECT_EQ(BackendLayers(*spec)[0].gate_activation, Activation::kRelu);
  v1::ModelInfo info;
  FillModelInfo(*spec, false, &info);
  EXPECT_EQ(info.layers(0).gated_mlp().activation(), v1::ACTIVATION_RELU);
  EXPECT_FALSE(info.layers(0).gated_mlp().has_sub_norm());
  EXPECT_TRUE(BackendLayers(*spec)[0].gamma.empty());
}

// BitNet b1.58 2B4T's MLP: relu2 and an RMSNorm of the product (ffn_sub_norm) over the
// gate's N, checked as a rms_norm layer is, with the names of the gated MLP's fields.
TEST_F(ModelTest, GatedMlpSubNorm) {
  v1::CreateModelRequest r = Request({Mlp("gate", "up", "down")});
  v1::GatedMlpLayer* mlp = r.mutable_layers(0)->mutable_gated_mlp();
  mlp->set_activation(v1::ACTIVATION_RELU_SQUARED);
  *mlp->mutable_sub_norm() = RmsNorm(256, 1e-5f).rms_norm();
  absl::StatusOr<ModelSpec> spec = CheckModel(r, store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers[0].gate_activation, Activation::kReluSquared);
  EXPECT_EQ(spec->layers[0].gamma.size(), 256u);
  EXPECT_FLOAT_EQ(spec->layers[0].gamma[100], 2.0f);
  EXPECT_FLOAT_EQ(spec->layers[0].epsilon, 1e-5f);
  EXPECT_EQ(spec->layers[0].in_features, 64);
  EXPECT_EQ(spec->layers[0].out_features, 64);
  EXPECT_EQ(spec->param_bytes, 256 * 4);
  const std::vector<ModelLayer> layers = BackendLayers(*spec);
  EXPECT_EQ(layers[0].gamma.size(), 256u);
  EXPECT_FLOAT_EQ(layers[0].epsilon, 1e-5f);
  v1::ModelInfo full, brief;
  FillModelInfo(*spec, true, &full);
  FillModelInfo(*spec, false, &brief);
  EXPECT_EQ(full.layers(0).gated_mlp().sub_norm().weight_size(), 256);
  EXPECT_EQ(brief.layers(0).gated_mlp().sub_norm().weight_size(), 0);
  EXPECT_FLOAT_EQ(brief.layers(0).gated_mlp().sub_norm().epsilon(), 1e-5f);
  EXPECT_EQ(brief.layers(0).gated_mlp().activation(), v1::ACTIVATION_RELU_SQUARED);

  // The sub-norm's width is the gate's N (256), not the layer's input (64).
  *mlp->mutable_sub_norm() = RmsNorm(64).rms_norm();
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.sub_norm.weight: has 64 values; must have one per feature of "
              "act(gate) * up (the gate's N) (256)");
  *mlp->mutable_sub_norm() = RmsNorm(0).rms_norm();
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.sub_norm.weight: has 0 values");
  for (float epsilon : {0.0f, -1.0f, std::nanf("")}) {
    *mlp->mutable_sub_norm() = RmsNorm(256, epsilon).rms_norm();
    ExpectError(r, absl::StatusCode::kInvalidArgument,
                absl::StrCat("layers[0].gated_mlp.sub_norm.epsilon: ", epsilon,
                             " must be finite and positive"));
  }
  *mlp->mutable_sub_norm() = RmsNorm(256).rms_norm();
  mlp->mutable_sub_norm()->set_weight(255, std::numeric_limits<float>::infinity());
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "layers[0].gated_mlp.sub_norm.weight[255] = inf is not finite");
}

// A Llama MLP block as Llama has it: RMSNorm, the gated MLP, the residual.
TEST_F(ModelTest, RmsNormBlock) {
  absl::StatusOr<ModelSpec> spec =
      CheckModel(Request({RmsNorm(64, 1e-6f), Mlp("gate", "up", "down"), Residual(0)}), store_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->in_features, 64);
  EXPECT_EQ(spec->layers[0].kind, LayerKind::kRmsNorm);
  EXPECT_EQ(spec->layers[0].gamma.size(), 64u);
  EXPECT_FLOAT_EQ(spec->layers[0].gamma[10], 1.1f);
  EXPECT_FLOAT_EQ(spec->layers[0].epsilon, 1e-6f);
  EXPECT_EQ(spec->param_bytes, 64 * 4);
  const std::vector<ModelLayer> layers = BackendLayers(*spec);
  EXPECT_EQ(layers[0].kind, LayerKind::kRmsNorm);
  EXPECT_EQ(layers[0].gamma.size(), 64u);
  EXPECT_FLOAT_EQ(layers[0].epsilon, 1e-6f);
  v1::ModelInfo full, brief;
  FillModelInfo(*spec, true, &full);
  FillModelInfo(*spec, false, &brief);
  EXPECT_EQ(full.layers(0).rms_norm().weight_size(), 64);
  EXPECT_EQ(brief.layers(0).rms_norm().weight_size(), 0);
  EXPECT_FLOAT_EQ(brief.layers(0).rms_norm().epsilon(), 1e-6f);

  ExpectError(Request({Linear("proj"), RmsNorm(33)}), absl::StatusCode::kInvalidArgument,
              "layers[1].rms_norm.weight: has 33 values; must have one per input feature (32)");
  ExpectError(Request({RmsNorm(0)}), absl::StatusCode::kInvalidArgument,
              "layers[0].rms_norm.weight: has 0 values");
  for (float epsilon : {0.0f, -1e-5f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    ExpectError(
        Request({RmsNorm(8, epsilon)}), absl::StatusCode::kInvalidArgument,
        absl::StrCat("layers[0].rms_norm.epsilon: ", epsilon, " must be finite and positive"));
  }
  v1::CreateModelRequest r = Request({RmsNorm(8)});
  r.mutable_layers(0)->mutable_rms_norm()->set_weight(5, -std::numeric_limits<float>::infinity());
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "layers[0].rms_norm.weight[5] = -inf is not finite");
}

TEST_F(ModelTest, ResidualBlocks) {
  ExpectError(Request({Linear("proj"), Residual(1)}), absl::StatusCode::kInvalidArgument,
              "layers[1].residual.block_start: 1 must name an earlier layer, in [0, 1)");
  ExpectError(Request({Linear("proj"), Residual(-1)}), absl::StatusCode::kInvalidArgument,
              "block_start: -1");
  ExpectError(Request({Embedding("emb"), Residual(0)}), absl::StatusCode::kInvalidArgument,
              "the block cannot start at the embedding");
  ExpectError(Request({Linear("proj"), Residual(0)}), absl::StatusCode::kInvalidArgument,
              "the block's input has 64 features but its output has 32");
  ExpectError(Request({Residual(0)}), absl::StatusCode::kInvalidArgument,
              "layers[0].residual.block_start");
  // Nested blocks close in any order as long as the widths match.
  ExpectError(Request({DyT(64), Linear("up"), Act(v1::ACTIVATION_RELU), Mlp("gate", "up", "down"),
                       Residual(0)}),
              absl::StatusCode::kInvalidArgument, "layers[3].gated_mlp.gate");
  EXPECT_TRUE(
      CheckModel(Request({DyT(64), Mlp("gate", "up", "down"), Residual(1), DyT(64), Residual(0)}),
                 store_)
          .ok());
}

class ForwardInputTest : public ModelTest {
 protected:
  ModelSpec Spec(std::vector<v1::Layer> layers) {
    absl::StatusOr<ModelSpec> spec = CheckModel(Request(std::move(layers)), store_);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *std::move(spec) : ModelSpec{};
  }
  static v1::ForwardRequest FloatRequest(DType dtype, int64_t m, int64_t f, float fill = 0.5f) {
    v1::ForwardRequest r;
    r.set_model("m");
    r.mutable_input()->set_dtype(dtype == DType::kF32   ? v1::DTYPE_FP32
                                 : dtype == DType::kF16 ? v1::DTYPE_FP16
                                                        : v1::DTYPE_BF16);
    r.mutable_input()->add_shape(m);
    r.mutable_input()->add_shape(f);
    std::vector<float> x(m * f, fill);
    std::string bytes(x.size() * DTypeSize(dtype), '\0');
    FromFloat(dtype, x.data(), x.size(), bytes.data());
    r.mutable_input()->set_data(bytes);
    return r;
  }
  static void ExpectError(const absl::StatusOr<ForwardSpec>& s, absl::StatusCode code,
                          absl::string_view needle) {
    EXPECT_EQ(s.status().code(), code) << s.status();
    EXPECT_NE(s.status().message().find(needle), absl::string_view::npos)
        << "message: " << s.status().message() << "\nwanted: " << needle;
  }
};

TEST_F(ForwardInputTest, TokenInput) {
  const ModelSpec spec = Spec({Embedding("emb"), Linear("proj")});
  v1::ForwardRequest r;
  r.add_token_ids(0);
  r.add_token_ids(99);
  r.add_token_ids(5);
  absl::StatusOr<ForwardSpec> s = CheckForwardInput(r, spec, ServiceLimits{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->m, 3);
  EXPECT_EQ(s->y_dtype, DType::kF32);
  EXPECT_EQ(s->y_bytes, 3 * 32 * 4);
  r.set_output_dtype(v1::DTYPE_BF16);
  EXPECT_EQ(CheckForwardInput(r, spec, ServiceLimits{})->y_bytes, 3 * 32 * 2);

  r.add_token_ids(100);
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "token_ids[3] = 100 is outside the vocabulary [0, 100)");
  r.set_token_ids(3, -1);
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "token_ids[3] = -1");
  ExpectError(CheckForwardInput(v1::ForwardRequest{}, spec, ServiceLimits{}),
              absl::StatusCode::kInvalidArgument, "token_ids size = 0 (M) must be at least 1");
  ExpectError(CheckForwardInput(FloatRequest(DType::kF32, 1, 64), spec, ServiceLimits{}),
              absl::StatusCode::kInvalidArgument, "send token_ids");
  ServiceLimits limits;
  limits.max_rows = 2;
  v1::ForwardRequest three;
  for (int i = 0; i < 3; ++i) three.add_token_ids(i);
  ExpectError(CheckForwardInput(three, spec, limits), absl::StatusCode::kInvalidArgument,
              "exceeds max_rows 2");
}

TEST_F(ForwardInputTest, FloatInput) {
  const ModelSpec spec = Spec({DyT(64), Linear("up")});
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<ForwardSpec> s =
        CheckForwardInput(FloatRequest(dtype, 3, 64), spec, ServiceLimits{});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->m, 3);
    EXPECT_EQ(s->x_dtype, dtype);
    EXPECT_EQ(s->y_dtype, dtype);
    EXPECT_EQ(s->y_bytes, 3 * 256 * static_cast<int64_t>(DTypeSize(dtype)));
  }
  v1::ForwardRequest r = FloatRequest(DType::kF32, 2, 64);
  r.add_token_ids(1);
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "takes an input tensor");
  r = FloatRequest(DType::kF32, 2, 64);
  r.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "input.dtype = 0 is not a supported dtype");
  r = FloatRequest(DType::kF32, 2, 64);
  r.set_output_dtype(static_cast<v1::DType>(9));
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "output_dtype = 9");
  r = FloatRequest(DType::kF32, 2, 64);
  r.mutable_input()->add_shape(1);
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "input.shape has 3 dimensions");
  ExpectError(CheckForwardInput(FloatRequest(DType::kF32, 2, 63), spec, ServiceLimits{}),
              absl::StatusCode::kInvalidArgument,
              "input.shape[1] = 63 does not match in_features = 64");
  ExpectError(CheckForwardInput(FloatRequest(DType::kF32, 0, 64), spec, ServiceLimits{}),
              absl::StatusCode::kInvalidArgument, "input.shape[0] = 0 (M) must be at least 1");
  r = FloatRequest(DType::kF16, 2, 64);
  r.mutable_input()->mutable_data()->pop_back();
  ExpectError(CheckForwardInput(r, spec, ServiceLimits{}), absl::StatusCode::kInvalidArgument,
              "input.data is 255 bytes, but shape [2, 64] of fp16 needs 256");
}

TEST_F(ForwardInputTest, OutputAndIntermediateLimits) {
  const ModelSpec spec = Spec({DyT(64), Linear("up"), Act(v1::ACTIVATION_SILU)});
  ServiceLimits limits;
  limits.max_message_bytes = 256 * 4 * 10 + kResponseOverheadBytes;  // 10 fp32 output rows
  EXPECT_TRUE(CheckForwardInput(FloatRequest(DType::kF32, 10, 64), spec, limits).ok());
  ExpectError(CheckForwardInput(FloatRequest(DType::kF32, 11, 64), spec, limits),
              absl::StatusCode::kResourceExhausted, "send at most 10 rows per request");
  // A GatedMLP's 256-wide middle counts, though the output is narrower: with 4 KiB
  // messages, 16 KiB of fp32 intermediates hold 16 rows of 256 while 31 bf16 outputs fit.
  const ModelSpec mlp = Spec({Mlp("gate", "up", "down")});
  limits.max_message_bytes = 4096;
  v1::ForwardRequest r = FloatRequest(DType::kBF16, 16, 64);
  EXPECT_TRUE(CheckForwardInput(r, mlp, limits).ok());
  r = FloatRequest(DType::kBF16, 17, 64);
  ExpectError(CheckForwardInput(r, mlp, limits), absl::StatusCode::kResourceExhausted,
              "has activations of 256 features; as fp32 for 17 rows they would exceed 16384");
}

TEST_F(ForwardInputTest, W2A8ModelsNeedFiniteInput) {
  const ModelSpec spec = Spec({Mlp("gate", "up", "down")});
  EXPECT_TRUE(CheckForwardInput(FloatRequest(DType::kBF16, 2, 64), spec, ServiceLimits{}).ok());
  ExpectError(
      CheckForwardInput(FloatRequest(DType::kBF16, 2, 64, std::numeric_limits<float>::infinity()),
                        spec, ServiceLimits{}),
      absl::StatusCode::kInvalidArgument, "input.data[0][0] = inf is not finite");
  // Without W2A8 the same input passes (it simply propagates).
  const ModelSpec plain = Spec({DyT(64)});
  EXPECT_TRUE(
      CheckForwardInput(FloatRequest(DType::kF32, 1, 64, std::nanf("")), plain, ServiceLimits{})
          .ok());
}

}  // namespace
}  // namespace qmm
