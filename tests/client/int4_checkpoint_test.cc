#include "client/int4_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "client/safetensors.h"
#include "tests/int4_checkpoint_data.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;
using Tensors = std::vector<std::pair<std::string, NdArray>>;

NdArray Tensor(ElementType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
  return NdArray{type, std::move(shape), std::move(data)};
}

class Int4CheckpointReaderTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
  }

  // `tensors` written as a .safetensors file and opened.
  SafetensorsFile Write(const Tensors& tensors) {
    const std::string path = ::testing::TempDir() + "/int4_checkpoint_test_" +
                             std::to_string(getpid()) + "_" + std::to_string(written_.size());
    written_.push_back(path);
    EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
    return *std::move(file);
  }

  std::vector<std::string> written_;
};

// A GPTQ layer "l" of 16 x 256 in groups of 128, its tensors and its upload payload.
struct GptqLayer {
  testing::Int4Weight w = testing::RandomInt4Weight(16, 256, 128, DType::kF16, 7);
  testing::Int4CheckpointTensors t = testing::GptqTensors(w, DType::kF16, 7);

  Tensors Files(bool with_g_idx) const {
    Tensors out = {{"l.qweight", Tensor(ElementType::kI32, {32, 16}, t.codes)},
                   {"l.qzeros", Tensor(ElementType::kI32, {2, 2}, t.zeros)},
                   {"l.scales", Tensor(ElementType::kF16, {2, 16}, t.scales)},
                   {"l.bias", Tensor(ElementType::kF16, {16}, std::vector<uint8_t>(32, 1))}};
    if (with_g_idx) out.emplace_back("l.g_idx", Tensor(ElementType::kI32, {256}, t.g_idx));
    return out;
  }
};

TEST_F(Int4CheckpointReaderTest, GptqLayerByItsNameOrATensorsName) {
  const GptqLayer layer;
  for (bool with_g_idx : {false, true}) {
    const SafetensorsFile file = Write(layer.Files(with_g_idx));
    for (const char* name : {"l", "l.qweight", "l.scales"}) {
      absl::StatusOr<Int4CheckpointPayload> p =
          ReadInt4Checkpoint(file, name, Int4Checkpoint::kGptq);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->shape.n, 16);
      EXPECT_EQ(p->shape.k, 256);
      EXPECT_EQ(p->shape.group_size, 128);
      EXPECT_EQ(p->scale_dtype, DType::kF16);
      EXPECT_FALSE(p->shape.zero_points);  // every zero point 8 (stored 7)
      EXPECT_FALSE(p->shape.act_order);    // g_idx, where there, is k / 128
      EXPECT_EQ(p->bytes, layer.t.Payload(with_g_idx));
    }
  }
}

// An AWQ layer (qweight [K, N/8], no g_idx) always has zero points; a GPTQ layer's
// tensors do not say whether it was quantized with sym=False, so its caller says.
TEST_F(Int4CheckpointReaderTest, AwqLayerHasZeroPointsAndGptqLeavesThemToTheCaller) {
  const testing::Int4Weight w =
      testing::WithZeroPoints(testing::RandomInt4Weight(16, 256, 128, DType::kF16, 9), -8, 7, 10);
  const testing::Int4CheckpointTensors awq = testing::AwqTensors(w, DType::kF16);
  const SafetensorsFile file =
      Write({{"a.qweight", Tensor(ElementType::kI32, {256, 2}, awq.codes)},
             {"a.qzeros", Tensor(ElementType::kI32, {2, 2}, awq.zeros)},
             {"a.scales", Tensor(ElementType::kF16, {2, 16}, awq.scales)}});
  absl::StatusOr<Int4CheckpointPayload> p = ReadInt4Checkpoint(file, "a", Int4Checkpoint::kAwq);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shape.n, 16);
  EXPECT_EQ(p->shape.k, 256);
  EXPECT_EQ(p->shape.group_size, 128);
  EXPECT_TRUE(p->shape.zero_points);
  EXPECT_EQ(p->bytes, awq.Payload(false));

  GptqLayer asymmetric;
  asymmetric.t.zeros[5] = 0x57;  // one zero point stored as 5 (6)
  const SafetensorsFile gptq = Write(asymmetric.Files(true));
  p = ReadInt4Checkpoint(gptq, "l", Int4Checkpoint::kGptq);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->shape.zero_points);
  EXPECT_EQ(p->bytes, asymmetric.t.Payload(true));
}

// An asymmetric compressed-tensors layer (W4A16_ASYM): its weight_zero_point [N/8, G] goes
// between the codes and the scales, and the layer has zero points.
TEST_F(Int4CheckpointReaderTest, PackQuantizedZeroPoints) {
  const testing::Int4Weight w =
      testing::WithZeroPoints(testing::RandomInt4Weight(16, 256, 128, DType::kF16, 12), -8, 7, 13);
  const testing::Int4CheckpointTensors t = testing::PackQuantizedTensors(w, DType::kF16);
  const SafetensorsFile file =
      Write({{"l.weight_packed", Tensor(ElementType::kI32, {16, 32}, t.codes)},
             {"l.weight_zero_point", Tensor(ElementType::kI32, {2, 2}, t.zeros)},
             {"l.weight_scale", Tensor(ElementType::kF16, {16, 2}, t.scales)},
             {"l.weight_g_idx", Tensor(ElementType::kI32, {256}, t.g_idx)}});
  absl::StatusOr<Int4CheckpointPayload> p =
      ReadInt4Checkpoint(file, "l.weight_zero_point", Int4Checkpoint::kPackQuantized);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->shape.zero_points);
  EXPECT_FALSE(p->shape.act_order);
  EXPECT_EQ(p->bytes, t.Payload(true));
}

// A group index that scatters the groups (desc_act) makes the layer one in activation
// order; one feature out of place is enough.
TEST_F(Int4CheckpointReaderTest, ScatteredGroupIndexIsActivationOrder) {
  GptqLayer layer;
  layer.w = testing::WithActOrder(layer.w, 11);
  layer.t = testing::GptqTensors(layer.w, DType::kF16, 7);
  absl::StatusOr<Int4CheckpointPayload> p =
      ReadInt4Checkpoint(Write(layer.Files(true)), "l", Int4Checkpoint::kGptq);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->shape.act_order);
  EXPECT_EQ(p->bytes, layer.t.Payload(true));

  GptqLayer swapped;
  std::swap_ranges(swapped.t.g_idx.begin(), swapped.t.g_idx.begin() + 4,
                   swapped.t.g_idx.end() - 4);  // k 0 to group 1, k 255 to group 0
  p = ReadInt4Checkpoint(Write(swapped.Files(true)), "l", Int4Checkpoint::kGptq);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->shape.act_order);
}

TEST_F(Int4CheckpointReaderTest, PackQuantizedPerRowWithBf16Scales) {
  const testing::Int4Weight w = testing::RandomInt4Weight(24, 128, 0, DType::kBF16, 8);
  const testing::Int4CheckpointTensors t = testing::PackQuantizedTensors(w, DType::kBF16);
  std::vector<uint8_t> shape;
  testing::AppendWord(&shape, 24);
  testing::AppendWord(&shape, 0);
  testing::AppendWord(&shape, 128);
  testing::AppendWord(&shape, 0);
  const SafetensorsFile file =
      Write({{"m.weight_packed", Tensor(ElementType::kI32, {24, 16}, t.codes)},
             {"m.weight_scale", Tensor(ElementType::kBF16, {24, 1}, t.scales)},
             {"m.weight_shape", Tensor(ElementType::kI64, {2}, shape)}});
  absl::StatusOr<Int4CheckpointPayload> p =
      ReadInt4Checkpoint(file, "m", Int4Checkpoint::kPackQuantized);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shape.n, 24);
  EXPECT_EQ(p->shape.k, 128);
  EXPECT_EQ(p->shape.group_size, 128);  // K = 128: one group a row is a group of 128
  EXPECT_EQ(p->scale_dtype, DType::kBF16);
  EXPECT_EQ(p->bytes, t.Payload(false));
}

// Each inconsistency is named with its tensor.
TEST_F(Int4CheckpointReaderTest, Errors) {
  const GptqLayer layer;
  const auto expect_error = [&](Tensors tensors, Int4Checkpoint format, absl::StatusCode code,
                                const std::string& message) {
    const SafetensorsFile file = Write(tensors);
    absl::StatusOr<Int4CheckpointPayload> p = ReadInt4Checkpoint(file, "l", format);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), code);
    EXPECT_THAT(p.status().message(), HasSubstr(message));
  };
  Tensors tensors = layer.Files(true);
  tensors.erase(tensors.begin() + 1);  // no qzeros
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kNotFound, "no tensor 'l.qzeros'");

  tensors = layer.Files(false);
  tensors[0].second.type = ElementType::kU32;
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kInvalidArgument,
               "tensor 'l.qweight' is u32 [32, 16]; expected a 2-D tensor of i32");

  tensors = layer.Files(false);
  tensors[2].second = Tensor(ElementType::kF16, {2, 8}, std::vector<uint8_t>(32));
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kInvalidArgument,
               "tensor 'l.scales' is [2, 8]; the layer's other tensors make it [2, 16]");

  tensors = layer.Files(false);
  tensors[2].second = Tensor(ElementType::kF16, {4, 16}, std::vector<uint8_t>(128));
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kInvalidArgument,
               "holds 4 groups of 256 inputs: a group size of 64, where W4A16 takes groups of "
               "128 or one group a row");

  tensors = layer.Files(false);
  tensors[1].second = Tensor(ElementType::kI32, {1, 2}, std::vector<uint8_t>(8));
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kInvalidArgument,
               "tensor 'l.qzeros' is [1, 2]; the layer's other tensors make it [2, 2]");

  tensors = layer.Files(false);
  tensors.emplace_back("l.g_idx", Tensor(ElementType::kI32, {128}, std::vector<uint8_t>(512)));
  expect_error(tensors, Int4Checkpoint::kGptq, absl::StatusCode::kInvalidArgument,
               "tensor 'l.g_idx' is [128]; the layer's other tensors make it [256]");

  // compressed-tensors: zero points packed along the wrong axis, and a weight_shape that
  // disagrees.
  const testing::Int4CheckpointTensors pq = testing::PackQuantizedTensors(layer.w, DType::kF16);
  const Tensors pq_files = {{"l.weight_packed", Tensor(ElementType::kI32, {16, 32}, pq.codes)},
                            {"l.weight_scale", Tensor(ElementType::kF16, {16, 2}, pq.scales)}};
  tensors = pq_files;
  tensors.emplace_back("l.weight_zero_point",
                       Tensor(ElementType::kI32, {1, 4}, std::vector<uint8_t>(16)));
  expect_error(tensors, Int4Checkpoint::kPackQuantized, absl::StatusCode::kInvalidArgument,
               "tensor 'l.weight_zero_point' is [1, 4]; the layer's other tensors make it [2, 2]");
  tensors = pq_files;
  std::vector<uint8_t> shape;
  testing::AppendWord(&shape, 16);
  testing::AppendWord(&shape, 512);
  tensors.emplace_back("l.weight_shape", Tensor(ElementType::kI32, {2}, shape));
  expect_error(tensors, Int4Checkpoint::kPackQuantized, absl::StatusCode::kInvalidArgument,
               "tensor 'l.weight_shape' does not say [16, 256]");
  // A GPTQ layer read as pack-quantized: its tensors are not there.
  expect_error(layer.Files(false), Int4Checkpoint::kPackQuantized, absl::StatusCode::kNotFound,
               "no tensor 'l.weight_packed'");
}

}  // namespace
}  // namespace qmm
