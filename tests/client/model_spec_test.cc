#include "client/model_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/nd_array.h"
#include "client/npy.h"
#include "client/safetensors.h"

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
      {"rms_norm": {"weight": 1.25, "features": 4, "epsilon": 1e-5}},
      {"gated_mlp": {"gate": "g", "up": "u", "down": "d", "activation": "gelu_tanh"}},
      {"gated_mlp": {"gate": "g", "up": "u", "down": "d", "activation": "relu2",
                     "sub_norm": {"weight": [1, 2, 3], "epsilon": 1e-5}}},
      {"activation": "relu_squared"}
    ]
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name(), "llama-block");
  ASSERT_EQ(r->layers_size(), 15);
  EXPECT_FALSE(r->layers(12).gated_mlp().has_sub_norm());
  EXPECT_EQ(r->layers(13).gated_mlp().activation(), v1::ACTIVATION_RELU_SQUARED);
  ASSERT_EQ(r->layers(13).gated_mlp().sub_norm().weight_size(), 3);
  EXPECT_FLOAT_EQ(r->layers(13).gated_mlp().sub_norm().weight(2), 3.0f);
  EXPECT_FLOAT_EQ(r->layers(13).gated_mlp().sub_norm().epsilon(), 1e-5f);
  EXPECT_EQ(r->layers(14).activation().kind(), v1::ACTIVATION_RELU_SQUARED);
  EXPECT_EQ(r->layers(2).gated_mlp().activation(), v1::ACTIVATION_UNSPECIFIED);
  EXPECT_EQ(r->layers(12).gated_mlp().activation(), v1::ACTIVATION_GELU_TANH);
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
            "must be a number, a list of numbers or a file's tensor");
  ExpectBad(R"({"name": "m", "layers": [{"activation": "tanh"}]})",
            "\"tanh\" is not silu, gelu_tanh, relu or relu2");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b"}}]})",
            "layers[0].gated_mlp: needs \"down\"");
  ExpectBad(R"({"name": "m", "layers": [{"residual": "x"}]})", "needs block_start, an integer");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b", "down": "c",
                                                       "activation": "swish"}}]})",
            "layers[0].gated_mlp.activation: \"swish\" is not silu, gelu_tanh, relu or relu2");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b", "down": "c",
                                                       "sub_norm": [1, 2]}}]})",
            "layers[0].gated_mlp.sub_norm: must be an object");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b", "down": "c",
                                                       "sub_norm": {"weight": [1]}}}]})",
            "layers[0].gated_mlp.sub_norm: needs \"epsilon\", a number");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b", "down": "c",
                                                       "sub_norm": {"epsilon": 1e-5}}}]})",
            "layers[0].gated_mlp.sub_norm: needs \"weight\"");
  ExpectBad(R"({"name": "m", "layers": [{"gated_mlp": {"gate": "a", "up": "b", "down": "c",
                                "sub_norm": {"weight": [1, "x"], "epsilon": 1e-5}}}]})",
            "layers[0].gated_mlp.sub_norm.weight[1]: must be a number");
}

// Vectors read from a checkpoint's files, as a Llama block's RMSNorm weight is.
class ModelSpecFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("model_spec_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // bf16 and f16 hold these exactly, so the expected values are the literals.
    const std::vector<float> norm = {1.0078125f, -0.5f, 3.25f, 0.01171875f, 96.0f};
    const std::vector<float> bias = {0.1f, -7.3f, 1e-3f};
    const std::vector<float> square = {1, 2, 3, 4};
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(),
                                 {{"layers.0.norm", FromFloats(DType::kBF16, {5}, norm)},
                                  {"head.bias", FromFloats(DType::kF32, {3}, bias)},
                                  {"square", FromFloats(DType::kF16, {2, 2}, square)},
                                  {"ids", NdArray{ElementType::kI32, {1}, {7, 0, 0, 0}}}})
                    .ok());
    NdArray f64{ElementType::kF64, {2}, std::vector<uint8_t>(16)};
    const double values[2] = {0.3, -2.5e-7};
    std::memcpy(f64.data.data(), values, sizeof(values));
    ASSERT_TRUE(WriteNpy((dir_ / "gamma.npy").string(), f64).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(ModelSpecFileTest, ReadsVectorsFromNpyAndSafetensorsFiles) {
  const std::string absolute = (dir_ / "gamma.npy").string();
  absl::StatusOr<v1::CreateModelRequest> r = ParseModelSpec(
      R"({"name": "block", "layers": [
        {"rms_norm": {"weight": {"safetensors": "model.safetensors", "tensor": "layers.0.norm"},
                      "epsilon": 1e-5}},
        {"linear": {"weight": "head", "bias": {"safetensors": "model.safetensors",
                                                "tensor": "head.bias"}}},
        {"dyt": {"alpha": 1, "gamma": {"npy": ")" +
          absolute + R"("}, "beta": {"npy": "gamma.npy"}}}]})",
      dir_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& norm = r->layers(0).rms_norm().weight();
  EXPECT_EQ(std::vector<float>(norm.begin(), norm.end()),
            (std::vector<float>{1.0078125f, -0.5f, 3.25f, 0.01171875f, 96.0f}));
  const auto& bias = r->layers(1).linear().bias();
  EXPECT_EQ(std::vector<float>(bias.begin(), bias.end()), (std::vector<float>{0.1f, -7.3f, 1e-3f}));
  // f64 rounded to float; the absolute path and the one relative to the spec's folder agree.
  ASSERT_EQ(r->layers(2).dyt().gamma_size(), 2);
  EXPECT_EQ(r->layers(2).dyt().gamma(0), 0.3f);
  EXPECT_EQ(r->layers(2).dyt().gamma(1), -2.5e-7f);
  EXPECT_EQ(r->layers(2).dyt().beta(1), -2.5e-7f);
}

TEST_F(ModelSpecFileTest, NamesTheFileAndWhatIsWrong) {
  const auto bad = [&](const std::string& vector, absl::StatusCode code, absl::string_view needle) {
    const absl::Status s =
        ParseModelSpec(R"({"name": "m", "layers": [{"rms_norm": {"epsilon": 1e-5, "weight": )" +
                           vector + "}}]}",
                       dir_.string())
            .status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos)
        << "message: " << s.message() << "\nwanted: " << needle;
  };
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  bad(R"({"tensor": "x"})", invalid,
      "layers[0].rms_norm.weight: a vector read from a file is {\"npy\": FILE} or");
  bad(R"({"npy": "gamma.npy", "safetensors": "model.safetensors"})", invalid,
      "a vector read from a file is");
  bad(R"({"npy": 3})", invalid, "layers[0].rms_norm.weight.npy: must be a string");
  bad(R"({"safetensors": "model.safetensors"})", invalid,
      "layers[0].rms_norm.weight: needs \"tensor\"");
  bad(R"({"npy": "missing.npy"})", absl::StatusCode::kNotFound, "layers[0].rms_norm.weight: ");
  bad(R"({"npy": "missing.npy"})", absl::StatusCode::kNotFound, "missing.npy");
  bad(R"({"safetensors": "model.safetensors", "tensor": "nope"})", absl::StatusCode::kNotFound,
      "nope");
  bad(R"({"safetensors": "model.safetensors", "tensor": "ids"})", invalid,
      "model.safetensors tensor ids holds i32; a vector must be f16, bf16, f32 or f64");
  bad(R"({"safetensors": "model.safetensors", "tensor": "square"})", invalid,
      "model.safetensors tensor square has 2 dimensions; a vector has one");
  // Not a .npy file.
  bad(R"({"npy": "model.safetensors"})", invalid, "layers[0].rms_norm.weight: ");
}

}  // namespace
}  // namespace qmm
