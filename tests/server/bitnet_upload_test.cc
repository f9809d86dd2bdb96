// Uploading W2A8 weights in the BitNet planar packings (Hugging Face and Liger-Kernel
// layouts, proto SOURCE_ENCODING_BITNET_*) through the real RPC: the weight must behave
// exactly like the same ternary values uploaded in the canonical packed form.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::ExpectMatchesReference;
using testing::FromBytes;
using testing::MakeHeader;
using testing::MakeMatMulRequest;
using testing::RandomFloats;

constexpr int64_t kN = 37;  // not a multiple of 4: the Hugging Face layout pads rows
constexpr int64_t kK = 256;

struct Ternary {
  std::vector<int> t;         // [kN, kK] in {-1, 0, 1}
  std::vector<float> scales;  // per row, as BitLinear.weight_scale (w = t / scale)
};

Ternary RandomTernary(uint32_t seed) {
  std::mt19937 rng(seed);
  Ternary w;
  w.t.resize(kN * kK);
  for (int& v : w.t) v = static_cast<int>(rng() % 3) - 1;
  std::uniform_real_distribution<float> scale(0.5f, 4.0f);
  for (int64_t n = 0; n < kN; ++n) w.scales.push_back(scale(rng));
  return w;
}

// The planar packing, written here from the proto text: plane i of packed row r holds
// unpacked row r + i * R of a [rows, cols] tensor of codes t + 1.
std::string Planar(const Ternary& w, bool along_n) {
  const int64_t rows = along_n ? kN : kK;
  const int64_t cols = along_n ? kK : kN;
  const int64_t r_count = (rows + 3) / 4;
  std::string out(r_count * cols, '\0');
  for (int64_t d = 0; d < rows; ++d) {
    for (int64_t e = 0; e < cols; ++e) {
      const int t = along_n ? w.t[d * kK + e] : w.t[e * kK + d];
      out[(d % r_count) * cols + e] |= static_cast<char>((t + 1) << (2 * (d / r_count)));
    }
  }
  return out;
}

std::string Fp32Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The canonical packed form of the same weight: codes row-major, then s = 1 / scale, or
// s = scale where the scales multiply.
std::vector<uint8_t> Canonical(const Ternary& w, const std::vector<float>& row_scales,
                               bool multiplies = false) {
  std::vector<uint8_t> packed(kN * kK / 4 + 4 * kN, 0);
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t k = 0; k < kK; ++k) {
      packed[n * kK / 4 + k / 4] |= static_cast<uint8_t>((w.t[n * kK + k] + 1) << (2 * (k % 4)));
    }
    const float s = multiplies ? row_scales[n] : 1.0f / row_scales[n];
    std::memcpy(packed.data() + kN * kK / 4 + 4 * n, &s, 4);
  }
  return packed;
}

class BitnetUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartTestServer(ServerOptions{});
    ASSERT_NE(server_.stub, nullptr);
  }

  // Multiplies random activations with `name` and checks against `packed`.
  void ExpectWeightComputes(const std::string& name, const std::vector<uint8_t>& packed) {
    const int64_t m = 3;
    const std::vector<float> x = RandomFloats(m * kK, 99);
    v1::MatMulResponse response;
    grpc::ClientContext context;
    const grpc::Status status = server_.stub->MatMul(
        &context, MakeMatMulRequest(name, DType::kF32, m, kK, x, v1::DTYPE_FP32), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const PackedWeight view = *ViewPacked(Scheme::kW2A8, {kN, kK, 0}, packed);
    ExpectMatchesReference(view, x, m, FromBytes(DType::kF32, response.output().data()),
                           DType::kF32);
  }

  testing::TestServer server_;
};

TEST_F(BitnetUploadTest, HuggingFaceLayoutWithPerRowScales) {
  const Ternary w = RandomTernary(1);
  const std::string payload = Planar(w, /*along_n=*/true) + Fp32Bytes(w.scales);
  const grpc::Status status =
      testing::Upload(*server_.stub,
                      MakeHeader("hf", v1::SCHEME_W2A8, kN, kK, 0, v1::SOURCE_ENCODING_BITNET_HF,
                                 v1::DTYPE_FP32, payload),
                      payload);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("hf", Canonical(w, w.scales));
}

// transformers' AutoBitLinear (microsoft/bitnet-b1.58-2B-4T): the same codes, one bf16
// scale that multiplies.
TEST_F(BitnetUploadTest, AutoBitLinearScaleMultiplies) {
  const Ternary w = RandomTernary(4);
  const uint16_t bf16_scale = FloatToBf16(0.0390625f);
  const std::string payload =
      Planar(w, /*along_n=*/true) + std::string(reinterpret_cast<const char*>(&bf16_scale), 2);
  v1::WeightHeader header = MakeHeader("auto", v1::SCHEME_W2A8, kN, kK, 0,
                                       v1::SOURCE_ENCODING_BITNET_HF, v1::DTYPE_BF16, payload);
  header.set_scale_multiplies(true);
  const grpc::Status status = testing::Upload(*server_.stub, header, payload);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("auto", Canonical(w, std::vector<float>(kN, 0.0390625f), true));
}

TEST_F(BitnetUploadTest, LigerLayoutWithOneScaleOrNone) {
  const Ternary w = RandomTernary(2);
  const std::string codes = Planar(w, /*along_n=*/false);
  const float tensor_scale = 2.5f;
  const std::string with_scale = codes + Fp32Bytes({tensor_scale});
  grpc::Status status = testing::Upload(
      *server_.stub,
      MakeHeader("liger", v1::SCHEME_W2A8, kN, kK, 0, v1::SOURCE_ENCODING_BITNET_LIGER,
                 v1::DTYPE_UNSPECIFIED, with_scale),
      with_scale);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("liger", Canonical(w, std::vector<float>(kN, tensor_scale)));

  status =
      testing::Upload(*server_.stub,
                      MakeHeader("liger-unscaled", v1::SCHEME_W2A8, kN, kK, 0,
                                 v1::SOURCE_ENCODING_BITNET_LIGER, v1::DTYPE_UNSPECIFIED, codes),
                      codes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("liger-unscaled", Canonical(w, std::vector<float>(kN, 1.0f)));
}

TEST_F(BitnetUploadTest, InvalidCodeIsRejectedAndLeavesNothing) {
  const Ternary w = RandomTernary(3);
  std::string payload = Planar(w, /*along_n=*/true);
  payload[5] = static_cast<char>(0xFF);  // code 3 in every plane
  const grpc::Status status =
      testing::Upload(*server_.stub,
                      MakeHeader("bad", v1::SCHEME_W2A8, kN, kK, 0, v1::SOURCE_ENCODING_BITNET_HF,
                                 v1::DTYPE_UNSPECIFIED, payload),
                      payload);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("code 3"), std::string::npos) << status.error_message();
  grpc::ClientContext context;
  v1::GetWeightRequest get;
  get.set_name("bad");
  v1::WeightInfo info;
  EXPECT_EQ(server_.stub->GetWeight(&context, get, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace qmm
