// The qmm.v1.Qmm service in process, over loopback with a raw generated stub: every RPC,
// and every bad input the API promises a precise status for. After each error the test
// checks that nothing changed and that the server still serves.
#include "server/service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/format.h"
#include "server/proto_convert.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::MakeHeader;
using testing::MakeMatMulRequest;
using testing::RandomFloats;
using testing::ToBytes;

constexpr int64_t kMemoryLimit = int64_t{64} << 20;
constexpr int64_t kMaxMessage = int64_t{4} << 20;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = kMemoryLimit;
    options.max_message_bytes = kMaxMessage;
    server_ = testing::StartTestServer(options);
    ASSERT_NE(server_.stub, nullptr);
  }

  v1::Qmm::Stub& stub() { return *server_.stub; }

  // Uploads N x K random fp32 values as `scheme`; fails the test on error.
  void UploadFloat(const std::string& name, v1::Scheme scheme, int64_t n, int64_t k,
                   int32_t group = 0) {
    const std::string payload = ToBytes(DType::kF32, RandomFloats(n * k, 7));
    const grpc::Status status = testing::Upload(
        stub(),
        MakeHeader(name, scheme, n, k, group, v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
        payload);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  v1::ServerInfoResponse Info() {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    EXPECT_TRUE(stub().ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
    return info;
  }

  grpc::Status Get(const std::string& name, v1::WeightInfo* info = nullptr) {
    grpc::ClientContext context;
    v1::GetWeightRequest request;
    request.set_name(name);
    v1::WeightInfo ignored;
    return stub().GetWeight(&context, request, info != nullptr ? info : &ignored);
  }

  grpc::Status Delete(const std::string& name) {
    grpc::ClientContext context;
    v1::DeleteWeightRequest request;
    request.set_name(name);
    v1::DeleteWeightResponse response;
    return stub().DeleteWeight(&context, request, &response);
  }

  grpc::Status MatMul(const v1::MatMulRequest& request, v1::MatMulResponse* response = nullptr) {
    grpc::ClientContext context;
    v1::MatMulResponse ignored;
    return stub().MatMul(&context, request, response != nullptr ? response : &ignored);
  }

  std::vector<std::string> Names() {
    grpc::ClientContext context;
    v1::ListWeightsResponse list;
    EXPECT_TRUE(stub().ListWeights(&context, v1::ListWeightsRequest(), &list).ok());
    std::vector<std::string> names;
    for (const v1::WeightInfo& w : list.weights()) names.push_back(w.name());
    return names;
  }

  // A failed upload must leave nothing: no weight, no memory held, the name still free.
  void ExpectNothingLeft(const std::string& name) {
    EXPECT_EQ(Get(name).error_code(), grpc::StatusCode::NOT_FOUND) << name;
    const v1::ServerInfoResponse info = Info();
    EXPECT_EQ(info.memory_used_bytes(), used_before_) << name;
    EXPECT_EQ(info.weights(), weights_before_) << name;
  }

  void Snapshot() {
    const v1::ServerInfoResponse info = Info();
    used_before_ = info.memory_used_bytes();
    weights_before_ = info.weights();
  }

  testing::TestServer server_;
  int64_t used_before_ = 0;
  int64_t weights_before_ = 0;
};

void ExpectStatus(const grpc::Status& status, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(status.error_code(), code) << status.error_message();
  EXPECT_NE(status.error_message().find(needle), std::string::npos)
      << "message: " << status.error_message() << "\nwanted: " << needle;
}

TEST_F(ServiceTest, ServerInfoDescribesTheServer) {
  const v1::ServerInfoResponse info = Info();
  EXPECT_EQ(info.version(), QMM_VERSION);
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_FALSE(info.device_name().empty());
  EXPECT_EQ(info.memory_used_bytes(), 0);
  EXPECT_EQ(info.memory_limit_bytes(), kMemoryLimit);
  ASSERT_EQ(info.schemes_size(), 5);
  EXPECT_EQ(info.schemes(0), v1::SCHEME_FP16);
  EXPECT_EQ(info.schemes(4), v1::SCHEME_W2A8);
  EXPECT_EQ(info.limits().max_message_bytes(), kMaxMessage);
  EXPECT_EQ(info.limits().max_chunk_bytes(), 1 << 20);
  EXPECT_EQ(info.limits().max_dim(), kMaxDim);
  EXPECT_EQ(info.limits().max_rows(), 65536);
  EXPECT_EQ(info.limits().max_name_length(), 128);
  EXPECT_EQ(info.weights(), 0);
}

TEST_F(ServiceTest, UploadGetListDeleteLifecycle) {
  const std::string payload = ToBytes(DType::kF16, RandomFloats(24 * 256, 1));
  v1::UploadWeightResponse response;
  ASSERT_TRUE(testing::Upload(stub(),
                              MakeHeader("b/up", v1::SCHEME_W4A16, 24, 256, 128,
                                         v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP16, payload),
                              payload, &response, 1000)
                  .ok());
  const int64_t packed = 24 * 128 + 2 * 24 * 2;
  EXPECT_EQ(response.weight().name(), "b/up");
  EXPECT_EQ(response.weight().n(), 24);
  EXPECT_EQ(response.weight().k(), 256);
  EXPECT_EQ(response.weight().scheme(), v1::SCHEME_W4A16);
  EXPECT_EQ(response.weight().group_size(), 128);
  EXPECT_EQ(response.weight().packed_bytes(), packed);
  EXPECT_EQ(response.weight().device_bytes(), packed);

  UploadFloat("a", v1::SCHEME_W8A16, 8, 64);
  UploadFloat("c", v1::SCHEME_FP16, 8, 64);
  EXPECT_EQ(Names(), (std::vector<std::string>{"a", "b/up", "c"}));

  v1::WeightInfo info;
  ASSERT_TRUE(Get("b/up", &info).ok());
  EXPECT_EQ(info.SerializeAsString(), response.weight().SerializeAsString());
  EXPECT_EQ(Info().weights(), 3);
  EXPECT_EQ(Info().memory_used_bytes(), packed + (8 * 64 + 4 * 8) + 2 * 8 * 64);

  ASSERT_TRUE(Delete("b/up").ok());
  ExpectStatus(Get("b/up"), grpc::StatusCode::NOT_FOUND, "weight \"b/up\" not found");
  ExpectStatus(Delete("b/up"), grpc::StatusCode::NOT_FOUND, "\"b/up\"");
  EXPECT_EQ(Names(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Info().memory_used_bytes(), (8 * 64 + 4 * 8) + 2 * 8 * 64);
  // The name can be used again.
  UploadFloat("b/up", v1::SCHEME_W2A8, 4, 128);
}

TEST_F(ServiceTest, PackedUploadOfEveryScheme) {
  uint32_t seed = 1;
  for (Scheme scheme : kAllSchemes) {
    const WeightShape shape{12, 256, scheme == Scheme::kW4A16 ? 128 : 0};
    const std::vector<uint8_t> packed =
        testing::PackLocally(scheme, shape, DType::kF32, RandomFloats(12 * 256, seed++));
    const std::string payload(packed.begin(), packed.end());
    const std::string name = absl::StrCat("packed/", std::string(SchemeName(scheme)));
    v1::UploadWeightResponse response;
    const grpc::Status status =
        testing::Upload(stub(),
                        MakeHeader(name, SchemeToProto(scheme), shape.n, shape.k, shape.group_size,
                                   v1::SOURCE_ENCODING_PACKED, v1::DTYPE_UNSPECIFIED, payload),
                        payload, &response);
    ASSERT_TRUE(status.ok()) << name << ": " << status.error_message();
    EXPECT_EQ(response.weight().packed_bytes(), PackedBytes(scheme, shape));
    EXPECT_EQ(response.weight().scheme(), SchemeToProto(scheme));
  }
  EXPECT_EQ(Info().weights(), 5);
}

TEST_F(ServiceTest, BadHeadersAreRejectedBeforeAnyData) {
  Snapshot();
  const std::string payload = ToBytes(DType::kF32, RandomFloats(16 * 128, 2));
  auto header = [&] {
    return MakeHeader("w", v1::SCHEME_W8A16, 16, 128, 0, v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32,
                      payload);
  };
  struct Case {
    std::string what;
    std::function<void(v1::WeightHeader&)> mutate;
    std::string needle;
  };
  const Case cases[] = {
      {"unknown scheme", [](auto& h) { h.set_scheme(static_cast<v1::Scheme>(17)); },
       "header.scheme = 17"},
      {"unspecified scheme", [](auto& h) { h.set_scheme(v1::SCHEME_UNSPECIFIED); },
       "header.scheme = SCHEME_UNSPECIFIED"},
      {"unknown dtype", [](auto& h) { h.set_source_dtype(static_cast<v1::DType>(8)); },
       "header.source_dtype = 8"},
      {"unknown encoding", [](auto& h) { h.set_encoding(static_cast<v1::SourceEncoding>(99)); },
       "header.encoding = 99"},
      {"negative n", [](auto& h) { h.set_n(-16); }, "n = -16 must be at least 1"},
      {"zero k", [](auto& h) { h.set_k(0); }, "k = 0 must be at least 1"},
      {"huge k", [](auto& h) { h.set_k(int64_t{1} << 62); }, "exceeds the limit"},
      {"k not aligned", [](auto& h) { h.set_k(100); }, "multiple of 64"},
      {"group size", [](auto& h) { h.set_group_size(128); }, "group_size = 128 must be 0"},
      {"total too big", [](auto& h) { h.set_total_bytes(h.total_bytes() + 4); },
       "header.total_bytes = 8196 but the payload"},
      {"total for another dtype", [](auto& h) { h.set_source_dtype(v1::DTYPE_FP16); },
       "header.total_bytes = 8192 but the payload"},
      {"short digest", [](auto& h) { h.set_sha256("abc"); }, "header.sha256 is 3 bytes"},
      {"bad name", [](auto& h) { h.set_name("a b"); }, "header.name has a character outside"},
      {"long name", [](auto& h) { h.set_name(std::string(129, 'x')); }, "129 characters"},
  };
  for (const Case& c : cases) {
    v1::WeightHeader h = header();
    c.mutate(h);
    ExpectStatus(testing::Upload(stub(), h, payload), grpc::StatusCode::INVALID_ARGUMENT, c.needle);
    ExpectNothingLeft("w");
  }
  // The same upload, untouched, still works.
  EXPECT_TRUE(testing::Upload(stub(), header(), payload).ok());
}

TEST_F(ServiceTest, StreamProtocolErrors) {
  Snapshot();
  const std::string payload = ToBytes(DType::kBF16, RandomFloats(8 * 128, 3));
  const v1::WeightHeader header = MakeHeader("w", v1::SCHEME_W2A8, 8, 128, 0,
                                             v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_BF16, payload);
  auto header_msg = [&] {
    v1::UploadWeightRequest r;
    *r.mutable_header() = header;
    return r;
  };
  auto chunk = [](absl::string_view bytes) {
    v1::UploadWeightRequest r;
    r.set_chunk(std::string(bytes));
    return r;
  };

  ExpectStatus(testing::UploadMessages(stub(), {}), grpc::StatusCode::INVALID_ARGUMENT,
               "ended before the header");
  ExpectStatus(testing::UploadMessages(stub(), {chunk(payload)}),
               grpc::StatusCode::INVALID_ARGUMENT,
               "first UploadWeightRequest must carry the header");
  ExpectStatus(testing::UploadMessages(stub(), {v1::UploadWeightRequest()}),
               grpc::StatusCode::INVALID_ARGUMENT, "neither header nor chunk");
  ExpectStatus(testing::UploadMessages(stub(), {header_msg(), header_msg()}),
               grpc::StatusCode::INVALID_ARGUMENT, "second header");
  ExpectNothingLeft("w");

  // Early end: half the payload, then half-close.
  ExpectStatus(testing::UploadMessages(stub(), {header_msg(), chunk(payload.substr(0, 1000))}),
               grpc::StatusCode::INVALID_ARGUMENT, "ended after 1000 of 2048 declared bytes");
  ExpectStatus(testing::UploadMessages(stub(), {header_msg()}), grpc::StatusCode::INVALID_ARGUMENT,
               "ended after 0 of 2048");
  ExpectNothingLeft("w");

  // A chunk beyond the declared total, at once or after the whole payload.
  ExpectStatus(testing::UploadMessages(stub(), {header_msg(), chunk(payload + "x")}),
               grpc::StatusCode::INVALID_ARGUMENT, "goes past header.total_bytes = 2048");
  ExpectStatus(testing::UploadMessages(stub(), {header_msg(), chunk(payload), chunk("x")}),
               grpc::StatusCode::INVALID_ARGUMENT, "1 bytes after 2048 received");
  ExpectNothingLeft("w");

  // A chunk over 1 MiB (within the message limit).
  const std::string big(kMaxChunkBytes + 1, 'x');
  v1::WeightHeader big_header =
      MakeHeader("w", v1::SCHEME_FP16, 1024, 1024, 0, v1::SOURCE_ENCODING_PACKED,
                 v1::DTYPE_UNSPECIFIED, std::string(2 << 20, 'x'));
  v1::UploadWeightRequest big_header_msg;
  *big_header_msg.mutable_header() = big_header;
  ExpectStatus(testing::UploadMessages(stub(), {big_header_msg, chunk(big)}),
               grpc::StatusCode::INVALID_ARGUMENT, "exceeds the chunk limit of 1048576");
  ExpectNothingLeft("w");

  // The same payload, sent properly, then works.
  EXPECT_TRUE(testing::Upload(stub(), header, payload, nullptr, 500).ok());
}

TEST_F(ServiceTest, DigestMismatchIsDataLossAndLeavesNothing) {
  Snapshot();
  std::string payload = ToBytes(DType::kF32, RandomFloats(8 * 64, 4));
  const v1::WeightHeader header = MakeHeader("w", v1::SCHEME_FP16, 8, 64, 0,
                                             v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload);
  payload[100] ^= 0x40;
  ExpectStatus(testing::Upload(stub(), header, payload), grpc::StatusCode::DATA_LOSS, "SHA-256");
  ExpectNothingLeft("w");
  EXPECT_TRUE(Names().empty());
}

TEST_F(ServiceTest, InvalidPayloadsAreRejected) {
  Snapshot();
  // A float payload with a NaN cannot be quantized.
  std::vector<float> values = RandomFloats(8 * 64, 5);
  values[70] = std::numeric_limits<float>::quiet_NaN();
  std::string payload = ToBytes(DType::kF32, values);
  EXPECT_EQ(testing::Upload(stub(),
                            MakeHeader("w", v1::SCHEME_W8A16, 8, 64, 0, v1::SOURCE_ENCODING_FLOAT,
                                       v1::DTYPE_FP32, payload),
                            payload)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ExpectNothingLeft("w");

  // A packed W2A8 weight holding the invalid code 3.
  const WeightShape shape{4, 128, 0};
  std::vector<uint8_t> packed =
      testing::PackLocally(Scheme::kW2A8, shape, DType::kF32, RandomFloats(4 * 128, 6));
  packed[40] = 0xff;
  payload.assign(packed.begin(), packed.end());
  ExpectStatus(
      testing::Upload(stub(),
                      MakeHeader("w", v1::SCHEME_W2A8, 4, 128, 0, v1::SOURCE_ENCODING_PACKED,
                                 v1::DTYPE_UNSPECIFIED, payload),
                      payload),
      grpc::StatusCode::INVALID_ARGUMENT, "code 3");
  ExpectNothingLeft("w");
}

TEST_F(ServiceTest, DuplicateNameIsAlreadyExists) {
  UploadFloat("w", v1::SCHEME_W8A16, 8, 64);
  Snapshot();
  const std::string payload = ToBytes(DType::kF32, RandomFloats(8 * 64, 9));
  ExpectStatus(testing::Upload(stub(),
                               MakeHeader("w", v1::SCHEME_FP16, 8, 64, 0, v1::SOURCE_ENCODING_FLOAT,
                                          v1::DTYPE_FP32, payload),
                               payload),
               grpc::StatusCode::ALREADY_EXISTS, "weight \"w\" already exists");
  v1::WeightInfo info;
  ASSERT_TRUE(Get("w", &info).ok());
  EXPECT_EQ(info.scheme(), v1::SCHEME_W8A16);  // the first upload is untouched
  EXPECT_EQ(Info().memory_used_bytes(), used_before_);
}

// Waits until the server has taken the reservation of an upload still in progress.
void WaitForMemoryUsed(v1::Qmm::Stub& stub, int64_t bytes) {
  for (int i = 0; i < 500; ++i) {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    ASSERT_TRUE(stub.ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
    if (info.memory_used_bytes() == bytes) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "memory_used_bytes never reached " << bytes;
}

TEST_F(ServiceTest, NameAndMemoryAreReservedWhileAnUploadIsInProgress) {
  // Upload 1 sends its header and stalls; its name and bytes are already taken.
  const std::string payload(40 << 20, '\x3c');  // fp16 values, 40 MiB of a 64 MiB budget
  const v1::WeightHeader header =
      MakeHeader("first", v1::SCHEME_FP16, 4096, 5120, 0, v1::SOURCE_ENCODING_PACKED,
                 v1::DTYPE_UNSPECIFIED, payload);
  grpc::ClientContext context;
  v1::UploadWeightResponse response;
  auto writer = stub().UploadWeight(&context, &response);
  v1::UploadWeightRequest request;
  *request.mutable_header() = header;
  ASSERT_TRUE(writer->Write(request));
  WaitForMemoryUsed(stub(), int64_t{40} << 20);

  ExpectStatus(testing::Upload(stub(), header, payload), grpc::StatusCode::ALREADY_EXISTS,
               "being uploaded");
  // A second large upload under another name cannot pass the budget meanwhile.
  v1::WeightHeader other = header;
  other.set_name("second");
  ExpectStatus(testing::Upload(stub(), other, payload), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "needs 41943040 bytes but 41943040 of memory_limit_bytes 67108864 are in use");
  EXPECT_EQ(Get("first").error_code(), grpc::StatusCode::NOT_FOUND);  // not visible yet

  for (size_t offset = 0; offset < payload.size(); offset += kMaxChunkBytes) {
    request.set_chunk(payload.substr(offset, kMaxChunkBytes));
    ASSERT_TRUE(writer->Write(request));
  }
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_TRUE(Get("first").ok());
}

TEST_F(ServiceTest, OverTheMemoryBudgetIsResourceExhausted) {
  UploadFloat("small", v1::SCHEME_W8A16, 64, 1024);
  Snapshot();
  // 8192 x 8192 fp16 = 128 MiB: refused from the header alone, before any data is sent.
  v1::WeightHeader header = MakeHeader("huge", v1::SCHEME_FP16, 8192, 8192, 0,
                                       v1::SOURCE_ENCODING_PACKED, v1::DTYPE_UNSPECIFIED, "");
  header.set_total_bytes(int64_t{2} * 8192 * 8192);
  header.set_sha256(std::string(32, '\0'));
  ExpectStatus(testing::UploadMessages(stub(), {[&] {
                                         v1::UploadWeightRequest r;
                                         *r.mutable_header() = header;
                                         return r;
                                       }()}),
               grpc::StatusCode::RESOURCE_EXHAUSTED,
               absl::StrCat("weight \"huge\" needs 134217728 bytes but ", used_before_,
                            " of memory_limit_bytes 67108864 are in use"));
  ExpectNothingLeft("huge");
}

TEST_F(ServiceTest, MessagesOverTheLimitAreResourceExhausted) {
  Snapshot();
  // An upload chunk message larger than max_message_bytes.
  v1::UploadWeightRequest big;
  big.set_chunk(std::string(kMaxMessage + 1, 'x'));
  EXPECT_EQ(testing::UploadMessages(stub(), {big}).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ExpectNothingLeft("w");

  // A MatMul request larger than max_message_bytes: 8192 rows of 128 fp32 = 4 MiB + framing.
  UploadFloat("w", v1::SCHEME_FP16, 8, 128);
  const v1::MatMulRequest request =
      MakeMatMulRequest("w", DType::kF32, 8192, 128, RandomFloats(8192 * 128, 1), v1::DTYPE_FP32);
  EXPECT_EQ(MatMul(request).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // A response that would be larger: 1024 rows x 2048 outputs x 4 bytes = 8 MiB.
  UploadFloat("wide", v1::SCHEME_W8A16, 2048, 64);
  ExpectStatus(MatMul(MakeMatMulRequest("wide", DType::kF32, 1024, 64, RandomFloats(1024 * 64, 2),
                                        v1::DTYPE_FP32)),
               grpc::StatusCode::RESOURCE_EXHAUSTED,
               "would exceed max_message_bytes 4194304; send at most 511 rows");
  // The server keeps serving.
  EXPECT_TRUE(MatMul(MakeMatMulRequest("wide", DType::kF32, 511, 64, RandomFloats(511 * 64, 3),
                                       v1::DTYPE_FP32))
                  .ok());
}

TEST_F(ServiceTest, LookupsValidateNames) {
  ExpectStatus(Get(""), grpc::StatusCode::INVALID_ARGUMENT, "name is empty");
  ExpectStatus(Get("a\tb"), grpc::StatusCode::INVALID_ARGUMENT, "outside");
  ExpectStatus(Delete(std::string(200, 'a')), grpc::StatusCode::INVALID_ARGUMENT, "200 characters");
  ExpectStatus(Get("missing"), grpc::StatusCode::NOT_FOUND, "weight \"missing\" not found");
  ExpectStatus(Delete("missing"), grpc::StatusCode::NOT_FOUND, "weight \"missing\" not found");
}

TEST_F(ServiceTest, BadMatMulRequests) {
  UploadFloat("w", v1::SCHEME_W8A16, 16, 128);
  UploadFloat("t", v1::SCHEME_W2A8, 16, 128);
  auto good = [] {
    return MakeMatMulRequest("w", DType::kF16, 2, 128, RandomFloats(256, 4), v1::DTYPE_FP32);
  };
  struct Case {
    std::string what;
    std::function<void(v1::MatMulRequest&)> mutate;
    grpc::StatusCode code;
    std::string needle;
  };
  const Case cases[] = {
      {"unknown weight", [](auto& r) { r.set_weight("nope"); }, grpc::StatusCode::NOT_FOUND,
       "weight \"nope\" not found"},
      {"empty weight", [](auto& r) { r.clear_weight(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "weight is empty"},
      {"unknown dtype", [](auto& r) { r.mutable_input()->set_dtype(static_cast<v1::DType>(9)); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.dtype = 9"},
      {"unspecified dtype", [](auto& r) { r.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.dtype = DTYPE_UNSPECIFIED"},
      {"unknown output dtype", [](auto& r) { r.set_output_dtype(static_cast<v1::DType>(4)); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_dtype = 4"},
      {"dtype mismatch", [](auto& r) { r.mutable_input()->set_dtype(v1::DTYPE_FP32); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.data is 512 bytes, but shape [2, 128] of fp32"},
      {"rank 1", [](auto& r) { r.mutable_input()->mutable_shape()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.shape has 1 dimensions"},
      {"M = 0", [](auto& r) { r.mutable_input()->set_shape(0, 0); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.shape[0] = 0 (M) must be at least 1"},
      {"negative M", [](auto& r) { r.mutable_input()->set_shape(0, -2); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.shape[0] = -2"},
      {"huge M", [](auto& r) { r.mutable_input()->set_shape(0, int64_t{1} << 62); },
       grpc::StatusCode::INVALID_ARGUMENT, "exceeds max_rows 65536"},
      {"K mismatch", [](auto& r) { r.mutable_input()->set_shape(1, 64); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.shape[1] = 64 does not match K = 128"},
      {"negative K", [](auto& r) { r.mutable_input()->set_shape(1, -128); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.shape[1] = -128"},
      {"short data", [](auto& r) { r.mutable_input()->mutable_data()->resize(511); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.data is 511 bytes"},
      {"long data", [](auto& r) { r.mutable_input()->mutable_data()->append("xx"); },
       grpc::StatusCode::INVALID_ARGUMENT, "input.data is 514 bytes"},
      {"non-finite W2A8 input",
       [](auto& r) {
         r.set_weight("t");
         (*r.mutable_input()->mutable_data())[2 * 130 + 1] = '\x7c';  // fp16 +Inf at [1][2]
         (*r.mutable_input()->mutable_data())[2 * 130] = '\0';
       },
       grpc::StatusCode::INVALID_ARGUMENT, "input[1][2] is NaN or infinite"},
  };
  for (const Case& c : cases) {
    v1::MatMulRequest request = good();
    c.mutate(request);
    SCOPED_TRACE(c.what);
    ExpectStatus(MatMul(request), c.code, c.needle);
  }
  v1::MatMulResponse response;
  ASSERT_TRUE(MatMul(good(), &response).ok());
  EXPECT_EQ(response.output().dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(response.output().shape_size(), 2);
  EXPECT_EQ(response.output().shape(0), 2);
  EXPECT_EQ(response.output().shape(1), 16);
  EXPECT_EQ(response.output().data().size(), 2u * 16 * 4);
  EXPECT_GT(response.compute_ns(), 0);
}

TEST_F(ServiceTest, MatMulStreamAnswersInOrderAndEndsOnHalfClose) {
  UploadFloat("w", v1::SCHEME_W8A16, 16, 128);
  grpc::ClientContext context;
  auto stream = stub().MatMulStream(&context);
  for (int64_t m = 1; m <= 6; ++m) {
    ASSERT_TRUE(stream->Write(
        MakeMatMulRequest("w", DType::kBF16, m, 128, RandomFloats(m * 128, m), v1::DTYPE_FP16)));
    v1::MatMulResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.output().shape(0), m);
    EXPECT_EQ(response.output().shape(1), 16);
    EXPECT_EQ(response.output().dtype(), v1::DTYPE_FP16);
    EXPECT_EQ(response.output().data().size(), static_cast<size_t>(m * 16 * 2));
  }
  stream->WritesDone();
  v1::MatMulResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceTest, MatMulStreamWithNoRequestsIsOk) {
  grpc::ClientContext context;
  auto stream = stub().MatMulStream(&context);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceTest, MatMulStreamEndsWithTheStatusOfABadRequest) {
  UploadFloat("w", v1::SCHEME_FP16, 16, 128);
  grpc::ClientContext context;
  auto stream = stub().MatMulStream(&context);
  const v1::MatMulRequest good =
      MakeMatMulRequest("w", DType::kF32, 2, 128, RandomFloats(256, 1), v1::DTYPE_FP32);
  ASSERT_TRUE(stream->Write(good));
  v1::MatMulResponse response;
  ASSERT_TRUE(stream->Read(&response));
  v1::MatMulRequest bad = good;
  bad.mutable_input()->set_shape(1, 127);
  ASSERT_TRUE(stream->Write(bad));
  EXPECT_FALSE(stream->Read(&response));
  stream->WritesDone();
  ExpectStatus(stream->Finish(), grpc::StatusCode::INVALID_ARGUMENT,
               "input.shape[1] = 127 does not match K = 128");
  // Other calls are unaffected.
  EXPECT_TRUE(MatMul(good).ok());
}

TEST_F(ServiceTest, DeleteDuringMatMulsNeverBreaksAnInFlightRequest) {
  UploadFloat("w", v1::SCHEME_W4A16, 64, 512, 128);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, not_found{0}, other{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      const v1::MatMulRequest request =
          MakeMatMulRequest("w", DType::kF32, 4, 512, RandomFloats(4 * 512, t), v1::DTYPE_FP32);
      while (!stop.load()) {
        v1::MatMulResponse response;
        const grpc::Status status = MatMul(request, &response);
        if (status.ok() && response.output().data().size() == 4u * 64 * 4) {
          ok.fetch_add(1);
        } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
          not_found.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      }
    });
  }
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(Delete("w").ok());
    UploadFloat("w", v1::SCHEME_W4A16, 64, 512, 128);
  }
  stop = true;
  for (std::thread& t : callers) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(other.load(), 0);
  // Every deleted copy is freed once the last request holding it lets go (which may be a
  // moment after its caller got the answer).
  WaitForMemoryUsed(stub(), 64 * 256 + 2 * 64 * 4);
}

}  // namespace
}  // namespace qmm
