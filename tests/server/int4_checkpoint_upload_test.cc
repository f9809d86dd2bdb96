// Uploading W4A16 weights from GPTQ, AWQ and compressed-tensors checkpoints (proto
// SOURCE_ENCODING_GPTQ, _GPTQ_V2, _AWQ, _PACK_QUANTIZED) through the real RPC: the weight
// must compute exactly as the same int4 values, scales and zero points uploaded in the
// canonical form.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/format.h"
#include "tests/int4_checkpoint_data.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::CanonicalInt4;
using testing::ExpectMatchesReference;
using testing::FromBytes;
using testing::GptqTensors;
using testing::Int4Weight;
using testing::MakeHeader;
using testing::MakeMatMulRequest;
using testing::PackQuantizedTensors;
using testing::RandomFloats;
using testing::RandomInt4Weight;

std::string AsString(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

class Int4CheckpointUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartTestServer(ServerOptions{});
    ASSERT_NE(server_.stub, nullptr);
  }

  grpc::Status Upload(const std::string& name, const Int4Weight& w, v1::SourceEncoding encoding,
                      v1::DType scale_dtype, const std::string& payload) {
    v1::WeightHeader header = MakeHeader(name, v1::SCHEME_W4A16, w.shape.n, w.shape.k,
                                         w.shape.group_size, encoding, scale_dtype, payload);
    header.set_zero_points(w.shape.zero_points);
    header.set_act_order(w.shape.act_order);
    return testing::Upload(*server_.stub, header, payload);
  }

  // Multiplies random activations with `name` and checks them against the canonical form
  // of `w`.
  void ExpectWeightComputes(const std::string& name, const Int4Weight& w) {
    const int64_t m = 3;
    const std::vector<float> x = RandomFloats(m * w.shape.k, 99);
    v1::MatMulResponse response;
    grpc::ClientContext context;
    const grpc::Status status = server_.stub->MatMul(
        &context, MakeMatMulRequest(name, DType::kF32, m, w.shape.k, x, v1::DTYPE_FP32), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const std::vector<uint8_t> canonical = CanonicalInt4(w);
    const PackedWeight view = *ViewPacked(Scheme::kW4A16, w.shape, canonical);
    ExpectMatchesReference(view, x, m, FromBytes(DType::kF32, response.output().data()),
                           DType::kF32);
  }

  void ExpectAbsent(const std::string& name) {
    grpc::ClientContext context;
    v1::GetWeightRequest get;
    get.set_name(name);
    v1::WeightInfo info;
    EXPECT_EQ(server_.stub->GetWeight(&context, get, &info).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  testing::TestServer server_;
};

TEST_F(Int4CheckpointUploadTest, GptqWithAndWithoutTheGroupIndex) {
  const Int4Weight w = RandomInt4Weight(40, 384, 128, DType::kF16, 1);
  ASSERT_TRUE(Upload("gptq", w, v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_UNSPECIFIED,
                     AsString(GptqTensors(w, DType::kF16, 7).Payload(true)))
                  .ok());
  ExpectWeightComputes("gptq", w);

  const Int4Weight v2 = RandomInt4Weight(24, 256, 0, DType::kF32, 2);
  const grpc::Status status = Upload("gptq-v2", v2, v1::SOURCE_ENCODING_GPTQ_V2, v1::DTYPE_FP32,
                                     AsString(GptqTensors(v2, DType::kF32, 8).Payload(false)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("gptq-v2", v2);
}

TEST_F(Int4CheckpointUploadTest, PackQuantizedWithBf16Scales) {
  for (int32_t group_size : {128, 0}) {
    const Int4Weight w = RandomInt4Weight(36, 256, group_size, DType::kBF16, 3);
    const std::string name = "ct-" + std::to_string(group_size);
    const grpc::Status status =
        Upload(name, w, v1::SOURCE_ENCODING_PACK_QUANTIZED, v1::DTYPE_BF16,
               AsString(PackQuantizedTensors(w, DType::kBF16).Payload(group_size == 128)));
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectWeightComputes(name, w);
  }
}

// AWQ, and GPTQ quantized with sym=False, upload with header.zero_points: the weight says
// so and counts them in its packed size.
TEST_F(Int4CheckpointUploadTest, AwqAndAsymmetricGptqWithZeroPoints) {
  const Int4Weight awq =
      testing::WithZeroPoints(RandomInt4Weight(40, 384, 128, DType::kF16, 5), -8, 7, 6);
  grpc::Status status = Upload("awq", awq, v1::SOURCE_ENCODING_AWQ, v1::DTYPE_UNSPECIFIED,
                               AsString(testing::AwqTensors(awq, DType::kF16).Payload(false)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("awq", awq);
  grpc::ClientContext context;
  v1::GetWeightRequest get;
  get.set_name("awq");
  v1::WeightInfo info;
  ASSERT_TRUE(server_.stub->GetWeight(&context, get, &info).ok());
  EXPECT_TRUE(info.zero_points());
  EXPECT_EQ(info.packed_bytes(), 40 * 384 / 2 + 40 * 3 * 2 + 40 * 3);

  // Zero points of 16 (a stored 15), which only the "gptq" format's minus one reaches.
  const Int4Weight gptq =
      testing::WithZeroPoints(RandomInt4Weight(24, 256, 0, DType::kBF16, 7), -7, 8, 8);
  status = Upload("gptq-asym", gptq, v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_BF16,
                  AsString(GptqTensors(gptq, DType::kBF16, 7).Payload(true)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("gptq-asym", gptq);

  // compressed-tensors' asymmetric schemes (W4A16_ASYM) carry weight_zero_point.
  const Int4Weight pq =
      testing::WithZeroPoints(RandomInt4Weight(16, 256, 128, DType::kBF16, 9), -8, 7, 10);
  status = Upload("pq-asym", pq, v1::SOURCE_ENCODING_PACK_QUANTIZED, v1::DTYPE_BF16,
                  AsString(PackQuantizedTensors(pq, DType::kBF16).Payload(true)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("pq-asym", pq);
  // The same payload without header.zero_points has a tensor too many.
  Int4Weight symmetric = pq;
  symmetric.shape.zero_points = false;
  status = Upload("pq-sym", symmetric, v1::SOURCE_ENCODING_PACK_QUANTIZED, v1::DTYPE_BF16,
                  AsString(PackQuantizedTensors(pq, DType::kBF16).Payload(true)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("header.total_bytes = 3152 but a "
                                        "SOURCE_ENCODING_PACK_QUANTIZED payload"),
            std::string::npos)
      << status.error_message();
  ExpectAbsent("pq-sym");
}

// Checkpoints quantized with activation order (GPTQ's desc_act, compressed-tensors'
// actorder "group") upload with header.act_order and compute on the input features their
// group index names; without it their scattered groups are refused and leave nothing.
TEST_F(Int4CheckpointUploadTest, ActOrderCheckpoints) {
  const Int4Weight gptq = testing::WithActOrder(
      testing::WithZeroPoints(RandomInt4Weight(40, 384, 128, DType::kF16, 10), -7, 8, 11), 12);
  grpc::Status status = Upload("gptq-act", gptq, v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_UNSPECIFIED,
                               AsString(GptqTensors(gptq, DType::kF16, 7).Payload(true)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("gptq-act", gptq);
  grpc::ClientContext context;
  v1::GetWeightRequest get;
  get.set_name("gptq-act");
  v1::WeightInfo info;
  ASSERT_TRUE(server_.stub->GetWeight(&context, get, &info).ok());
  EXPECT_TRUE(info.act_order());
  EXPECT_TRUE(info.zero_points());
  EXPECT_EQ(info.packed_bytes(), 40 * 384 / 2 + 40 * 3 * 3 + 4 * 384);

  const Int4Weight pq = testing::WithActOrder(RandomInt4Weight(24, 256, 128, DType::kBF16, 13), 14);
  status = Upload("pq-act", pq, v1::SOURCE_ENCODING_PACK_QUANTIZED, v1::DTYPE_BF16,
                  AsString(PackQuantizedTensors(pq, DType::kBF16).Payload(true)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("pq-act", pq);

  // The canonical form with its order, as a client that converted it would send it.
  const std::vector<uint8_t> canonical = CanonicalInt4(gptq);
  status = Upload("packed-act", gptq, v1::SOURCE_ENCODING_PACKED, v1::DTYPE_UNSPECIFIED,
                  AsString(canonical));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectWeightComputes("packed-act", gptq);

  // The same GPTQ payload without header.act_order: its g_idx is not k / 128.
  Int4Weight unordered = gptq;
  unordered.shape.act_order = false;
  status = Upload("gptq-unordered", unordered, v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_UNSPECIFIED,
                  AsString(GptqTensors(gptq, DType::kF16, 7).Payload(true)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("groups are consecutive k unless the weight is uploaded "
                                        "with act_order set"),
            std::string::npos)
      << status.error_message();
  ExpectAbsent("gptq-unordered");
}

TEST_F(Int4CheckpointUploadTest, AsymmetricCheckpointIsRejectedAndLeavesNothing) {
  const Int4Weight w = RandomInt4Weight(16, 256, 128, DType::kF16, 4);
  testing::Int4CheckpointTensors t = GptqTensors(w, DType::kF16, 7);
  t.zeros[13] = 0x75;  // qzeros word [1][1], value 2: group 1, column 10; stored 5 (6)
  const grpc::Status status =
      Upload("asym", w, v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_FP16, AsString(t.Payload(false)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("qzeros: group 1, column 10 has zero point 6"),
            std::string::npos)
      << status.error_message();
  ExpectAbsent("asym");
}

}  // namespace
}  // namespace qmm
