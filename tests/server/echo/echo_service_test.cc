// The echo server (server/echo/echo_service.h) in process on 127.0.0.1:0: every request's
// answer is its own input byte for byte, in order on a stream with requests sent ahead;
// every refused field is named, with qmm-server's codes; a stream ends with the status of
// its first refused request after the answers before it, and a client that cancels ends
// its stream CANCELLED.
#include "server/echo/echo_service.h"

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "qmm/v1/qmm.grpc.pb.h"

namespace qmm::echo {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kFeatures = 96;
constexpr int64_t kMaxRows = 8;

class EchoServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.weight = "identity";
    options_.features = kFeatures;
    options_.max_rows = kMaxRows;
    service_ = std::make_unique<EchoService>(options_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = v1::Qmm::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                 grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // M random rows of `bytes_per_value`-byte values (random bytes: never all zeros).
  v1::MatMulRequest Request(int64_t m, v1::DType dtype = v1::DTYPE_FP16) {
    const int bytes_per_value = dtype == v1::DTYPE_FP32 ? 4 : 2;
    v1::MatMulRequest request;
    request.set_weight("identity");
    v1::Tensor* input = request.mutable_input();
    input->set_dtype(dtype);
    input->add_shape(m);
    input->add_shape(kFeatures);
    std::string data(static_cast<size_t>(m * kFeatures * bytes_per_value), '\0');
    for (char& c : data) c = static_cast<char>(rng_() | 1);
    input->set_data(data);
    return request;
  }

  grpc::Status Call(const v1::MatMulRequest& request, v1::MatMulResponse* response) {
    grpc::ClientContext context;
    return stub_->MatMul(&context, request, response);
  }

  static void ExpectEcho(const v1::MatMulRequest& request, const v1::MatMulResponse& response) {
    EXPECT_EQ(response.output().dtype(), request.input().dtype());
    EXPECT_THAT(response.output().shape(), ::testing::ElementsAreArray(request.input().shape()));
    EXPECT_EQ(response.output().data(), request.input().data());
  }

  // The refusal of `request` through MatMul: its code, and a message naming `field`.
  void ExpectRefused(const v1::MatMulRequest& request, grpc::StatusCode code,
                     const std::string& field) {
    v1::MatMulResponse response;
    response.mutable_output()->set_data("poison");
    const grpc::Status status = Call(request, &response);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(field));
  }

  EchoOptions options_;
  std::unique_ptr<EchoService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Qmm::Stub> stub_;
  std::mt19937 rng_{20261207};
};

TEST_F(EchoServiceTest, DescribesItsIdentityWeight) {
  grpc::ClientContext info_context;
  v1::ServerInfoResponse info;
  ASSERT_TRUE(stub_->ServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.backend(), "echo");
  EXPECT_EQ(info.limits().max_rows(), kMaxRows);
  EXPECT_EQ(info.weights(), 1);

  grpc::ClientContext get_context;
  v1::GetWeightRequest get;
  get.set_name("identity");
  v1::WeightInfo weight;
  ASSERT_TRUE(stub_->GetWeight(&get_context, get, &weight).ok());
  EXPECT_EQ(weight.k(), kFeatures);
  EXPECT_EQ(weight.n(), kFeatures);
  EXPECT_EQ(weight.scheme(), v1::SCHEME_FP16);

  grpc::ClientContext missing_context;
  get.set_name("w");
  const grpc::Status missing = stub_->GetWeight(&missing_context, get, &weight);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("\"w\""));

  grpc::ClientContext list_context;
  v1::ListWeightsResponse list;
  ASSERT_TRUE(stub_->ListWeights(&list_context, {}, &list).ok());
  ASSERT_EQ(list.weights_size(), 1);
  EXPECT_EQ(list.weights(0).name(), "identity");

  grpc::ClientContext delete_context;
  v1::DeleteWeightRequest del;
  del.set_name("identity");
  v1::DeleteWeightResponse deleted;
  EXPECT_EQ(stub_->DeleteWeight(&delete_context, del, &deleted).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(EchoServiceTest, MatMulAnswersItsInput) {
  for (v1::DType dtype : {v1::DTYPE_FP16, v1::DTYPE_BF16, v1::DTYPE_FP32}) {
    for (int64_t m : {int64_t{1}, int64_t{3}, kMaxRows}) {
      v1::MatMulRequest request = Request(m, dtype);
      if (m == 3) request.set_output_dtype(dtype);  // named, the same dtype is taken
      v1::MatMulResponse response;
      const grpc::Status status = Call(request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      ExpectEcho(request, response);
    }
  }
}

TEST_F(EchoServiceTest, RefusesWhatQmmServerRefuses) {
  v1::MatMulRequest request = Request(2);
  request.set_weight("w");
  ExpectRefused(request, grpc::StatusCode::NOT_FOUND, "weight \"w\" not found");

  request = Request(2);
  request.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "input.dtype");

  request = Request(2);
  request.set_output_dtype(v1::DTYPE_FP32);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "output_dtype = DTYPE_FP32");

  request = Request(2);
  request.mutable_input()->add_shape(1);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "input.shape has 3 dimensions");

  request = Request(2);
  request.mutable_input()->set_shape(0, 0);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "input.shape[0] = 0");

  request = Request(kMaxRows + 1);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "max_rows 8");

  request = Request(2);
  request.mutable_input()->set_shape(1, kFeatures + 1);
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "input.shape[1] = 97");

  request = Request(2);
  request.mutable_input()->mutable_data()->pop_back();
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "input.data is 383 bytes");
}

TEST_F(EchoServiceTest, StreamAnswersInOrderWithRequestsSentAhead) {
  constexpr int kRequests = 60;
  constexpr int kAhead = 12;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::MatMulRequest, v1::MatMulResponse>> stream =
      stub_->MatMulStream(&context);
  std::vector<v1::MatMulRequest> sent;
  for (int i = 0; i < kRequests; ++i) sent.push_back(Request(1 + i % kMaxRows));
  int written = 0;
  for (int read = 0; read < kRequests; ++read) {
    while (written < kRequests && written - read < kAhead) {
      ASSERT_TRUE(stream->Write(sent[written++]));
    }
    v1::MatMulResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ExpectEcho(sent[read], response);
  }
  ASSERT_TRUE(stream->WritesDone());
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(EchoServiceTest, StreamEndsWithItsFirstRefusalAfterTheAnswersBeforeIt) {
  grpc::ClientContext context;
  auto stream = stub_->MatMulStream(&context);
  std::vector<v1::MatMulRequest> sent = {Request(1), Request(2), Request(1)};
  sent[2].mutable_input()->set_shape(1, 5);
  for (const v1::MatMulRequest& request : sent) ASSERT_TRUE(stream->Write(request));
  for (int i = 0; i < 2; ++i) {
    v1::MatMulResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ExpectEcho(sent[i], response);
  }
  v1::MatMulResponse none;
  EXPECT_FALSE(stream->Read(&none));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("input.shape[1] = 5"));
}

TEST_F(EchoServiceTest, CancelledStreamEndsCancelled) {
  grpc::ClientContext context;
  auto stream = stub_->MatMulStream(&context);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(stream->Write(Request(kMaxRows)));
  v1::MatMulResponse response;
  ASSERT_TRUE(stream->Read(&response));
  context.TryCancel();
  while (stream->Read(&response)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server goes on serving.
  v1::MatMulRequest request = Request(1);
  ASSERT_TRUE(Call(request, &response).ok());
  ExpectEcho(request, response);
}

}  // namespace
}  // namespace qmm::echo
