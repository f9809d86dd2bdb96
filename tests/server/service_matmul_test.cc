// MatMul and MatMulStream results through the in-process server, for every scheme and
// every input/output dtype, against the float64 reference (tolerances in
// server_test_util.h: fp32 out 1e-4, fp16 out 2e-3, bf16 out 1e-2 relative error of the
// whole matrix, plus per-element bounds), and under concurrent callers.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/format.h"
#include "server/proto_convert.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::ExpectMatchesReference;
using testing::FromBytes;
using testing::MakeHeader;
using testing::MakeMatMulRequest;
using testing::RandomFloats;
using testing::ToBytes;

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// One weight on the server and its packed form here, for the reference.
struct Uploaded {
  std::string name;
  WeightShape shape;
  Scheme scheme;
  std::vector<uint8_t> packed;
  PackedWeight view() const { return *ViewPacked(scheme, shape, packed); }
};

class ServiceMatMulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{256} << 20;
    server_ = testing::StartTestServer(options, /*workers=*/3);
    ASSERT_NE(server_.stub, nullptr);
  }

  // Uploads random values of `source` dtype as floats; the server quantizes them.
  Uploaded UploadFloat(Scheme scheme, const WeightShape& shape, DType source, uint32_t seed) {
    Uploaded w{absl::StrCat(std::string(SchemeName(scheme)), "/g", shape.group_size, "/",
                            std::string(DTypeName(source)), "/", seed),
               shape,
               scheme,
               {}};
    const std::vector<float> values = RandomFloats(shape.n * shape.k, seed);
    const std::string payload = ToBytes(source, values);
    const grpc::Status status = testing::Upload(
        *server_.stub,
        MakeHeader(w.name, SchemeToProto(scheme), shape.n, shape.k, shape.group_size,
                   v1::SOURCE_ENCODING_FLOAT, DTypeToProto(source), payload),
        payload, nullptr, 3000);
    EXPECT_TRUE(status.ok()) << w.name << ": " << status.error_message();
    // What the server must have built: the same quantizer on the same values.
    w.packed = testing::PackLocally(scheme, shape, source, FromBytes(source, payload));
    return w;
  }

  testing::TestServer server_;
};

// The wire values of x: what the server actually multiplies.
std::vector<float> Rounded(DType dtype, const std::vector<float>& x) {
  return FromBytes(dtype, ToBytes(dtype, x));
}

TEST_F(ServiceMatMulTest, EverySchemeEveryDtypeMatchesTheReference) {
  uint32_t seed = 1000;
  for (Scheme scheme : kAllSchemes) {
    for (int32_t group : {0, 128}) {
      if (group != 0 && scheme != Scheme::kW4A16) continue;
      // Odd N; K spans several groups of 128.
      const Uploaded w = UploadFloat(scheme, WeightShape{37, 384, group}, DType::kF32, seed++);
      for (DType x_dtype : kDTypes) {
        for (DType y_dtype : kDTypes) {
          for (int64_t m : {1, 5}) {
            const std::vector<float> x = RandomFloats(m * w.shape.k, seed++);
            v1::MatMulRequest request =
                MakeMatMulRequest(w.name, x_dtype, m, w.shape.k, x, DTypeToProto(y_dtype));
            grpc::ClientContext context;
            v1::MatMulResponse response;
            const grpc::Status status = server_.stub->MatMul(&context, request, &response);
            SCOPED_TRACE(absl::StrCat(w.name, " ", std::string(DTypeName(x_dtype)), " -> ",
                                      std::string(DTypeName(y_dtype)), " m=", m));
            ASSERT_TRUE(status.ok()) << status.error_message();
            ASSERT_EQ(response.output().dtype(), DTypeToProto(y_dtype));
            ASSERT_EQ(response.output().shape_size(), 2);
            ASSERT_EQ(response.output().shape(0), m);
            ASSERT_EQ(response.output().shape(1), w.shape.n);
            ExpectMatchesReference(w.view(), Rounded(x_dtype, x), m,
                                   FromBytes(y_dtype, response.output().data()), y_dtype);
          }
        }
      }
    }
  }
}

TEST_F(ServiceMatMulTest, HalfPrecisionSourcesAreQuantizedFromTheirValues) {
  uint32_t seed = 2000;
  for (Scheme scheme : kAllSchemes) {
    for (DType source : {DType::kF16, DType::kBF16}) {
      const Uploaded w = UploadFloat(scheme, WeightShape{9, 256, 0}, source, seed++);
      const std::vector<float> x = RandomFloats(3 * 256, seed++);
      grpc::ClientContext context;
      v1::MatMulResponse response;
      ASSERT_TRUE(server_.stub
                      ->MatMul(&context,
                               MakeMatMulRequest(w.name, DType::kF32, 3, 256, x, v1::DTYPE_FP32),
                               &response)
                      .ok());
      SCOPED_TRACE(w.name);
      ExpectMatchesReference(w.view(), x, 3, FromBytes(DType::kF32, response.output().data()),
                             DType::kF32);
    }
  }
}

TEST_F(ServiceMatMulTest, UnspecifiedOutputDtypeAnswersInTheInputDtype) {
  const Uploaded w = UploadFloat(Scheme::kW8A16, WeightShape{16, 128, 0}, DType::kF32, 1);
  for (DType x_dtype : kDTypes) {
    const std::vector<float> x = RandomFloats(2 * 128, 2);
    grpc::ClientContext context;
    v1::MatMulResponse response;
    ASSERT_TRUE(server_.stub
                    ->MatMul(&context,
                             MakeMatMulRequest(w.name, x_dtype, 2, 128, x, v1::DTYPE_UNSPECIFIED),
                             &response)
                    .ok());
    EXPECT_EQ(response.output().dtype(), DTypeToProto(x_dtype));
    ExpectMatchesReference(w.view(), Rounded(x_dtype, x), 2,
                           FromBytes(x_dtype, response.output().data()), x_dtype);
  }
}

TEST_F(ServiceMatMulTest, StreamResultsMatchTheReferenceInOrder) {
  std::vector<Uploaded> weights;
  uint32_t seed = 3000;
  for (Scheme scheme : kAllSchemes) {
    weights.push_back(UploadFloat(scheme, WeightShape{21, 256, 0}, DType::kF32, seed++));
  }
  grpc::ClientContext context;
  auto stream = server_.stub->MatMulStream(&context);
  // Alternate weights, dtypes and M on one stream, as a decode loop over layers would.
  for (int i = 0; i < 30; ++i) {
    const Uploaded& w = weights[i % weights.size()];
    const DType x_dtype = kDTypes[i % 3];
    const DType y_dtype = kDTypes[(i / 3) % 3];
    const int64_t m = 1 + i % 4;
    const std::vector<float> x = RandomFloats(m * 256, seed++);
    ASSERT_TRUE(
        stream->Write(MakeMatMulRequest(w.name, x_dtype, m, 256, x, DTypeToProto(y_dtype))));
    v1::MatMulResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_EQ(response.output().shape(0), m);
    SCOPED_TRACE(absl::StrCat("request ", i, " ", w.name));
    ExpectMatchesReference(w.view(), Rounded(x_dtype, x), m,
                           FromBytes(y_dtype, response.output().data()), y_dtype);
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceMatMulTest, ConcurrentCallersEachGetTheirOwnResult) {
  const Uploaded a = UploadFloat(Scheme::kW4A16, WeightShape{64, 512, 128}, DType::kF32, 11);
  const Uploaded b = UploadFloat(Scheme::kW2A8, WeightShape{48, 512, 0}, DType::kF32, 12);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const Uploaded& w = t % 2 == 0 ? a : b;
      for (int i = 0; i < 15; ++i) {
        const int64_t m = 1 + (t + i) % 7;
        const std::vector<float> x = RandomFloats(m * 512, 100 * t + i);
        grpc::ClientContext context;
        v1::MatMulResponse response;
        const grpc::Status status = server_.stub->MatMul(
            &context, MakeMatMulRequest(w.name, DType::kF32, m, 512, x, v1::DTYPE_FP32), &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        ASSERT_EQ(response.output().shape(0), m);
        ExpectMatchesReference(w.view(), x, m, FromBytes(DType::kF32, response.output().data()),
                               DType::kF32);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST_F(ServiceMatMulTest, ConcurrentStreamsStayInOrder) {
  const Uploaded w = UploadFloat(Scheme::kW8A16, WeightShape{32, 256, 0}, DType::kF32, 21);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      grpc::ClientContext context;
      auto stream = server_.stub->MatMulStream(&context);
      for (int i = 0; i < 10; ++i) {
        const int64_t m = 1 + i % 3;
        const std::vector<float> x = RandomFloats(m * 256, 1000 * t + i);
        ASSERT_TRUE(
            stream->Write(MakeMatMulRequest(w.name, DType::kF16, m, 256, x, v1::DTYPE_FP32)));
        v1::MatMulResponse response;
        ASSERT_TRUE(stream->Read(&response));
        ExpectMatchesReference(w.view(), Rounded(DType::kF16, x), m,
                               FromBytes(DType::kF32, response.output().data()), DType::kF32);
      }
      stream->WritesDone();
      EXPECT_TRUE(stream->Finish().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace qmm
