// End to end for models: the real qmm-server and the real qmmctl upload random weights,
// create a model from a JSON spec file, run `qmmctl forward` with the float64 check of
// the whole model (--verify_seeds; tolerance ForwardTolerance in
// client/qmmctl/forward_verify.h), list, refuse to delete a weight in use, and delete.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/nd_array.h"
#include "client/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/server_fixture.h"
#include "tests/e2e/subprocess.h"

namespace qmm::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ForwardEndToEndTest : public ServerFixture {
 protected:
  // Writes `text` to a scratch file and returns its path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = Path(name);
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(ForwardEndToEndTest, CreateForwardVerifyAndDelete) {
  Ok({"upload", "--name=tok", "--scheme=bf16", "--random", "--n=100", "--k=256", "--seed=1"});
  Ok({"upload", "--name=gate", "--scheme=w4a16", "--random", "--n=512", "--k=256", "--seed=2"});
  Ok({"upload", "--name=up", "--scheme=w4a16", "--random", "--n=512", "--k=256", "--seed=3"});
  Ok({"upload", "--name=down", "--scheme=w2a8", "--random", "--n=256", "--k=512", "--seed=4"});
  Ok({"upload", "--name=head", "--scheme=w8a16", "--random", "--n=64", "--k=256", "--seed=5"});
  const std::string seeds = "--verify_seeds=tok=1,gate=2,up=3,down=4,head=5";

  // The MLP block alone (float input), and a small LM (token input) around it.
  const std::string block = Write("block.json", R"({
    "name": "block",
    "layers": [
      {"dyt": {"alpha": 0.5, "gamma": 1.0, "beta": 0.125, "features": 256}},
      {"gated_mlp": {"gate": "gate", "up": "up", "down": "down"}},
      {"residual": 0}
    ]})");
  const std::string lm = Write("lm.json", R"({
    "name": "lm",
    "layers": [
      {"embedding": "tok"},
      {"dyt": {"alpha": 0.8, "gamma": 1.5, "features": 256}},
      {"gated_mlp": {"gate": "gate", "up": "up", "down": "down"}},
      {"residual": 1},
      {"activation": "silu"},
      {"linear": {"weight": "head", "bias": 0.25, "features": 64}}
    ]})");
  EXPECT_THAT(Ok({"create-model", block}), HasSubstr("created model block"));
  EXPECT_THAT(Ok({"create-model", lm}), HasSubstr("created model lm"));

  for (const std::string dtype : {"fp32", "fp16", "bf16"}) {
    for (const std::string m : {"1", "5"}) {
      EXPECT_THAT(Ok({"forward", "--model=block", "--random", "--m=" + m, "--dtype=" + dtype,
                      "--seed=9", seeds}),
                  HasSubstr(": PASS"));
    }
  }
  EXPECT_THAT(Ok({"forward", "--model=lm", "--tokens=0,99,42", "--repeat=3", seeds}),
              HasSubstr(": PASS"));
  // The repeats over one ForwardStream, activations and token ids.
  EXPECT_THAT(Ok({"forward", "--model=block", "--random", "--m=3", "--repeat=4", "--stream",
                  "--seed=9", seeds}),
              HasSubstr(": PASS"));
  EXPECT_THAT(Ok({"forward", "--model=lm", "--tokens=7,1", "--repeat=3", "--stream", seeds}),
              HasSubstr(": PASS"));
  EXPECT_THAT(Ok({"forward", "--model=lm", "--random", "--m=6", "--out_dtype=bf16", seeds}),
              HasSubstr(": PASS"));
  // The wrong seed fails the check (exit 1), which shows the check can fail.
  const RunResult wrong = Qmmctl(
      {"forward", "--model=block", "--random", "--m=2", "--verify_seeds=gate=2,up=3,down=5"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_THAT(wrong.output, HasSubstr(": FAIL"));

  const std::string ls = Ok({"ls-models"});
  EXPECT_THAT(ls, HasSubstr("block"));
  EXPECT_THAT(ls, HasSubstr("lm"));
  EXPECT_THAT(ls, HasSubstr("tokens"));

  const RunResult in_use = Qmmctl({"rm", "gate"});
  EXPECT_NE(in_use.exit_code, 0);
  EXPECT_THAT(in_use.output, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(in_use.output, HasSubstr("weight \"gate\" is used by models \"block\", \"lm\""));
  const RunResult bad = Qmmctl({"create-model", Write("bad.json", R"({"name": "x", "layers": [
      {"linear": "head"}, {"linear": "head"}]})")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.output, HasSubstr("layers[1].linear.weight"));

  Ok({"rm-model", "block"});
  Ok({"rm-model", "lm"});
  EXPECT_THAT(Ok({"ls-models"}), Not(HasSubstr("block")));
  Ok({"rm", "gate"});
}

// A Llama MLP block as Llama has it (RMSNorm, SwiGLU, residual), the norm's weight from a
// checkpoint-like .safetensors file beside the spec.
TEST_F(ForwardEndToEndTest, LlamaBlockVerifies) {
  Ok({"upload", "--name=gate", "--scheme=w4a16", "--random", "--n=512", "--k=256", "--seed=2"});
  Ok({"upload", "--name=up", "--scheme=w4a16", "--random", "--n=512", "--k=256", "--seed=3"});
  Ok({"upload", "--name=down", "--scheme=w4a16", "--random", "--n=256", "--k=512", "--seed=4"});
  std::vector<float> norm(256);
  for (size_t i = 0; i < norm.size(); ++i) norm[i] = 0.25f + 0.01f * static_cast<float>(i % 97);
  // Named in the spec relative to the spec's folder (qmmctl runs elsewhere).
  const std::filesystem::path checkpoint = Path("model.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(checkpoint.string(), {{"model.layers.0.post_attention_layernorm.weight",
                                              FromFloats(DType::kBF16, {256}, norm)}})
          .ok());
  const std::string block = Write("llama.json", R"({
    "name": "llama",
    "layers": [
      {"rms_norm": {"weight": {"safetensors": ")" + checkpoint.filename().string() +
                                                    R"(",
                               "tensor": "model.layers.0.post_attention_layernorm.weight"},
                    "epsilon": 1e-5}},
      {"gated_mlp": {"gate": "gate", "up": "up", "down": "down"}},
      {"residual": 0}
    ]})");
  EXPECT_THAT(Ok({"create-model", block}), HasSubstr("created model llama"));
  for (const std::string m : {"1", "7"}) {
    EXPECT_THAT(Ok({"forward", "--model=llama", "--random", "--m=" + m, "--dtype=bf16",
                    "--verify_seeds=gate=2,up=3,down=4"}),
                HasSubstr(": PASS"));
  }
  // Gemma's GeGLU: the same weights, the gate through GELU.
  const std::string geglu = Write("geglu.json", R"({
    "name": "geglu",
    "layers": [
      {"rms_norm": {"weight": 1.0, "features": 256, "epsilon": 1e-6}},
      {"gated_mlp": {"gate": "gate", "up": "up", "down": "down", "activation": "gelu_tanh"}},
      {"residual": 0}
    ]})");
  EXPECT_THAT(Ok({"create-model", geglu}), HasSubstr("created model geglu"));
  EXPECT_THAT(Ok({"forward", "--model=geglu", "--random", "--m=3", "--dtype=fp16",
                  "--verify_seeds=gate=2,up=3,down=4"}),
              HasSubstr(": PASS"));
  // The check can fail: the wrong down weight.
  const RunResult wrong =
      Qmmctl({"forward", "--model=llama", "--random", "--verify_seeds=gate=2,up=3,down=5"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
}

// BitNet b1.58 2B4T's MLP block: ternary weights, relu2, and the product's RMSNorm
// (ffn_sub_norm, over the 640 intermediate features) read from a checkpoint-like file.
TEST_F(ForwardEndToEndTest, BitNetBlockWithItsSubNormVerifies) {
  Ok({"upload", "--name=gate", "--scheme=w2a8", "--random", "--n=640", "--k=256", "--seed=2"});
  Ok({"upload", "--name=up", "--scheme=w2a8", "--random", "--n=640", "--k=256", "--seed=3"});
  Ok({"upload", "--name=down", "--scheme=w2a8", "--random", "--n=256", "--k=640", "--seed=4"});
  std::vector<float> sub_norm(640);
  for (size_t i = 0; i < sub_norm.size(); ++i) {
    sub_norm[i] = 0.5f + 0.02f * static_cast<float>(i % 53);
  }
  const std::filesystem::path checkpoint = Path("bitnet.safetensors");
  ASSERT_TRUE(WriteSafetensors(checkpoint.string(), {{"model.layers.0.mlp.ffn_sub_norm.weight",
                                                      FromFloats(DType::kBF16, {640}, sub_norm)}})
                  .ok());
  const std::string block = Write("bitnet.json", R"({
    "name": "bitnet",
    "layers": [
      {"rms_norm": {"weight": 1.25, "features": 256, "epsilon": 1e-5}},
      {"gated_mlp": {"gate": "gate", "up": "up", "down": "down", "activation": "relu2",
                     "sub_norm": {"weight": {"safetensors": ")" +
                                                     checkpoint.filename().string() + R"(",
                                  "tensor": "model.layers.0.mlp.ffn_sub_norm.weight"},
                                  "epsilon": 1e-5}}},
      {"residual": 0}
    ]})");
  EXPECT_THAT(Ok({"create-model", block}), HasSubstr("created model bitnet"));
  for (const std::string dtype : {"fp16", "bf16"}) {
    for (const std::string m : {"1", "5"}) {
      EXPECT_THAT(Ok({"forward", "--model=bitnet", "--random", "--m=" + m, "--dtype=" + dtype,
                      "--verify_seeds=gate=2,up=3,down=4"}),
                  HasSubstr(": PASS"));
    }
  }
  const RunResult wrong =
      Qmmctl({"forward", "--model=bitnet", "--random", "--verify_seeds=gate=2,up=5,down=4"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
}

}  // namespace
}  // namespace qmm::e2e
