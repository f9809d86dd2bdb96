#include "client/model_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace qmm {
namespace {

TEST(ModelSpecTest, ParsesEveryLayerKind) {
  absl::StatusOr<v1::CreateModelRequest> r = ParseModelSpec(R"({
    "name": "llama-block",
    "layers": [
      {"embedding": "tok"},
      {"dyt": {"alpha": 0.5, "gamma": 2.0, "beta": [0.25, -1, 3], "features": 3}},
      {"gated_mlp": {"gate": "w1", "up": "w3", "down": "w2"}},
      {"residual": 1},
      {"residual": {"block_start": 0}},
      {"activation": "gelu"},
      {"activation": "silu"},
      {"activation": "relu"},
      {"linear": {"weight": "head", "bias": [0.5, 1.5]}},
      {"linear": "plain"},
      {"rms_norm": {"weight": [1, 0.5], "epsilon": 1e-6}},
      {"rms_norm": {"weight": 1.25, "features": 4, "epsilon": 1e-5}}
    ]
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name(), "llama-block");
  ASSERT_EQ(r->layers_size(), 12);
  ASSERT_EQ(r->layers(10).rms_norm().weight_size(), 2);
  EXPECT_FLOAT_EQ(r->layers(10).rms_norm().weight(1), 0.5f);
  EXPECT_FLOAT_EQ(r->layers(10).rms_norm().epsilon(), 1e-6f);
  ASSERT_EQ(r->layers(11).rms_norm().weight_size(), 4);
  EXPECT_FLOAT_EQ(r->layers(11).rms_norm().weight(3), 1.25f);
  EXPECT_EQ(r->layers(0).embedding().weight(), "tok");
  EXPECT_FLOAT_EQ(r->layers(1).dyt().alpha(), 0.5f);
  ASSERT_EQ(r->layers(1).dyt().gamma_size(), 3);
  EXPECT_FLOAT_EQ(r->layers(1).dyt().gamma(2), 2.0f);
  EXPECT_FLOAT_EQ(r->layers(1).dyt().beta(1), -1.0f);
  EXPECT_EQ(r->layers(2).gated_mlp().gate(), "w1");
  EXPECT_EQ(r->layers(2).gated_mlp().up(), "w3");
  EXPECT_EQ(r->layers(2).gated_mlp().down(), "w2");
  EXPECT_EQ(r->layers(3).residual().block_start(), 1);
  EXPECT_EQ(r->layers(4).residual().block_start(), 0);
  EXPECT_EQ(r->layers(5).activation().kind(), v1::ACTIVATION_GELU_TANH);
  EXPECT_EQ(r->layers(6).activation().kind(), v1::ACTIVATION_SILU);
  EXPECT_EQ(r->layers(7).activation().kind(), v1::ACTIVATION_RELU);
  EXPECT_EQ(r->layers(8).linear().weight(), "head");
  EXPECT_EQ(r->layers(8).linear().bias_size(), 2);
  EXPECT_EQ(r->layers(9).linear().weight(), "plain");
  EXPECT_EQ(r->layers(9).linear().bias_size(), 0);
}

void ExpectBad(std::string_view json, absl::string_view needle) {
  const absl::Status s = ParseModelSpec(json).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos)
      << "message: " << s.message() << "\nwanted: " << needle;
}

TEST(ModelSpecTest, NamesTheBadPart) {
  ExpectBad(R"({"name": "m", "layers": [{"rms_norm": {"weight": [1]}}]})",
            "layers[0].rms_norm: needs \"epsilon\", a number");
  ExpectBad(R"({"name": "m", "layers": [{"rms_norm": {"epsilon": 1e-5}}]})",
            "layers[0].rms_norm: needs \"weight\"");
  ExpectBad(R"({"name": "m", "layers": [{"rms_norm": 1}]})",
            "layers[0].rms_norm: must be an object");
  ExpectBad("{", "not valid JSON");
  ExpectBad("[]", "must be a JSON object");
  ExpectBad(R"({"layers": []})", "spec: needs \"name\"");
  ExpectBad(R"({"name": 3, "layers": []})", "spec.name: must be a string");
  ExpectBad(R"({"name": "m"})", "needs \"layers\", a list");
  ExpectBad(R"({"name": "m", "layers": [{"conv": {}}]})", "layers[0]: unknown layer kind \"conv\"");
  ExpectBad(R"({"name": "m", "layers": [{"linear": "a", "dyt": {}}]})",
            "layers[0]: must be an object with exactly one key");
  ExpectBad(R"({"name": "m", "layers": [{"linear": 7}]})", "layers[0].linear: must be a string");
  ExpectBad(R"({"name": "m", "layers": [{"linear": {"bias": [1]}}]})",
            "layers[0].linear: needs \"weight\"");
  ExpectBad(R"({"name": "m", "layers": [{"linear": {"weight": "w", "bias": [1, "x"]}}]})",
            "layers[0].linear.bias[1]: must be a number");
  ExpectBad(R"({"name": "m", "layers": [{"dyt": {"gamma": [1]}}]})",
            "layers[0].dyt: needs \"alpha\"");
  ExpectBad(R"({"name": "m", "layers": [{"dyt": {"alpha": 1}}]})", "needs \"gamma\"");
  ExpectBad(R"({"name": "m", "layers": [{"dyt": {"alpha": 1, "gamma": 1}}]})",
            "layers[0].dyt.gamma: a single number needs \"features\"");
  // Not 9e12 values in memory: no weight is that wide.
  ExpectBad(
      R"({"name": "m", "layers": [{"dyt": {"alpha": 1, "gamma": 1, "features": 9000000000000}}]})",
      "layers[0].dyt.features: 9000000000000 exceeds the largest dimension of a weight, "
      "1048576");
  ExpectBad(R"({"name": "m", "layers": [{"dyt": {"alpha": 1, "gamma": "x"}}]})",
            "must be a number or a list of numbers");
  ExpectBad(R"({"name": "m", "layers": [{"activation": "tanh"}]})",
            "\"tanh\" is not silu, gelu_tanh or relu");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b"}}]})",
            "layers[0].gated_mlp: needs \"down\"");
  ExpectBad(R"({"name": "m", "layers": [{"residual": "x"}]})", "needs block_start, an integer");
}

}  // namespace
}  // namespace qmm
