#include "client/bitnet_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/nd_array.h"
#include "client/safetensors.h"

namespace qmm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A .safetensors file of BitNet layers as transformers writes them, and the tensors that
// make the reader refuse a layer.
class BitnetCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::path(::testing::TempDir()) /
             ("bitnet_checkpoint_test_" + std::to_string(getpid()) + ".safetensors"))
                .string();
    std::mt19937 rng(5);
    codes_.resize(2 * 128);  // N = 8, K = 128
    for (uint8_t& c : codes_) c = static_cast<uint8_t>(rng() % 3 | (rng() % 3) << 2);
    const std::vector<float> row_scales = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_TRUE(
        WriteSafetensors(
            path_,
            {{"a.weight", NdArray{ElementType::kU8, {2, 128}, codes_}},
             {"a.weight_scale", FromFloats(DType::kBF16, {1}, std::vector<float>{0.5f})},
             {"b.weight", NdArray{ElementType::kU8, {2, 128}, codes_}},
             {"c.weight", NdArray{ElementType::kU8, {2, 128}, codes_}},
             {"c.weight_scale", FromFloats(DType::kF32, {8}, row_scales)},
             {"float.weight", FromFloats(DType::kBF16, {8, 128}, std::vector<float>(1024, 1.0f))},
             {"flat.weight", NdArray{ElementType::kU8, {256}, codes_}},
             {"odd.weight", NdArray{ElementType::kU8, {2, 128}, codes_}},
             {"odd.weight_scale", FromFloats(DType::kF16, {3}, std::vector<float>{1, 2, 3})},
             {"ints.weight", NdArray{ElementType::kU8, {2, 128}, codes_}},
             {"ints.weight_scale", NdArray{ElementType::kI32, {1}, {1, 0, 0, 0}}}})
            .ok());
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_.emplace(*std::move(file));
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::string path_;
  std::vector<uint8_t> codes_;
  std::optional<SafetensorsFile> file_;
};

TEST_F(BitnetCheckpointTest, ReadsTheCodesThenTheScales) {
  absl::StatusOr<BitnetLayerPayload> a = ReadBitnetLayer(*file_, "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->n, 8);
  EXPECT_EQ(a->k, 128);
  EXPECT_EQ(a->scale_dtype, DType::kBF16);
  std::vector<uint8_t> expected = codes_;
  expected.insert(expected.end(), {0x00, 0x3f});  // bf16 0.5, little-endian
  EXPECT_EQ(a->bytes, expected);
  // A tensor's name stands for its layer.
  absl::StatusOr<BitnetLayerPayload> by_tensor = ReadBitnetLayer(*file_, "a.weight_scale");
  ASSERT_TRUE(by_tensor.ok()) << by_tensor.status();
  EXPECT_EQ(by_tensor->bytes, expected);

  absl::StatusOr<BitnetLayerPayload> b = ReadBitnetLayer(*file_, "b.weight");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->bytes, codes_);  // no scale
  EXPECT_EQ(b->scale_dtype, DType::kF32);
  absl::StatusOr<BitnetLayerPayload> c = ReadBitnetLayer(*file_, "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->scale_dtype, DType::kF32);
  EXPECT_EQ(c->bytes.size(), codes_.size() + 8 * 4);  // one a row
}

TEST_F(BitnetCheckpointTest, NamesTheTensorThatCannotBeALayer) {
  const auto refused = [&](const std::string& layer, absl::StatusCode code,
                           const std::string& message) {
    const absl::Status s = ReadBitnetLayer(*file_, layer).status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  };
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  refused("missing", absl::StatusCode::kNotFound, "no tensor 'missing.weight'");
  refused("float", invalid, "tensor 'float.weight' is bf16 [8, 128]; expected a 2-D tensor of u8");
  refused("flat", invalid, "tensor 'flat.weight' is u8 [256]; expected a 2-D tensor of u8");
  refused("odd", invalid,
          "tensor 'odd.weight_scale' is f16 [3]; expected one f16, bf16 or f32 value, or 8");
  refused("ints", invalid, "tensor 'ints.weight_scale' is i32 [1]");
}

TEST_F(BitnetCheckpointTest, LayersAreTheTwoDimensionalUint8Weights) {
  EXPECT_THAT(BitnetLayers(*file_), ElementsAre("a", "b", "c", "ints", "odd"));
}

}  // namespace
}  // namespace qmm
