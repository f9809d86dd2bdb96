#include "client/checkpoint_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "client/file_io.h"

namespace qmm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<CheckpointConfig> FromConfigJson(const std::string& quantization_config) {
  return ParseQuantizationConfig(
      R"({"architectures": ["LlamaForCausalLM"], "quantization_config": )" + quantization_config +
          "}",
      "config.json", /*whole_file=*/false);
}

void ExpectRefused(const absl::StatusOr<CheckpointConfig>& config, const std::string& message) {
  ASSERT_FALSE(config.ok()) << config->description;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_THAT(config.status().message(), HasSubstr(message));
}

TEST(CheckpointConfigTest, Gptq) {
  // transformers' GPTQConfig, as a GPTQ checkpoint's config.json holds it.
  absl::StatusOr<CheckpointConfig> c = FromConfigJson(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true,
          "sym": false, "damp_percent": 0.01, "true_sequential": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kGptq);
  EXPECT_TRUE(c->zero_points);
  EXPECT_EQ(c->group_size, 128);
  EXPECT_EQ(c->file, "config.json");
  EXPECT_EQ(c->description, "GPTQ (gptq, sym=False, group_size 128, desc_act)");
  // AutoGPTQ's quantize_config.json (no quant_method in older ones), GPTQModel's format key.
  c = ParseQuantizationConfig(R"({"bits": 4, "group_size": -1, "sym": true})",
                              "quantize_config.json", /*whole_file=*/true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kGptq);
  EXPECT_FALSE(c->zero_points);
  EXPECT_EQ(c->group_size, 0);
  c = ParseQuantizationConfig(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "format": "GPTQ_V2"})",
      "quantize_config.json", /*whole_file=*/true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kGptqV2);
  EXPECT_FALSE(c->zero_points);  // sym defaults to true
}

TEST(CheckpointConfigTest, Awq) {
  absl::StatusOr<CheckpointConfig> c = FromConfigJson(
      R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm",
          "zero_point": true, "modules_to_not_convert": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kAwq);
  EXPECT_TRUE(c->zero_points);
  EXPECT_EQ(c->group_size, 128);
  // AutoAWQ's quant_config.json.
  c = ParseQuantizationConfig(R"({"zero_point": true, "q_group_size": 128, "w_bit": 4,
                                  "version": "GEMM"})",
                              "quant_config.json", /*whole_file=*/true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kAwq);
  EXPECT_EQ(c->description, "AWQ (gemm, group_size 128)");
}

TEST(CheckpointConfigTest, CompressedTensors) {
  absl::StatusOr<CheckpointConfig> c = FromConfigJson(R"({
      "quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {
        "group_0": {"targets": ["Linear"], "input_activations": null,
                    "weights": {"num_bits": 4, "type": "int", "symmetric": true,
                                "strategy": "group", "group_size": 128, "actorder": "group"}},
        "group_1": {"targets": ["re:.*down_proj"], "format": "pack-quantized",
                    "weights": {"num_bits": 4, "type": "int", "symmetric": false,
                                "strategy": "channel"}}},
      "ignore": ["lm_head"]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kPackQuantized);
  EXPECT_TRUE(c->zero_points);              // group_1 is asymmetric
  EXPECT_FALSE(c->group_size.has_value());  // each scheme's own
  EXPECT_EQ(c->description,
            "compressed-tensors pack-quantized (group_0: sym, group 128; group_1: asym, channel)");
}

// transformers' BitNetQuantConfig: BitLinear's scale divides, AutoBitLinear's multiplies
// (microsoft/bitnet-b1.58-2B-4T's config.json holds the second).
TEST(CheckpointConfigTest, Bitnet) {
  absl::StatusOr<CheckpointConfig> c = FromConfigJson(
      R"({"quant_method": "bitnet", "linear_class": "autobitlinear",
          "quantization_mode": "offline"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bitnet, BitnetScale::kMultiplies);
  EXPECT_EQ(c->description, "BitNet b1.58 (autobitlinear: the weight scale multiplies)");
  c = FromConfigJson(R"({"quant_method": "BitNet", "modules_to_not_convert": ["lm_head"]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bitnet, BitnetScale::kDivides);
  EXPECT_EQ(c->description, "BitNet b1.58 (bitlinear: the weight scale divides)");
  // The int4 formats leave it unset.
  c = FromConfigJson(R"({"quant_method": "awq", "bits": 4, "group_size": 128})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->bitnet.has_value());
}

TEST(CheckpointConfigTest, WhatCannotBeHeldIsNamed) {
  ExpectRefused(FromConfigJson(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})"),
                "config.json: bits = 8: only 4-bit GPTQ layers are taken");
  ExpectRefused(FromConfigJson(R"({"quant_method": "gptq", "bits": 4, "group_size": 64})"),
                "group_size = 64: W4A16 takes groups of 128 or -1");
  ExpectRefused(FromConfigJson(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                                   "checkpoint_format": "marlin"})"),
                "checkpoint_format = \"marlin\": GPTQ layers are taken in the gptq and gptq_v2");
  ExpectRefused(FromConfigJson(R"({"quant_method": "gptq", "bits": "4", "group_size": 128})"),
                "bits must be an integer");
  ExpectRefused(FromConfigJson(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                                   "version": "gemv"})"),
                "version = \"gemv\": only the gemm version's layout is taken");
  ExpectRefused(FromConfigJson(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                                   "zero_point": false})"),
                "zero_point = false: AWQ layers without zero points are not taken");
  ExpectRefused(FromConfigJson(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})"),
                "quant_method = \"bitsandbytes\": the checkpoints taken are gptq, awq and "
                "compressed-tensors (int4) and bitnet (ternary)");
  ExpectRefused(FromConfigJson(R"({"quant_method": "bitnet", "linear_class": "ternarylinear"})"),
                "linear_class = \"ternarylinear\": transformers' BitNet layers are bitlinear or "
                "autobitlinear");
  ExpectRefused(FromConfigJson(R"({"quant_method": "bitnet", "linear_class": "autobitlinear",
                                   "quantization_mode": "online"})"),
                "quantization_mode = \"online\": only offline checkpoints are taken");
  ExpectRefused(FromConfigJson(R"({"quant_method": "bitnet", "use_rms_norm": true})"),
                "use_rms_norm = true: each layer normalizes its input by an RMSNorm of its own");
  ExpectRefused(FromConfigJson(R"({"quant_method": "bitnet", "use_rms_norm": 1})"),
                "use_rms_norm must be true or false");
  const std::string group =
      R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128})";
  ExpectRefused(FromConfigJson(R"({"quant_method": "compressed-tensors", "format": "int-quantized",
                                   "config_groups": {"g": {"weights": )" +
                               group + "}}}"),
                "config_groups.g.format = int-quantized: only the pack-quantized format");
  ExpectRefused(FromConfigJson(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                         "config_groups": {"g": {"weights": )" +
                               group + R"(, "input_activations": {"num_bits": 8}}}})"),
                "config_groups.g.input_activations = {\"num_bits\":8}: activation quantization");
  ExpectRefused(FromConfigJson(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                         "config_groups": {"g": {"weights": {"num_bits": 8, "strategy": "channel"}}}})"),
                "config_groups.g.weights.num_bits must be 4");
  ExpectRefused(
      FromConfigJson(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                         "config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "tensor"}}}})"),
      "config_groups.g.weights.strategy = tensor: W4A16 takes the group (of 128) and channel");
  ExpectRefused(FromConfigJson(R"({"quant_method": "compressed-tensors"})"),
                "compressed-tensors settings without config_groups");
  ExpectRefused(ParseQuantizationConfig("{not json", "config.json", false),
                "config.json: is not JSON");
  const absl::StatusOr<CheckpointConfig> none =
      ParseQuantizationConfig(R"({"architectures": []})", "config.json", false);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("checkpoint_config_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(
        WriteFile((dir_ / name).string(), std::vector<uint8_t>(text.begin(), text.end())).ok());
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST_F(CheckpointDirTest, SettingsFromTheFirstFileThatHasThem) {
  EXPECT_EQ(ReadCheckpointConfig(dir_.string()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadCheckpointConfig(Path("missing")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A config.json without quantization_config: AutoGPTQ's quantize_config.json says it.
  Write("config.json", R"({"architectures": ["LlamaForCausalLM"]})");
  Write("quantize_config.json", R"({"bits": 4, "group_size": 128, "sym": false})");
  absl::StatusOr<CheckpointConfig> c = ReadCheckpointConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->file, Path("quantize_config.json"));
  EXPECT_TRUE(c->zero_points);
  // One with it wins; a refused one is the answer, not a reason to look further.
  Write("config.json", R"({"quantization_config": {"quant_method": "awq", "bits": 4,
                                                    "group_size": 128}})");
  c = ReadCheckpointConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->format, Int4Checkpoint::kAwq);
  Write("config.json", R"({"quantization_config": {"quant_method": "awq", "bits": 3,
                                                    "group_size": 128}})");
  ExpectRefused(ReadCheckpointConfig(dir_.string()), "bits = 3");
}

TEST_F(CheckpointDirTest, ShardsFromTheIndexOrTheDirectory) {
  EXPECT_EQ(CheckpointShards(dir_.string()).status().code(), absl::StatusCode::kNotFound);
  Write("model-00002-of-00002.safetensors", "");
  Write("model-00001-of-00002.safetensors", "");
  Write("notes.txt", "");
  absl::StatusOr<std::vector<std::string>> shards = CheckpointShards(dir_.string());
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre(Path("model-00001-of-00002.safetensors"),
                                   Path("model-00002-of-00002.safetensors")));
  // The index names the files that hold tensors, each once.
  Write("model.safetensors.index.json",
        R"({"metadata": {"total_size": 1}, "weight_map": {
              "a.qweight": "model-00002-of-00002.safetensors",
              "b.qweight": "model-00002-of-00002.safetensors"}})");
  shards = CheckpointShards(dir_.string());
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre(Path("model-00002-of-00002.safetensors")));
  Write("model.safetensors.index.json", R"({"weight_map": {"a.qweight": "../x.safetensors"}})");
  shards = CheckpointShards(dir_.string());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shards.status().message(), HasSubstr("must be a file name in the directory"));
}

}  // namespace
}  // namespace qmm
