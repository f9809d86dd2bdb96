// qmm::Client against an in-process fake of the service: what goes over the wire (chunks,
// digest, tensors) and how every status comes back.
#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kN = 3;
constexpr int64_t kK = 4;
// The fake's one weight, "w": [kN, kK].
constexpr float kWeight[kN * kK] = {1, 2, 3, 4, -1, 0.5f, 0, 2, 0.25f, -3, 1, -1};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

class FakeQmm final : public v1::Qmm::Service {
 public:
  struct Upload {
    v1::WeightHeader header;
    std::vector<size_t> chunk_sizes;
    std::string payload;
  };

  grpc::Status UploadWeight(grpc::ServerContext*,
                            grpc::ServerReader<v1::UploadWeightRequest>* reader,
                            v1::UploadWeightResponse* response) override {
    v1::UploadWeightRequest request;
    if (!reader->Read(&request) || !request.has_header()) {
      return {grpc::INVALID_ARGUMENT, "the first message must be a header"};
    }
    Upload upload;
    upload.header = request.header();
    // Ends the RPC before the payload: the client must see this status, not hang.
    if (upload.header.name() == "over-budget") {
      return {grpc::RESOURCE_EXHAUSTED, "weight needs 5 MiB, 1 MiB left of the budget"};
    }
    while (reader->Read(&request)) {
      upload.chunk_sizes.push_back(request.chunk().size());
      upload.payload += request.chunk();
    }
    const std::array<uint8_t, 32> digest = client_internal::Sha256Digest(
        {reinterpret_cast<const uint8_t*>(upload.payload.data()), upload.payload.size()});
    const bool digest_ok = upload.header.sha256() == std::string(digest.begin(), digest.end());
    {
      absl::MutexLock lock(&mu_);
      uploads_.push_back(upload);
    }
    if (!digest_ok || upload.header.name() == "corrupt") {
      return {grpc::DATA_LOSS, "sha256 of the payload does not match the header"};
    }
    v1::WeightInfo* info = response->mutable_weight();
    info->set_name(upload.header.name());
    info->set_n(upload.header.n());
    info->set_k(upload.header.k());
    info->set_scheme(upload.header.scheme());
    info->set_packed_bytes(static_cast<int64_t>(upload.payload.size()));
    return grpc::Status::OK;
  }

  grpc::Status GetWeight(grpc::ServerContext*, const v1::GetWeightRequest* request,
                         v1::WeightInfo* response) override {
    if (request->name() != "w") return NotFound(request->name());
    response->set_name("w");
    response->set_n(kN);
    response->set_k(kK);
    response->set_scheme(v1::SCHEME_FP16);
    return grpc::Status::OK;
  }

  grpc::Status ListWeights(grpc::ServerContext*, const v1::ListWeightsRequest*,
                           v1::ListWeightsResponse* response) override {
    response->add_weights()->set_name("a");
    response->add_weights()->set_name("w");
    return grpc::Status::OK;
  }

  grpc::Status DeleteWeight(grpc::ServerContext*, const v1::DeleteWeightRequest* request,
                            v1::DeleteWeightResponse*) override {
    return request->name() == "w" ? grpc::Status::OK : NotFound(request->name());
  }

  grpc::Status ServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                          v1::ServerInfoResponse* response) override {
    response->set_version("fake");
    response->set_backend("cpu");
    response->mutable_limits()->set_max_chunk_bytes(1 << 20);
    return grpc::Status::OK;
  }

  grpc::Status MatMul(grpc::ServerContext*, const v1::MatMulRequest* request,
                      v1::MatMulResponse* response) override {
    return Compute(*request, response);
  }

  grpc::Status MatMulStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::MatMulResponse, v1::MatMulRequest>* stream) override {
    v1::MatMulRequest request;
    while (stream->Read(&request)) {
      v1::MatMulResponse response;
      if (grpc::Status status = Compute(request, &response); !status.ok()) return status;
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  grpc::Status Forward(grpc::ServerContext*, const v1::ForwardRequest* request,
                       v1::ForwardResponse* response) override {
    return ComputeForward(*request, response);
  }

  grpc::Status ForwardStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ForwardResponse, v1::ForwardRequest>* stream) override {
    v1::ForwardRequest request;
    while (stream->Read(&request)) {
      v1::ForwardResponse response;
      if (grpc::Status status = ComputeForward(request, &response); !status.ok()) return status;
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  std::vector<Upload> uploads() {
    absl::MutexLock lock(&mu_);
    return uploads_;
  }

 private:
  static grpc::Status NotFound(const std::string& name) {
    return {grpc::NOT_FOUND, "weight '" + name + "' not found"};
  }

  // The fake's one model, "m": the linear layer of "w" for activations; for token ids, an
  // embedding whose rows are those of "w" (kN tokens of kK features), fp32 by default.
  static grpc::Status ComputeForward(const v1::ForwardRequest& request,
                                     v1::ForwardResponse* response) {
    if (request.model() != "m")
      return {grpc::NOT_FOUND, "model '" + request.model() + "' not found"};
    if (request.token_ids_size() == 0) {
      v1::MatMulRequest matmul;
      matmul.set_weight("w");
      *matmul.mutable_input() = request.input();
      matmul.set_output_dtype(request.output_dtype());
      v1::MatMulResponse out;
      if (grpc::Status status = Compute(matmul, &out); !status.ok()) return status;
      response->mutable_output()->Swap(out.mutable_output());
      response->set_compute_ns(out.compute_ns());
      return grpc::Status::OK;
    }
    std::vector<float> y;
    for (int32_t id : request.token_ids()) {
      if (id < 0 || id >= kN) return {grpc::INVALID_ARGUMENT, "token id out of range [0, 3)"};
      y.insert(y.end(), kWeight + id * kK, kWeight + (id + 1) * kK);
    }
    const v1::DType wire =
        request.output_dtype() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FP32 : request.output_dtype();
    Encode(y, request.token_ids_size(), kK, wire, response->mutable_output());
    response->set_compute_ns(77);
    return grpc::Status::OK;
  }

  // out <- y [m, n] in the wire dtype `wire`.
  static void Encode(const std::vector<float>& y, int64_t m, int64_t n, v1::DType wire,
                     v1::Tensor* out) {
    const DType dtype = wire == v1::DTYPE_FP16   ? DType::kF16
                        : wire == v1::DTYPE_BF16 ? DType::kBF16
                                                 : DType::kF32;
    out->set_dtype(wire);
    out->add_shape(m);
    out->add_shape(n);
    std::string data(y.size() * DTypeSize(dtype), '\0');
    FromFloat(dtype, y.data(), y.size(), data.data());
    out->set_data(std::move(data));
  }

  static grpc::Status Compute(const v1::MatMulRequest& request, v1::MatMulResponse* response) {
    if (request.weight() == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return grpc::Status::OK;
    }
    if (request.weight() != "w") return NotFound(request.weight());
    const v1::Tensor& in = request.input();
    if (in.shape_size() != 2 || in.shape(1) != kK) {
      return {grpc::INVALID_ARGUMENT, "input shape must be [M, 4]"};
    }
    const int64_t m = in.shape(0);
    const DType x_dtype = in.dtype() == v1::DTYPE_FP16   ? DType::kF16
                          : in.dtype() == v1::DTYPE_BF16 ? DType::kBF16
                                                         : DType::kF32;
    std::vector<float> x(m * kK);
    ToFloat(x_dtype, in.data().data(), x.size(), x.data());
    std::vector<float> y(m * kN);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < kN; ++n) {
        float sum = 0;
        for (int64_t k = 0; k < kK; ++k) sum += x[i * kK + k] * kWeight[n * kK + k];
        y[i * kN + n] = sum;
      }
    }
    Encode(y, m, kN,
           request.output_dtype() == v1::DTYPE_UNSPECIFIED ? in.dtype() : request.output_dtype(),
           response->mutable_output());
    response->set_compute_ns(4242);
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  std::vector<Upload> uploads_ ABSL_GUARDED_BY(mu_);
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // libgrpc++'s health service, as qmm-server runs it (for Client::Serving).
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    builder.SetMaxReceiveMessageSize(8 << 20);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    ClientOptions options;
    options.server = "127.0.0.1:" + std::to_string(port);
    options.call_timeout = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown();
  }

  // x [m, kK] of random values and the float reference y [m, kN].
  static std::vector<float> RandomX(int64_t m, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-2, 2);
    std::vector<float> x(m * kK);
    for (float& v : x) v = dist(rng);
    return x;
  }
  static std::vector<float> Reference(const std::vector<float>& x) {
    const int64_t m = static_cast<int64_t>(x.size()) / kK;
    std::vector<float> y(m * kN);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < kN; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < kK; ++k) sum += x[i * kK + k] * kWeight[n * kK + k];
        y[i * kN + n] = static_cast<float>(sum);
      }
    }
    return y;
  }

  FakeQmm fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST(ClientConnectTest, UnreachableServerIsUnavailable) {
  ClientOptions options;
  options.server = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Status status = Client::Connect(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("cannot connect to 127.0.0.1:1"));
}

TEST_F(ClientTest, UploadStreamsBoundedChunksWithTheDigest) {
  const std::vector<uint8_t> payload = RandomBytes((5 << 20) / 2 + 77, 1);
  UploadSpec spec;
  spec.name = "big";
  spec.scheme = Scheme::kW8A16;
  spec.shape = {123, 456, 0};
  std::vector<std::pair<int64_t, int64_t>> progress;
  absl::StatusOr<v1::WeightInfo> info = client_->Upload(
      spec, payload, [&](int64_t sent, int64_t total) { progress.emplace_back(sent, total); });
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "big");
  EXPECT_EQ(info->n(), 123);
  EXPECT_EQ(info->scheme(), v1::SCHEME_W8A16);

  const std::vector<FakeQmm::Upload> uploads = fake_.uploads();
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(uploads[0].header.total_bytes(), static_cast<int64_t>(payload.size()));
  EXPECT_EQ(uploads[0].payload, std::string(payload.begin(), payload.end()));
  EXPECT_THAT(uploads[0].chunk_sizes,
              ::testing::ElementsAre(1 << 20, 1 << 20, payload.size() - (2 << 20)));
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[0].first, 1 << 20);
  const int64_t size = static_cast<int64_t>(payload.size());
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>(size, size)));
}

TEST_F(ClientTest, EmptyPayloadSendsOnlyTheHeader) {
  UploadSpec spec;
  spec.name = "empty";
  ASSERT_TRUE(client_->Upload(spec, {}).ok());
  const std::vector<FakeQmm::Upload> uploads = fake_.uploads();
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_TRUE(uploads[0].chunk_sizes.empty());
  EXPECT_EQ(uploads[0].header.total_bytes(), 0);
}

TEST_F(ClientTest, UploadErrorsComeBackUnchanged) {
  UploadSpec spec;
  spec.name = "corrupt";
  const absl::Status status = client_->Upload(spec, RandomBytes(1000, 2)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "sha256 of the payload does not match the header");
}

TEST_F(ClientTest, UploadRejectedAfterTheHeaderStopsSending) {
  UploadSpec spec;
  spec.name = "over-budget";
  const absl::Status status = client_->Upload(spec, RandomBytes(5 << 20, 3)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("1 MiB left of the budget"));
}

TEST_F(ClientTest, WeightCallsAndTheirErrors) {
  absl::StatusOr<v1::WeightInfo> w = client_->GetWeight("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->k(), kK);
  const absl::Status missing = client_->GetWeight("nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "weight 'nope' not found");

  absl::StatusOr<std::vector<v1::WeightInfo>> all = client_->ListWeights();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].name(), "w");

  EXPECT_TRUE(client_->DeleteWeight("w").ok());
  EXPECT_EQ(client_->DeleteWeight("x").code(), absl::StatusCode::kNotFound);

  absl::StatusOr<v1::ServerInfoResponse> info = client_->ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->backend(), "cpu");
  EXPECT_EQ(info->limits().max_chunk_bytes(), 1 << 20);
}

TEST_F(ClientTest, ServingFollowsTheHealthService) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  ASSERT_NE(health, nullptr);
  health->SetServingStatus("qmm.v1.Qmm", true);
  for (const char* service : {"", "qmm.v1.Qmm"}) {
    absl::StatusOr<bool> serving = client_->Serving(service);
    ASSERT_TRUE(serving.ok()) << service << ": " << serving.status();
    EXPECT_TRUE(*serving) << service;
  }
  health->SetServingStatus(false);
  for (const char* service : {"", "qmm.v1.Qmm"}) {
    absl::StatusOr<bool> serving = client_->Serving(service);
    ASSERT_TRUE(serving.ok()) << service << ": " << serving.status();
    EXPECT_FALSE(*serving) << service;
  }
  EXPECT_EQ(client_->Serving("qmm.v1.Unknown").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, MatMulSendsAndReceivesEveryDtype) {
  const std::vector<float> x = RandomX(5, 4);
  const std::vector<float> ref = Reference(x);
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::optional<DType> out :
         {std::optional<DType>(), std::optional(DType::kF32), std::optional(DType::kBF16)}) {
      const NdArray xa = FromFloats(in, {5, kK}, x);
      absl::StatusOr<MatMulResult> y = client_->MatMul("w", xa, out);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(y->compute_ns, 4242);
      EXPECT_EQ(y->output.shape, (std::vector<int64_t>{5, kN}));
      EXPECT_EQ(y->output.type, FromWireDType(out.value_or(in)));
      const std::vector<float> got = ToFloats(y->output);
      const double tol = in == DType::kF32 && out.value_or(in) == DType::kF32 ? 1e-5 : 0.1;
      for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol) << i;
    }
  }
}

TEST_F(ClientTest, MatMulErrors) {
  const NdArray x = FromFloats(DType::kF32, {1, kK}, RandomX(1, 5));
  const absl::Status missing = client_->MatMul("gone", x).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "weight 'gone' not found");

  const NdArray bad_k = FromFloats(DType::kF32, {1, 3}, std::vector<float>{1, 2, 3});
  EXPECT_EQ(client_->MatMul("w", bad_k).status().code(), absl::StatusCode::kInvalidArgument);

  NdArray f64{ElementType::kF64, {1, kK}, std::vector<uint8_t>(8 * kK, 0x3f)};
  EXPECT_THAT(client_->MatMul("w", f64).status().message(), HasSubstr("cannot be sent"));

  // The fake sleeps 500 ms; the client's deadline is 200 ms.
  EXPECT_EQ(client_->MatMul("slow", x).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, StreamAnswersInOrder) {
  absl::StatusOr<std::unique_ptr<MatMulStream>> stream = client_->OpenMatMulStream();
  ASSERT_TRUE(stream.ok());
  // One at a time, then pipelined: responses must match their requests in order.
  for (uint32_t seed = 10; seed < 13; ++seed) {
    const std::vector<float> x = RandomX(seed - 8, seed);
    absl::StatusOr<MatMulResult> y =
        (*stream)->Call("w", FromFloats(DType::kF32, {seed - 8, kK}, x));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(ToFloats(y->output).size(), Reference(x).size());
    const std::vector<float> got = ToFloats(y->output);
    const std::vector<float> ref = Reference(x);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
  }
  std::vector<std::vector<float>> sent;
  for (uint32_t seed = 20; seed < 24; ++seed) {
    sent.push_back(RandomX(seed - 19, seed));
    ASSERT_TRUE((*stream)->Write("w", FromFloats(DType::kF32, {seed - 19, kK}, sent.back())).ok());
  }
  for (const std::vector<float>& x : sent) {
    absl::StatusOr<MatMulResult> y = (*stream)->Read();
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->output.shape[0], static_cast<int64_t>(x.size()) / kK);
    const std::vector<float> got = ToFloats(y->output);
    const std::vector<float> ref = Reference(x);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
  }
  EXPECT_TRUE((*stream)->Finish().ok());
}

TEST_F(ClientTest, StreamErrorEndsTheStreamWithTheServersStatus) {
  absl::StatusOr<std::unique_ptr<MatMulStream>> stream = client_->OpenMatMulStream();
  ASSERT_TRUE(stream.ok());
  const NdArray x = FromFloats(DType::kF32, {1, kK}, RandomX(1, 30));
  ASSERT_TRUE((*stream)->Call("w", x).ok());
  // A local error sends nothing and leaves the stream usable.
  NdArray f64{ElementType::kF64, {1, kK}, std::vector<uint8_t>(8 * kK, 0)};
  EXPECT_EQ((*stream)->Write("w", f64).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*stream)->Call("w", x).ok());

  const absl::Status status = (*stream)->Call("gone", x).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "weight 'gone' not found");
  EXPECT_EQ((*stream)->Write("w", x).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*stream)->Read().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*stream)->Finish().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, ForwardTakesActivationsOrTokenIds) {
  const std::vector<float> x = RandomX(3, 50);
  absl::StatusOr<MatMulResult> y =
      client_->Forward("m", FromFloats(DType::kF16, {3, kK}, x), DType::kF32);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->output.type, ElementType::kF32);
  EXPECT_EQ(y->compute_ns, 4242);
  const std::vector<float> got = ToFloats(y->output);
  const std::vector<float> ref = Reference(ToFloats(FromFloats(DType::kF16, {3, kK}, x)));
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);

  const std::vector<int32_t> ids = {2, 0, 2};
  absl::StatusOr<MatMulResult> rows = client_->Forward("m", ids);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->output.type, ElementType::kF32);  // the server's default for tokens
  EXPECT_EQ(rows->output.shape, (std::vector<int64_t>{3, kK}));
  const std::vector<float> table = ToFloats(rows->output);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t k = 0; k < kK; ++k) EXPECT_EQ(table[i * kK + k], kWeight[ids[i] * kK + k]);
  }
  const absl::Status missing = client_->Forward("gone", ids).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "model 'gone' not found");
}

TEST_F(ClientTest, ForwardStreamAnswersInOrderAndEndsOnAnError) {
  absl::StatusOr<std::unique_ptr<ForwardStream>> stream = client_->OpenForwardStream();
  ASSERT_TRUE(stream.ok());
  // Pipelined, activations and token ids mixed: each response matches its request.
  const std::vector<float> x1 = RandomX(2, 60);
  const std::vector<float> x2 = RandomX(4, 61);
  const std::vector<int32_t> ids = {1, 1, 0};
  ASSERT_TRUE((*stream)->Write("m", FromFloats(DType::kF32, {2, kK}, x1)).ok());
  ASSERT_TRUE((*stream)->Write("m", ids, DType::kBF16).ok());
  ASSERT_TRUE((*stream)->Write("m", FromFloats(DType::kF32, {4, kK}, x2)).ok());
  for (const std::vector<float>* x : {&x1, static_cast<const std::vector<float>*>(nullptr), &x2}) {
    absl::StatusOr<MatMulResult> y = (*stream)->Read();
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<float> got = ToFloats(y->output);
    if (x == nullptr) {
      EXPECT_EQ(y->output.type, ElementType::kBF16);
      ASSERT_EQ(got.size(), ids.size() * kK);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], kWeight[ids[i / kK] * kK + i % kK]);  // exact in bf16
      }
      continue;
    }
    const std::vector<float> ref = Reference(*x);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
  }
  ASSERT_TRUE((*stream)->Call("m", ids).ok());

  // A local error sends nothing and leaves the stream usable; the server's ends it.
  NdArray f64{ElementType::kF64, {1, kK}, std::vector<uint8_t>(8 * kK, 0)};
  EXPECT_EQ((*stream)->Write("m", f64).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {3};
  const absl::Status status = (*stream)->Call("m", bad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "token id out of range [0, 3)");
  EXPECT_EQ((*stream)->Write("m", ids).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Read().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Finish().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ForwardStreamFinishesCleanlyAndAbandonedOnesAreCancelled) {
  absl::StatusOr<std::unique_ptr<ForwardStream>> stream = client_->OpenForwardStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Call("m", FromFloats(DType::kF32, {1, kK}, RandomX(1, 70))).ok());
  EXPECT_TRUE((*stream)->Finish().ok());
  EXPECT_TRUE((*stream)->Finish().ok());  // the recorded status again

  absl::StatusOr<std::unique_ptr<ForwardStream>> abandoned = client_->OpenForwardStream();
  ASSERT_TRUE(abandoned.ok());
  ASSERT_TRUE((*abandoned)->Write("m", std::vector<int32_t>{0}).ok());
  abandoned->reset();  // no Finish(): the destructor cancels
  EXPECT_TRUE(client_->GetWeight("w").ok());
}

TEST_F(ClientTest, AbandonedStreamIsCancelledCleanly) {
  absl::StatusOr<std::unique_ptr<MatMulStream>> stream = client_->OpenMatMulStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Write("w", FromFloats(DType::kF32, {1, kK}, RandomX(1, 40))).ok());
  stream->reset();  // no Finish(): the destructor cancels
  EXPECT_TRUE(client_->GetWeight("w").ok());
}

}  // namespace
}  // namespace qmm
