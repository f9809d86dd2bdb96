#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/quantize.h"

namespace qmm {
namespace {

void PutF32(std::vector<uint8_t>& b, size_t offset, float f) { std::memcpy(&b[offset], &f, 4); }
void PutU16(std::vector<uint8_t>& b, size_t offset, uint16_t v) {
  b[offset] = static_cast<uint8_t>(v & 0xff);
  b[offset + 1] = static_cast<uint8_t>(v >> 8);
}

// Hand-packed weights with products worked out on paper.
TEST(ReferenceTest, DenseHandExample) {
  // W = [[1, 2, ..., 8], [-0.5, 0, ..., 0]] in fp16; x = [1, 1, ..., 1], [0.25, 0, ..., 0].
  std::vector<uint8_t> b(2 * 2 * 8, 0);
  for (int c = 0; c < 8; ++c) PutU16(b, 2 * c, FloatToHalf(static_cast<float>(c + 1)));
  PutU16(b, 16, FloatToHalf(-0.5f));
  std::vector<float> x(16, 0.0f);
  for (int c = 0; c < 8; ++c) x[c] = 1.0f;
  x[8] = 0.25f;
  const std::vector<double> y = ReferenceMatMul({Scheme::kFp16, {2, 8, 0}, b}, x.data(), 2);
  EXPECT_EQ(y, (std::vector<double>{36.0, -0.5, 0.25, -0.125}));

  for (int c = 0; c < 8; ++c) PutU16(b, 2 * c, FloatToBf16(static_cast<float>(c + 1)));
  PutU16(b, 16, FloatToBf16(-0.5f));
  EXPECT_EQ(ReferenceMatMul({Scheme::kBf16, {2, 8, 0}, b}, x.data(), 2), y);
}

TEST(ReferenceTest, W8A16HandExample) {
  // One row: q = [3, -2, 0, ..., 0, -127], s = 0.5; x = [1, 2, 3, ..., 64].
  std::vector<uint8_t> b(64 + 4, 0);
  b[0] = 3;
  b[1] = 0xfe;   // -2
  b[63] = 0x81;  // -127
  PutF32(b, 64, 0.5f);
  std::vector<float> x(64);
  for (int c = 0; c < 64; ++c) x[c] = static_cast<float>(c + 1);
  const std::vector<double> y = ReferenceMatMul({Scheme::kW8A16, {1, 64, 0}, b}, x.data(), 1);
  EXPECT_EQ(y, (std::vector<double>{0.5 * (3 * 1 - 2 * 2 - 127 * 64)}));
}

TEST(ReferenceTest, W4A16HandExample) {
  // K = 256 in two groups with scales 1 and 0.25; the per-row layout reads one scale.
  std::vector<uint8_t> b(128 + 4, 0);
  b[0] = 0x8f;    // k = 0: -1, k = 1: -8
  b[64] = 0x07;   // k = 128: 7
  b[127] = 0x20;  // k = 255: 2
  PutU16(b, 128, FloatToHalf(1.0f));
  PutU16(b, 130, FloatToHalf(0.25f));
  std::vector<float> x(256, 1.0f);
  x[1] = 2.0f;
  const double grouped = ReferenceMatMul({Scheme::kW4A16, {1, 256, 128}, b}, x.data(), 1)[0];
  EXPECT_EQ(grouped, -1.0 - 16.0 + 0.25 * (7 + 2));
  std::vector<uint8_t> per_row(b.begin(), b.begin() + 130);
  const double single = ReferenceMatMul({Scheme::kW4A16, {1, 256, 0}, per_row}, x.data(), 1)[0];
  EXPECT_EQ(single, -1.0 - 16.0 + 7 + 2);
}

TEST(ReferenceTest, W4A16ZeroPointsHandExample) {
  // As above with zero points -8 and 8 after the scales: w = (q - z) * s.
  std::vector<uint8_t> b(128 + 4 + 2, 0);
  b[0] = 0x8f;    // k = 0: -1, k = 1: -8
  b[64] = 0x07;   // k = 128: 7
  b[127] = 0x20;  // k = 255: 2
  PutU16(b, 128, FloatToHalf(1.0f));
  PutU16(b, 130, FloatToHalf(0.25f));
  b[132] = static_cast<uint8_t>(-8);
  b[133] = 8;
  std::vector<float> x(256, 1.0f);
  x[1] = 2.0f;
  const double grouped = ReferenceMatMul({Scheme::kW4A16, {1, 256, 128, true}, b}, x.data(), 1)[0];
  // Group 0: every k adds 8 (x sums to 129 there), group 1 takes 8 off each of its 128 k.
  EXPECT_EQ(grouped, -1.0 - 16.0 + 8.0 * 129 + 0.25 * (7 + 2 - 8.0 * 128));
}

TEST(ReferenceTest, W4A16ActOrderHandExample) {
  // The grouped weight above with its stored columns 0 and 5, and 1 and 200, swapped by
  // the permutation: stored column j multiplies x[perm[j]].
  std::vector<uint8_t> b(128 + 4 + 4 * 256, 0);
  b[0] = 0x8f;    // stored 0: -1, stored 1: -8
  b[64] = 0x07;   // stored 128: 7
  b[127] = 0x20;  // stored 255: 2
  PutU16(b, 128, FloatToHalf(1.0f));
  PutU16(b, 130, FloatToHalf(0.25f));
  std::vector<uint32_t> perm(256);
  for (uint32_t j = 0; j < 256; ++j) perm[j] = j;
  std::swap(perm[0], perm[5]);
  std::swap(perm[1], perm[200]);
  std::memcpy(b.data() + 132, perm.data(), 4 * 256);
  std::vector<float> x(256);
  for (int c = 0; c < 256; ++c) x[c] = static_cast<float>(c + 1);
  const PackedWeight w{Scheme::kW4A16, {1, 256, 128, false, true}, b};
  EXPECT_EQ(ReferenceMatMul(w, x.data(), 1)[0], -1.0 * 6 - 8.0 * 201 + 1.75 * 129 + 0.5 * 256);
  // Dequantized, each value sits at its input feature.
  const std::vector<float> deq = DequantizeWeight(w);
  EXPECT_EQ(deq[5], -1.0f);
  EXPECT_EQ(deq[200], -8.0f);
  EXPECT_EQ(deq[0], 0.0f);
  EXPECT_EQ(deq[1], 0.0f);
  EXPECT_EQ(deq[128], 1.75f);
  EXPECT_EQ(deq[255], 0.5f);
}

TEST(ReferenceTest, W2A8HandExample) {
  // t = [1, -1, 0, 1, 0, ...], s = 2; x = [127, 63.5, -1, 0.4, ...] has max 127, so a = 1
  // and xq = [127, 64, -1, 0, ...]: y = 1 * 2 * (127 - 64 + 0 + 0).
  std::vector<uint8_t> b(32 + 4, 0x55);
  b[0] = 0x92;
  PutF32(b, 32, 2.0f);
  std::vector<float> x(128, 0.0f);
  x[0] = 127.0f;
  x[1] = 63.5f;
  x[2] = -1.0f;
  x[3] = 0.4f;
  const std::vector<double> y = ReferenceMatMul({Scheme::kW2A8, {1, 128, 0}, b}, x.data(), 1);
  EXPECT_EQ(y[0], 2.0 * (127 - 64));
}

// On random data the reference equals the double product of the dequantized weight.
TEST(ReferenceTest, MatchesDequantizedProduct) {
  const int64_t m = 3;
  const int64_t n_rows = 5;
  const int64_t k = 256;
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(n_rows * k);
  std::vector<float> x(m * k);
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  for (Scheme s : {Scheme::kFp16, Scheme::kBf16, Scheme::kW8A16, Scheme::kW4A16}) {
    const WeightShape shape{n_rows, k, s == Scheme::kW4A16 ? 128 : 0};
    absl::StatusOr<std::vector<uint8_t>> p = QuantizeWeight(
        s, shape, DType::kF32, {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4});
    ASSERT_TRUE(p.ok()) << p.status();
    const PackedWeight packed{s, shape, *p};
    const std::vector<float> deq = DequantizeWeight(packed);
    const std::vector<double> y = ReferenceMatMul(packed, x.data(), m);
    ASSERT_EQ(y.size(), static_cast<size_t>(m * n_rows));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < n_rows; ++n) {
        double expected = 0.0;
        double magnitude = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          expected += static_cast<double>(x[i * k + c]) * deq[n * k + c];
          magnitude += std::fabs(static_cast<double>(x[i * k + c]) * deq[n * k + c]);
        }
        // deq is q * s rounded to fp32 (exact but for W8A16).
        EXPECT_NEAR(y[i * n_rows + n], expected, magnitude * 1e-7) << SchemeName(s);
      }
    }
  }
}

}  // namespace
}  // namespace qmm
