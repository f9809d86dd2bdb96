#include "kernels/int4_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/reference.h"
#include "tests/int4_checkpoint_data.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

using testing::AwqTensors;
using testing::CanonicalInt4;
using testing::GptqTensors;
using testing::Int4Weight;
using testing::PackQuantizedTensors;
using testing::RandomInt4Weight;
using testing::WithActOrder;
using testing::WithZeroPoints;

std::vector<uint8_t> GptqPayload(const Int4Weight& w, DType dtype, uint32_t stored_zero,
                                 bool with_g_idx) {
  return GptqTensors(w, dtype, stored_zero).Payload(with_g_idx);
}

std::vector<uint8_t> PackQuantizedPayload(const Int4Weight& w, DType dtype, bool with_g_idx) {
  return PackQuantizedTensors(w, dtype).Payload(with_g_idx);
}

std::vector<uint8_t> Payload(Int4Checkpoint format, const Int4Weight& w, DType dtype,
                             bool with_g_idx) {
  switch (format) {
    case Int4Checkpoint::kGptq:
      return GptqPayload(w, dtype, 7, with_g_idx);
    case Int4Checkpoint::kGptqV2:
      return GptqPayload(w, dtype, 8, with_g_idx);
    case Int4Checkpoint::kPackQuantized:
      return PackQuantizedPayload(w, dtype, with_g_idx);
    case Int4Checkpoint::kAwq:
      return AwqTensors(w, dtype).Payload(false);
  }
  return {};
}

// Every nibble, scale, zero point and stored column of the canonical form against q, s, z
// and the groups, then the weight's products against a float64 sum of s * (q - z) * x over
// the input features, so the meaning is checked, not only bytes.
void ExpectCanonical(const std::vector<uint8_t>& packed, const Int4Weight& w) {
  const int64_t n = w.shape.n, k = w.shape.k, groups = w.Groups();
  ASSERT_EQ(packed, CanonicalInt4(w));
  absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW4A16, w.shape, packed);
  ASSERT_TRUE(view.ok()) << view.status();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> x(k);
  for (float& v : x) v = value(rng);
  const std::vector<double> y = ReferenceMatMul(*view, x.data(), 1);
  for (int64_t r = 0; r < n; ++r) {
    double expected = 0;
    for (int64_t c = 0; c < k; ++c) {
      const double s = HalfToFloat(FloatToHalf(w.s[r * groups + w.Group(c)]));
      expected += s * (w.q[r * k + c] - w.Zero(r, w.Group(c))) * x[c];
    }
    EXPECT_NEAR(y[r], expected, 1e-9 * (1 + std::abs(expected))) << "row " << r;
  }
}

struct Case {
  Int4Checkpoint format;
  int32_t group_size;
  DType dtype;
  bool with_g_idx;
  bool zero_points = false;
  bool act_order = false;
};

// The canonical zero points each format can store: "gptq" stores z + 7 in 4 bits.
std::pair<int, int> ZeroRange(Int4Checkpoint format) {
  return format == Int4Checkpoint::kGptq ? std::pair{-7, 8} : std::pair{-8, 7};
}

class Int4CheckpointTest : public ::testing::TestWithParam<Case> {};

TEST_P(Int4CheckpointTest, ConvertsEveryValueAndScale) {
  const Case p = GetParam();
  // Non-power-of-two N and K, and the smallest K.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{24, 384}, {8, 128}, {40, 256}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k);
    Int4Weight w = RandomInt4Weight(n, k, p.group_size, p.dtype, static_cast<uint32_t>(n + k));
    if (p.zero_points) {
      const auto [lo, hi] = ZeroRange(p.format);
      w = WithZeroPoints(w, lo, hi, static_cast<uint32_t>(n * k));
    }
    if (p.act_order) w = WithActOrder(w, static_cast<uint32_t>(n - k));
    const std::vector<uint8_t> payload = Payload(p.format, w, p.dtype, p.with_g_idx);
    const Int4CheckpointBytes sizes = Int4CheckpointSizes(p.format, w.shape, p.dtype);
    ASSERT_EQ(static_cast<int64_t>(payload.size()), sizes.Total(p.with_g_idx));
    absl::StatusOr<std::vector<uint8_t>> packed =
        Int4CheckpointToPacked(p.format, w.shape, p.dtype, payload);
    ASSERT_TRUE(packed.ok()) << packed.status();
    ExpectCanonical(*packed, w);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Int4CheckpointTest,
    ::testing::Values(Case{Int4Checkpoint::kGptq, 128, DType::kF16, false},
                      Case{Int4Checkpoint::kGptq, 128, DType::kF16, true},
                      Case{Int4Checkpoint::kGptq, 0, DType::kF16, true},
                      Case{Int4Checkpoint::kGptqV2, 128, DType::kBF16, false},
                      Case{Int4Checkpoint::kGptqV2, 0, DType::kF32, false},
                      Case{Int4Checkpoint::kPackQuantized, 128, DType::kBF16, false},
                      Case{Int4Checkpoint::kPackQuantized, 128, DType::kF16, true},
                      Case{Int4Checkpoint::kPackQuantized, 0, DType::kF32, true},
                      Case{Int4Checkpoint::kGptq, 128, DType::kF16, true, true},
                      Case{Int4Checkpoint::kGptq, 0, DType::kBF16, false, true},
                      Case{Int4Checkpoint::kGptqV2, 128, DType::kF16, false, true},
                      Case{Int4Checkpoint::kAwq, 128, DType::kF16, false, true},
                      Case{Int4Checkpoint::kAwq, 0, DType::kF32, false, true},
                      Case{Int4Checkpoint::kAwq, 128, DType::kBF16, false, false},
                      Case{Int4Checkpoint::kGptq, 128, DType::kF16, true, false, true},
                      Case{Int4Checkpoint::kGptq, 128, DType::kBF16, true, true, true},
                      Case{Int4Checkpoint::kGptqV2, 128, DType::kF32, true, true, true},
                      Case{Int4Checkpoint::kPackQuantized, 128, DType::kF16, true, false, true},
                      Case{Int4Checkpoint::kPackQuantized, 128, DType::kF16, false, true},
                      Case{Int4Checkpoint::kPackQuantized, 0, DType::kBF16, true, true},
                      Case{Int4Checkpoint::kPackQuantized, 128, DType::kF32, true, true, true}));

// One conversion, expected to fail with `message`.
void ExpectRejected(Int4Checkpoint format, const WeightShape& shape, DType dtype,
                    const std::vector<uint8_t>& payload, const std::string& message) {
  absl::StatusOr<std::vector<uint8_t>> packed =
      Int4CheckpointToPacked(format, shape, dtype, payload);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(packed.status().message(), HasSubstr(message));
}

TEST(Int4CheckpointErrors, PayloadLengthNamesTheTensors) {
  const Int4Weight w = RandomInt4Weight(16, 256, 128, DType::kF16, 1);
  std::vector<uint8_t> payload = GptqPayload(w, DType::kF16, 7, false);
  payload.pop_back();
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, payload,
                 "qweight (2048 bytes), qzeros (16), scales (64, fp16) and optionally g_idx "
                 "(1024): 2128 or 3152 bytes, got 2127");
  ExpectRejected(Int4Checkpoint::kPackQuantized, w.shape, DType::kF16, payload,
                 "weight_packed (2048 bytes), weight_scale (64, fp16) and optionally "
                 "weight_g_idx (1024): 2112 or 3136 bytes, got 2127");
  // AWQ has no group index: one length.
  ExpectRejected(Int4Checkpoint::kAwq, w.shape, DType::kF16, payload,
                 "qweight (2048 bytes), qzeros (16), scales (64, fp16): 2128 bytes, got 2127");
}

TEST(Int4CheckpointErrors, AsymmetricZeroPointNamesGroupAndColumn) {
  const Int4Weight w = RandomInt4Weight(16, 256, 128, DType::kF16, 2);
  for (Int4Checkpoint format : {Int4Checkpoint::kGptq, Int4Checkpoint::kGptqV2}) {
    std::vector<uint8_t> payload =
        GptqPayload(w, DType::kF16, format == Int4Checkpoint::kGptq ? 7 : 8, false);
    // Group 1, column 13: qzeros word [1][1], value 5 (bits 20..23).
    const int64_t word = 2048 + 4 * (1 * 2 + 1);
    payload[word + 2] = static_cast<uint8_t>((payload[word + 2] & 0x0f) | (9 << 4));
    const int zero = format == Int4Checkpoint::kGptq ? 10 : 9;
    ExpectRejected(format, w.shape, DType::kF16, payload,
                   "qzeros: group 1, column 13 has zero point " + std::to_string(zero));
  }
  // A "gptq_v2" checkpoint read as "gptq": every zero point looks like 9.
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, GptqPayload(w, DType::kF16, 8, false),
                 "qzeros: group 0, column 0 has zero point 9");
}

// With zero points the same checkpoints convert: GPTQ's zero points from 1 to 16 (a stored
// 15 of "gptq") and AWQ's, each in its group and column.
TEST(Int4CheckpointErrors, AsymmetricAwqWithoutZeroPointsNamesGroupAndColumn) {
  const Int4Weight w = WithZeroPoints(RandomInt4Weight(16, 256, 128, DType::kF16, 2), -8, 7, 3);
  WeightShape symmetric = w.shape;
  symmetric.zero_points = false;
  // The first zero point is -8 (8 - 8 unsigned 0): group 0, column 0.
  ExpectRejected(Int4Checkpoint::kAwq, symmetric, DType::kF16,
                 AwqTensors(w, DType::kF16).Payload(false),
                 "qzeros: group 0, column 0 has zero point 0; a weight without zero points "
                 "takes a symmetric quantization");
  absl::StatusOr<std::vector<uint8_t>> packed = Int4CheckpointToPacked(
      Int4Checkpoint::kAwq, w.shape, DType::kF16, AwqTensors(w, DType::kF16).Payload(false));
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectCanonical(*packed, w);
}

// An asymmetric pack-quantized layer carries weight_zero_point after weight_packed; one
// without zero_points is read as symmetric, with no such tensor.
TEST(Int4CheckpointErrors, PackQuantizedZeroPointsHaveTheirTensor) {
  const Int4Weight w = WithZeroPoints(RandomInt4Weight(16, 256, 128, DType::kF16, 2), -8, 7, 3);
  const std::vector<uint8_t> payload = PackQuantizedPayload(w, DType::kF16, false);
  WeightShape symmetric = w.shape;
  symmetric.zero_points = false;
  ExpectRejected(Int4Checkpoint::kPackQuantized, symmetric, DType::kF16, payload,
                 "weight_packed (2048 bytes), weight_scale (64, fp16) and optionally weight_g_idx "
                 "(1024): 2112 or 3136 bytes, got 2128");
  ExpectRejected(Int4Checkpoint::kPackQuantized, w.shape, DType::kF16,
                 std::vector<uint8_t>(payload.begin(), payload.end() - 16),
                 "weight_packed (2048 bytes), weight_zero_point (16), weight_scale (64, fp16)");
}

TEST(Int4CheckpointErrors, ActivationOrderGroupIndex) {
  const Int4Weight w = RandomInt4Weight(16, 256, 128, DType::kF16, 3);
  std::vector<uint8_t> payload = PackQuantizedPayload(w, DType::kF16, true);
  // weight_g_idx[5] = 1 (k 5 in the second group): a scattered, act-order grouping.
  payload[payload.size() - 4 * 256 + 4 * 5] = 1;
  ExpectRejected(Int4Checkpoint::kPackQuantized, w.shape, DType::kF16, payload,
                 "weight_g_idx[5] = 1, expected 0: groups are consecutive k unless the weight is "
                 "uploaded with act_order set");
  const Int4Weight per_row = RandomInt4Weight(16, 256, 0, DType::kF16, 3);
  payload = GptqPayload(per_row, DType::kF16, 7, true);
  payload[payload.size() - 4] = 2;
  ExpectRejected(Int4Checkpoint::kGptq, per_row.shape, DType::kF16, payload,
                 "g_idx[255] = 2, expected 0");
}

// In activation order the group index gives the order; it must be there and put 128
// features in each group.
TEST(Int4CheckpointErrors, ActOrderGroupIndex) {
  const Int4Weight w = WithActOrder(RandomInt4Weight(16, 384, 128, DType::kF16, 7), 8);
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, GptqPayload(w, DType::kF16, 7, false),
                 "act_order: the payload (3192 bytes) has no g_idx (1536 bytes more), which "
                 "gives the order");
  // g_idx[10] set to `group`, in a payload that is otherwise right.
  const auto with_group = [&](int32_t group) {
    std::vector<uint8_t> payload = GptqPayload(w, DType::kF16, 7, true);
    std::memcpy(payload.data() + payload.size() - 4 * 384 + 4 * 10, &group, 4);
    return payload;
  };
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, with_group(3),
                 "g_idx[10] = 3 is outside [0, 3)");
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, with_group(-1),
                 "g_idx[10] = -1 is outside [0, 3)");
  // Moved to another group: its own has 127 features, the other 129; the lower is named.
  const int32_t own = w.group_of[10];
  const int32_t other = (own + 1) % 3;
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, with_group(other),
                 own < other ? absl::StrCat("g_idx puts 127 columns in group ", own)
                             : absl::StrCat("g_idx puts 129 columns in group ", other));
  // Another name, the same rules; and AWQ, which has no group index.
  std::vector<uint8_t> payload = PackQuantizedPayload(w, DType::kF16, true);
  std::memset(payload.data() + payload.size() - 4 * 384, 0, 4 * 384);
  ExpectRejected(Int4Checkpoint::kPackQuantized, w.shape, DType::kF16, payload,
                 "weight_g_idx puts 384 columns in group 0, must put 128 in each");
  ExpectRejected(Int4Checkpoint::kAwq, w.shape, DType::kF16, std::vector<uint8_t>(4000),
                 "act_order: an AWQ checkpoint has no g_idx");
  // One group a row has no order to keep.
  EXPECT_FALSE(CheckInt4CheckpointShape(Int4Checkpoint::kGptq, {16, 256, 0, false, true}).ok());
}

TEST(Int4CheckpointErrors, ScalesThatFp16CannotHold) {
  const Int4Weight w = RandomInt4Weight(16, 128, 128, DType::kF32, 4);
  const struct {
    float value;
    const char* message;
  } cases[] = {
      {std::numeric_limits<float>::quiet_NaN(), "is not finite"},
      {std::numeric_limits<float>::infinity(), "is not finite"},
      {1e6f, "= 1e+06 overflows fp16"},
      {1e-9f, "underflows to zero in fp16"},
  };
  for (const auto& c : cases) {
    Int4Weight bad = w;
    bad.s[3] = c.value;  // row 3, the one group
    ExpectRejected(Int4Checkpoint::kPackQuantized, bad.shape, DType::kF32,
                   PackQuantizedPayload(bad, DType::kF32, false),
                   std::string("weight_scale[3][0]"));
    ExpectRejected(Int4Checkpoint::kGptqV2, bad.shape, DType::kF32,
                   GptqPayload(bad, DType::kF32, 8, false), std::string("scales[0][3]"));
    ExpectRejected(Int4Checkpoint::kGptqV2, bad.shape, DType::kF32,
                   GptqPayload(bad, DType::kF32, 8, false), c.message);
  }
  // Zero is a scale like any other (an all-zero group), and so is a subnormal fp16.
  Int4Weight edge = w;
  edge.s[0] = 0.0f;
  edge.s[1] = HalfToFloat(0x0001);
  absl::StatusOr<std::vector<uint8_t>> packed =
      Int4CheckpointToPacked(Int4Checkpoint::kPackQuantized, edge.shape, DType::kF32,
                             PackQuantizedPayload(edge, DType::kF32, false));
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectCanonical(*packed, edge);
}

TEST(Int4CheckpointErrors, Shapes) {
  // GPTQ packs qzeros' columns in eights; compressed-tensors has no such tensor.
  const Int4Weight w = RandomInt4Weight(12, 128, 128, DType::kF16, 6);
  ExpectRejected(Int4Checkpoint::kGptq, w.shape, DType::kF16, std::vector<uint8_t>(4000),
                 "n = 12 is not a multiple of 8");
  ExpectRejected(Int4Checkpoint::kAwq, w.shape, DType::kF16, std::vector<uint8_t>(4000),
                 "n = 12 is not a multiple of 8, which AWQ's qzeros need");
  WeightShape with_zero_points = w.shape;
  with_zero_points.zero_points = true;
  ExpectRejected(Int4Checkpoint::kPackQuantized, with_zero_points, DType::kF16,
                 std::vector<uint8_t>(4000),
                 "n = 12 is not a multiple of 8, which weight_zero_point needs");
  absl::StatusOr<std::vector<uint8_t>> packed =
      Int4CheckpointToPacked(Int4Checkpoint::kPackQuantized, w.shape, DType::kF16,
                             PackQuantizedPayload(w, DType::kF16, false));
  ASSERT_TRUE(packed.ok()) << packed.status();
  ExpectCanonical(*packed, w);
  // Not a W4A16 shape at all: K off the 128 alignment, or a group size W4A16 lacks.
  EXPECT_FALSE(CheckInt4CheckpointShape(Int4Checkpoint::kPackQuantized, {16, 200, 128}).ok());
  EXPECT_FALSE(CheckInt4CheckpointShape(Int4Checkpoint::kGptq, {16, 256, 64}).ok());
}

}  // namespace
}  // namespace qmm
