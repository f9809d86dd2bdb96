// qmmctl bench against an in-process fake of the service that answers every MatMul from
// the float64 reference of a random weight, except that it refuses every 7th request and
// corrupts every 5th answer: the bench must count exactly those errors and mismatches,
// through unary calls and through streams (which the errors end), and write them as JSON.
#include "client/qmmctl/bench.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/qmmctl/verify.h"
#include "gtest/gtest.h"
#include "kernels/format.h"
#include "kernels/reference.h"
#include "nlohmann/json.hpp"

namespace qmm::ctl {
namespace {

constexpr int64_t kN = 24;
constexpr int64_t kK = 64;
constexpr uint64_t kWeightSeed = 5;

class FakeQmm final : public v1::Qmm::Service {
 public:
  FakeQmm()
      : packed_(*PackRandomWeight(Scheme::kW8A16, {kN, kK, 0}, kWeightSeed)),
        view_(*ViewPacked(Scheme::kW8A16, {kN, kK, 0}, packed_)) {}

  // Refuse every 7th request and corrupt every 5th answer.
  void set_faults(bool faults) { faults_ = faults; }
  int64_t matmuls() const { return count_; }

  grpc::Status GetWeight(grpc::ServerContext*, const v1::GetWeightRequest* request,
                         v1::WeightInfo* response) override {
    if (request->name() != "w") return {grpc::NOT_FOUND, "weight \"" + request->name() + "\""};
    response->set_name("w");
    response->set_scheme(v1::SCHEME_W8A16);
    response->set_n(kN);
    response->set_k(kK);
    return grpc::Status::OK;
  }

  grpc::Status ServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                          v1::ServerInfoResponse* response) override {
    response->set_backend("cpu");
    response->mutable_limits()->set_max_rows(16);
    response->mutable_batching()->set_max_batch_rows(64);
    response->mutable_batching()->set_launches(count_);
    response->mutable_batching()->set_requests(count_);
    return grpc::Status::OK;
  }

  grpc::Status MatMul(grpc::ServerContext*, const v1::MatMulRequest* request,
                      v1::MatMulResponse* response) override {
    return Answer(*request, response);
  }

  grpc::Status MatMulStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::MatMulResponse, v1::MatMulRequest>* stream) override {
    v1::MatMulRequest request;
    while (stream->Read(&request)) {
      v1::MatMulResponse response;
      if (grpc::Status status = Answer(request, &response); !status.ok()) return status;
      if (!stream->Write(response)) break;
    }
    return grpc::Status::OK;
  }

 private:
  grpc::Status Answer(const v1::MatMulRequest& request, v1::MatMulResponse* response) {
    const int64_t number = ++count_;
    if (faults_ && number % 7 == 0) return {grpc::RESOURCE_EXHAUSTED, "queue is full"};
    const int64_t m = request.input().shape(0);
    std::vector<float> x(m * kK);
    EXPECT_EQ(request.input().dtype(), v1::DTYPE_FP32);
    EXPECT_EQ(request.input().data().size(), x.size() * 4);
    std::memcpy(x.data(), request.input().data().data(), x.size() * 4);
    const std::vector<double> y = ReferenceMatMul(view_, x.data(), m);
    std::vector<float> out(y.begin(), y.end());
    if (faults_ && number % 5 == 0) out[out.size() / 2] += 1.0f;
    v1::Tensor* t = response->mutable_output();
    t->set_dtype(v1::DTYPE_FP32);
    t->add_shape(m);
    t->add_shape(kN);
    t->set_data(out.data(), out.size() * 4);
    response->set_compute_ns(1000 + number);
    return grpc::Status::OK;
  }

  const std::vector<uint8_t> packed_;
  const PackedWeight view_;
  std::atomic<bool> faults_{true};
  std::atomic<int64_t> count_{0};
};

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    connection_.server = "127.0.0.1:" + std::to_string(port);
    connection_.call_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(connection_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    server_->Shutdown();
  }

  static BenchOptions Options() {
    BenchOptions o;
    o.weight = "w";
    o.concurrency = 4;
    o.requests = 70;
    o.rows = 3;
    o.inputs = 5;
    o.verify_seed = kWeightSeed;
    return o;
  }

  static nlohmann::json ReadJson(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  FakeQmm fake_;
  std::unique_ptr<grpc::Server> server_;
  ClientOptions connection_;
  std::unique_ptr<Client> client_;
};

TEST_F(BenchTest, UnaryCallsCountEveryErrorAndMismatchAndWriteThemAsJson) {
  BenchOptions o = Options();
  o.json_path = ::testing::TempDir() + "/bench_test_unary.json";
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_FALSE(*passed);
  EXPECT_EQ(fake_.matmuls(), 70);

  const nlohmann::json j = ReadJson(o.json_path);
  ASSERT_TRUE(j.is_object());
  // Requests 7, 14, ..., 70 were refused; 5, 10, ... 65 (but 35) came back wrong.
  EXPECT_EQ(j["ok"], 60);
  EXPECT_EQ(j["errors"], 10);
  EXPECT_EQ(j["errors_by_code"]["RESOURCE_EXHAUSTED"], 10);
  EXPECT_EQ(j["verified"], 60);
  EXPECT_EQ(j["mismatches"], 12);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["latency_ms"]["count"], 60);
  EXPECT_GT(j["requests_per_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["rows_per_s"].get<double>(), 3 * j["requests_per_s"].get<double>());
  EXPECT_EQ(j["setup"]["concurrency"], 4);
  EXPECT_EQ(j["setup"]["channels"], 1);
  EXPECT_EQ(j["setup"]["scheme"], "w8a16");
  EXPECT_EQ(j["setup"]["requests"], 70);
  EXPECT_EQ(j["server_batching"]["launches"], 70);
  EXPECT_FALSE(j.contains("server_model"));  // the fake serves no ModelStatistics
  EXPECT_EQ(j["error_examples"]["RESOURCE_EXHAUSTED"], "queue is full");
  EXPECT_NE(j["first_mismatch"].get<std::string>().find("relative error"), std::string::npos);
  std::remove(o.json_path.c_str());
}

TEST(BenchChannelsTest, DefaultIsOnePer16InFlightAtMost16AndOneACaller) {
  EXPECT_EQ(DefaultChannels(1, 1), 1);
  EXPECT_EQ(DefaultChannels(16, 1), 1);
  EXPECT_EQ(DefaultChannels(17, 1), 2);
  EXPECT_EQ(DefaultChannels(64, 1), 4);
  EXPECT_EQ(DefaultChannels(255, 1), 16);
  EXPECT_EQ(DefaultChannels(256, 1), 16);
  EXPECT_EQ(DefaultChannels(4096, 16), 16);
  EXPECT_EQ(DefaultChannels(16, 4), 4);
  EXPECT_EQ(DefaultChannels(4, 16), 4);
  EXPECT_EQ(DefaultChannels(1, 16), 1);  // one caller uses one connection
  EXPECT_EQ(DefaultChannels(3, 16), 3);
  EXPECT_EQ(DefaultChannels(0, 1), 1);  // never fewer than one
}

TEST_F(BenchTest, StreamsReopenAfterAnErrorEndsThem) {
  BenchOptions o = Options();
  o.stream = true;
  o.channels = 2;
  o.json_path = ::testing::TempDir() + "/bench_test_stream.json";
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_FALSE(*passed);
  const nlohmann::json j = ReadJson(o.json_path);
  EXPECT_EQ(j["ok"], 60);
  EXPECT_EQ(j["errors_by_code"]["RESOURCE_EXHAUSTED"], 10);
  EXPECT_EQ(j["mismatches"], 12);
  EXPECT_EQ(j["setup"]["stream"], true);
  EXPECT_EQ(j["setup"]["channels"], 2);
  std::remove(o.json_path.c_str());
}

TEST_F(BenchTest, StreamsWithRequestsInFlightAnswerEachInOrder) {
  // Every answer is checked against its own input's reference: answers taken out of
  // order would be mismatches.
  fake_.set_faults(false);
  BenchOptions o = Options();
  o.stream = true;
  o.inflight = 6;
  o.requests = 90;
  o.json_path = ::testing::TempDir() + "/bench_test_inflight.json";
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_TRUE(*passed);
  EXPECT_EQ(fake_.matmuls(), 90);
  const nlohmann::json j = ReadJson(o.json_path);
  EXPECT_EQ(j["ok"], 90);
  EXPECT_EQ(j["verified"], 90);
  EXPECT_EQ(j["mismatches"], 0);
  EXPECT_EQ(j["latency_ms"]["count"], 90);
  EXPECT_EQ(j["setup"]["inflight"], 6);
  std::remove(o.json_path.c_str());
}

TEST_F(BenchTest, AFailedStreamFailsTheRequestsInFlightBehindIt) {
  // The fake ends a stream at every 7th request it reads; the requests written behind
  // that one get the stream's status, the rest go over a new stream.
  BenchOptions o = Options();
  o.stream = true;
  o.inflight = 4;
  o.json_path = ::testing::TempDir() + "/bench_test_inflight_faults.json";
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_FALSE(*passed);
  const nlohmann::json j = ReadJson(o.json_path);
  // The fake answered `read` requests, refused every 7th of them, corrupted every other
  // 5th; the requests it never read were behind a refused one.
  const int64_t read = fake_.matmuls();
  EXPECT_LE(read, 70);
  // Behind each refused request at most inflight - 1 = 3 others were written.
  EXPECT_LE(70 - read, 3 * (read / 7));
  int64_t corrupted = 0;
  for (int64_t number = 1; number <= read; ++number)
    corrupted += number % 5 == 0 && number % 7 != 0;
  EXPECT_EQ(j["ok"], read - read / 7);
  EXPECT_EQ(j["errors"], 70 - (read - read / 7));
  EXPECT_EQ(j["errors_by_code"]["RESOURCE_EXHAUSTED"], j["errors"]);
  EXPECT_EQ(j["verified"], j["ok"]);
  EXPECT_EQ(j["mismatches"], corrupted);
  std::remove(o.json_path.c_str());
}

TEST_F(BenchTest, ACleanTimedRunPasses) {
  fake_.set_faults(false);
  BenchOptions o = Options();
  o.requests.reset();
  o.duration = absl::Milliseconds(300);
  o.warmup = 2;
  o.stream = true;
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_TRUE(*passed);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_GT(fake_.matmuls(), 8);  // the warm-up alone sends 8
}

TEST_F(BenchTest, WithoutVerificationWrongResultsGoUnnoticed) {
  BenchOptions o = Options();
  o.verify_seed.reset();
  o.json_path = ::testing::TempDir() + "/bench_test_noverify.json";
  absl::StatusOr<bool> passed = RunBench(*client_, connection_, o);
  ASSERT_TRUE(passed.ok()) << passed.status();
  const nlohmann::json j = ReadJson(o.json_path);
  EXPECT_EQ(j["verified"], 0);
  EXPECT_EQ(j["mismatches"], 0);
  EXPECT_EQ(j["errors"], 10);
  std::remove(o.json_path.c_str());
}

TEST_F(BenchTest, MetadataErrorsComeBackBeforeAnyLoad) {
  BenchOptions o = Options();
  o.weight = "missing";
  EXPECT_EQ(RunBench(*client_, connection_, o).status().code(), absl::StatusCode::kNotFound);
  o = Options();
  o.rows = 17;  // the fake's max_rows is 16
  EXPECT_EQ(RunBench(*client_, connection_, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake_.matmuls(), 0);
}

TEST(CheckBenchOptionsTest, EachBoundIsChecked) {
  BenchOptions good;
  good.weight = "w";
  good.requests = 10;
  EXPECT_TRUE(CheckBenchOptions(good).ok());
  auto bad = [&](auto change) {
    BenchOptions o = good;
    change(o);
    return CheckBenchOptions(o).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](BenchOptions& o) { o.weight.clear(); }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.model = "m"; }));            // a weight and a model
  EXPECT_TRUE(bad([](BenchOptions& o) { o.verify_seeds["w"] = 1; }));  // a model's seeds
  EXPECT_TRUE(bad([](BenchOptions& o) {
    o.weight.clear();
    o.model = "m";
    o.verify_seed = 1;  // a weight's seed
  }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.concurrency = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.concurrency = 5000; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.duration = absl::Seconds(1); }));  // both bounds
  EXPECT_TRUE(bad([](BenchOptions& o) { o.requests.reset(); }));             // neither
  EXPECT_TRUE(bad([](BenchOptions& o) { o.requests = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) {
    o.requests.reset();
    o.duration = absl::Hours(25);
  }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.rows = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.inputs = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.warmup = -1; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.channels = -1; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.tolerance = -1; }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.inflight = 0; }));
  EXPECT_TRUE(bad([](BenchOptions& o) {
    o.stream = true;
    o.inflight = 17;
  }));
  EXPECT_TRUE(bad([](BenchOptions& o) { o.inflight = 2; }));  // unary calls
  // The local transport carries unary MatMul only.
  for (auto other : {+[](BenchOptions& o) { o.stream = true; },
                     +[](BenchOptions& o) { o.open_inference = true; }}) {
    EXPECT_TRUE(bad([other](BenchOptions& o) {
      o.local = "/tmp/s";
      other(o);
    }));
  }
  EXPECT_TRUE(bad([](BenchOptions& o) {
    o.local = "/tmp/s";
    o.local_spin = absl::Seconds(2);
  }));
  good.local = "/tmp/s";
  good.local_spin = absl::Microseconds(100);
  EXPECT_TRUE(CheckBenchOptions(good).ok());
  good.inflight = 16;  // a local caller's slots
  EXPECT_TRUE(CheckBenchOptions(good).ok());
  good.inflight = 17;
  EXPECT_FALSE(CheckBenchOptions(good).ok());
  good.inflight = 1;
  good.local.clear();
  good.stream = true;
  good.inflight = 16;
  EXPECT_TRUE(CheckBenchOptions(good).ok());
  good.stream = false;
  good.inflight = 1;
  // The Open Inference Protocol answers in the activations' dtype.
  EXPECT_TRUE(bad([](BenchOptions& o) {
    o.open_inference = true;
    o.output_dtype = DType::kF16;
  }));
  good.open_inference = true;
  good.output_dtype = DType::kF32;  // the activations' own
  EXPECT_TRUE(CheckBenchOptions(good).ok());
  good.weight.clear();
  good.model = "m";
  good.verify_seeds["w"] = 1;
  EXPECT_TRUE(CheckBenchOptions(good).ok());
}

}  // namespace
}  // namespace qmm::ctl
