// The metrics of a whole in-process server: traffic (successes and every kind of error)
// through gRPC, then a scrape of /metrics over HTTP whose counts must match what the
// clients saw, and `promtool check metrics` on that real scrape.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "tests/server/exposition.h"
#include "tests/server/http_get.h"
#include "tests/server/promtool.h"
#include "tests/server/server_test_util.h"

namespace qmm::testing {
namespace {

constexpr int64_t kN = 64;
constexpr int64_t kK = 256;

class MetricsServerTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}, int workers = 2) {
    options.metrics_listen = "127.0.0.1:0";
    server_ = StartTestServer(options, workers);
    ASSERT_NE(server_.server, nullptr);
    ASSERT_GT(server_.server->metrics_port(), 0);
  }

  Exposition Scrape() {
    absl::StatusOr<HttpResponse> response = HttpGet(server_.server->metrics_port(), "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    EXPECT_EQ(response->status, 200);
    last_scrape_ = response->body;
    absl::StatusOr<Exposition> parsed = ParseExposition(response->body);
    EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << response->body;
    return parsed.ok() ? *std::move(parsed) : Exposition();
  }

  // Uploads an N x K weight of `scheme` quantized from random floats; returns the payload.
  std::string UploadWeight(const std::string& name, v1::Scheme scheme = v1::SCHEME_W8A16) {
    const std::string payload = ToBytes(DType::kF32, RandomFloats(kN * kK, 3));
    const grpc::Status status = Upload(
        *server_.stub,
        MakeHeader(name, scheme, kN, kK, 0, v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
        payload);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return payload;
  }

  grpc::StatusCode MatMul(const std::string& weight, int64_t m, int64_t k = kK) {
    v1::MatMulResponse response;
    grpc::ClientContext context;
    return server_.stub
        ->MatMul(
            &context,
            MakeMatMulRequest(weight, DType::kF32, m, k, RandomFloats(m * k, 9), v1::DTYPE_FP32),
            &response)
        .error_code();
  }

  TestServer server_;
  std::string last_scrape_;
};

double Requests(const Exposition& e, const std::string& method, const std::string& code) {
  return e.Value("qmm_requests_total", {{"method", method}, {"code", code}}).value_or(0);
}

TEST_F(MetricsServerTest, CountsMatchTheTraffic) {
  Start();
  const std::string payload = UploadWeight("w");
  int64_t rows = 0;
  constexpr int kOk = 12;
  for (int i = 0; i < kOk; ++i) {
    const int64_t m = 1 + (i * 7) % 17;
    ASSERT_EQ(MatMul("w", m), grpc::StatusCode::OK);
    rows += m;
  }
  EXPECT_EQ(MatMul("nope", 1), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(MatMul("nope", 2), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(MatMul("w", 1, kK + 1), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MatMul("bad name!", 1), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext context;
    v1::GetWeightRequest request;
    request.set_name("nope");
    v1::WeightInfo info;
    EXPECT_EQ(server_.stub->GetWeight(&context, request, &info).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::ListWeightsResponse list;
    EXPECT_TRUE(server_.stub->ListWeights(&context, {}, &list).ok());
  }
  {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    EXPECT_TRUE(server_.stub->ServerInfo(&context, {}, &info).ok());
  }
  // A stream of three requests, then a bad one that ends it.
  int64_t stream_rows = 0;
  {
    grpc::ClientContext context;
    auto stream = server_.stub->MatMulStream(&context);
    for (int64_t m : {2, 5, 1}) {
      ASSERT_TRUE(stream->Write(
          MakeMatMulRequest("w", DType::kF32, m, kK, RandomFloats(m * kK, 4), v1::DTYPE_FP32)));
      v1::MatMulResponse response;
      ASSERT_TRUE(stream->Read(&response));
      stream_rows += m;
    }
    ASSERT_TRUE(stream->Write(
        MakeMatMulRequest("nope", DType::kF32, 1, kK, RandomFloats(kK, 4), v1::DTYPE_FP32)));
    stream->WritesDone();
    v1::MatMulResponse response;
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }

  const Exposition e = Scrape();
  EXPECT_EQ(Requests(e, "UploadWeight", "OK"), 1);
  EXPECT_EQ(Requests(e, "MatMul", "OK"), kOk);
  EXPECT_EQ(Requests(e, "MatMul", "NOT_FOUND"), 2);
  EXPECT_EQ(Requests(e, "MatMul", "INVALID_ARGUMENT"), 2);
  EXPECT_EQ(Requests(e, "GetWeight", "NOT_FOUND"), 1);
  EXPECT_EQ(Requests(e, "ListWeights", "OK"), 1);
  EXPECT_EQ(Requests(e, "ServerInfo", "OK"), 1);
  EXPECT_EQ(Requests(e, "MatMulStream", "OK"), 3);
  EXPECT_EQ(Requests(e, "MatMulStream", "NOT_FOUND"), 1);
  EXPECT_EQ(Requests(e, "DeleteWeight", "OK"), 0);

  // Every finished request was timed, under its method.
  for (const char* method : {"UploadWeight", "GetWeight", "ListWeights", "DeleteWeight",
                             "ServerInfo", "MatMul", "MatMulStream"}) {
    EXPECT_EQ(e.Value("qmm_request_duration_seconds_count", {{"method", method}}),
              e.Sum("qmm_requests_total", {{"method", method}}))
        << method;
    EXPECT_EQ(e.Value("qmm_request_duration_seconds_bucket", {{"method", method}, {"le", "+Inf"}}),
              e.Sum("qmm_requests_total", {{"method", method}}))
        << method;
  }
  // Queue, compute and batch: once per request that reached a worker.
  EXPECT_EQ(e.Value("qmm_queue_duration_seconds_count", {{"method", "MatMul"}}), kOk);
  EXPECT_EQ(e.Value("qmm_queue_duration_seconds_count", {{"method", "MatMulStream"}}), 3);
  EXPECT_EQ(e.Value("qmm_compute_duration_seconds_count", {{"scheme", "w8a16"}}), kOk + 3);
  EXPECT_EQ(e.Sum("qmm_compute_duration_seconds_count"), kOk + 3);
  EXPECT_EQ(e.Value("qmm_batch_rows_count"), kOk + 3);
  EXPECT_EQ(e.Value("qmm_batch_rows_sum"), rows + stream_rows);
  EXPECT_EQ(e.Value("qmm_batch_requests_sum"), kOk + 3);
  EXPECT_EQ(e.Value("qmm_queue_rows"), 0);
  EXPECT_EQ(e.Value("qmm_queue_requests"), 0);
  EXPECT_GT(e.Value("qmm_queue_limit_requests").value_or(0), 0);
  // One transfer each way per launch: the CPU backend's conversions into and out of its
  // fp32 buffers (of zero length here, fp32 throughout, but observed all the same).
  EXPECT_EQ(e.Value("qmm_transfer_duration_seconds_count", {{"direction", "h2d"}}), kOk + 3);
  EXPECT_EQ(e.Value("qmm_transfer_duration_seconds_count", {{"direction", "d2h"}}), kOk + 3);
  // And the host's share of each launch, which cannot be zero: it took the batch.
  EXPECT_EQ(e.Value("qmm_launch_host_duration_seconds_count"), kOk + 3);
  EXPECT_GT(e.Value("qmm_launch_host_duration_seconds_sum").value_or(0), 0);

  EXPECT_EQ(e.Value("qmm_upload_bytes_total"), static_cast<double>(payload.size()));
  EXPECT_EQ(e.Value("qmm_weights"), 1);
  EXPECT_GT(e.Value("qmm_weight_bytes", {{"scheme", "w8a16"}}).value_or(0), kN * kK - 1);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "w4a16"}}), 0);
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "used"}}),
            e.Value("qmm_weight_bytes", {{"scheme", "w8a16"}}));
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "limit"}}),
            static_cast<double>(server_.server->memory_limit_bytes()));
  EXPECT_GT(e.Value("qmm_device_memory_bytes", {{"kind", "total"}}).value_or(0), 0);
  EXPECT_EQ(e.Sum("qmm_build_info", {{"backend", "cpu"}}), 1);
  EXPECT_GT(e.Value("process_resident_memory_bytes").value_or(0), 0);
  // Weight names stay out of the metrics unless --metrics_per_weight.
  EXPECT_EQ(last_scrape_.find("weight=\""), std::string::npos);
}

TEST_F(MetricsServerTest, RealScrapePassesPromtool) {
  if (!FindOnPath("promtool")) GTEST_SKIP() << "promtool is not installed";
  Start();
  UploadWeight("w");
  ASSERT_EQ(MatMul("w", 4), grpc::StatusCode::OK);
  ASSERT_EQ(MatMul("nope", 4), grpc::StatusCode::NOT_FOUND);
  Scrape();
  const absl::Status lint = PromtoolCheckMetrics(last_scrape_);
  EXPECT_TRUE(lint.ok()) << lint;
}

TEST_F(MetricsServerTest, DeletesAndMemoryRejectionsAreCounted) {
  ServerOptions options;
  options.memory_limit_bytes = kN * kK + kN * 64;  // one W8A16 weight, not two
  Start(options);
  UploadWeight("a");
  const std::string payload = ToBytes(DType::kF32, RandomFloats(kN * kK, 3));
  EXPECT_EQ(Upload(*server_.stub,
                   MakeHeader("b", v1::SCHEME_W8A16, kN, kK, 0, v1::SOURCE_ENCODING_FLOAT,
                              v1::DTYPE_FP32, payload),
                   payload)
                .error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  {
    grpc::ClientContext context;
    v1::DeleteWeightRequest request;
    request.set_name("a");
    v1::DeleteWeightResponse response;
    EXPECT_TRUE(server_.stub->DeleteWeight(&context, request, &response).ok());
  }
  const Exposition e = Scrape();
  EXPECT_EQ(e.Value("qmm_rejected_requests_total", {{"reason", "memory_budget"}}), 1);
  EXPECT_EQ(Requests(e, "UploadWeight", "RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(Requests(e, "DeleteWeight", "OK"), 1);
  EXPECT_EQ(e.Value("qmm_weights"), 0);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "w8a16"}}), 0);
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "used"}}), 0);
}

// Under a queue of one request and one worker, some of many concurrent calls are
// refused; each refusal is counted once as queue_full, and nothing is left queued.
TEST_F(MetricsServerTest, QueueFullRejectionsMatchWhatCallersSaw) {
  ServerOptions options;
  options.max_queued_requests = 1;
  Start(options, /*workers=*/1);
  UploadWeight("w");
  constexpr int kCallers = 16;
  std::atomic<int> exhausted{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        const grpc::StatusCode code = MatMul("w", 64);
        if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
        if (code == grpc::StatusCode::OK) ++ok;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(ok + exhausted, kCallers * 4);
  const Exposition e = Scrape();
  EXPECT_EQ(e.Value("qmm_rejected_requests_total", {{"reason", "queue_full"}}), exhausted.load());
  EXPECT_EQ(Requests(e, "MatMul", "RESOURCE_EXHAUSTED"), exhausted.load());
  EXPECT_EQ(Requests(e, "MatMul", "OK"), ok.load());
  EXPECT_EQ(e.Value("qmm_batch_rows_count"), ok.load());
  EXPECT_EQ(e.Value("qmm_queue_requests"), 0);
  EXPECT_EQ(e.Value("qmm_queue_rows"), 0);
  EXPECT_EQ(e.Value("qmm_queue_limit_requests"), 1);
}

// Concurrent callers against one weight on one worker share launches; the batch
// histograms show it and agree with the batcher's own statistics.
TEST_F(MetricsServerTest, BatchHistogramsShowBatchingUnderConcurrency) {
  ServerOptions options;
  options.max_queue_delay = absl::Milliseconds(20);  // the first request waits for company
  Start(options, /*workers=*/1);
  UploadWeight("w");
  constexpr int kCallers = 16;
  constexpr int kRequests = 4;
  constexpr int64_t kRows = 2;
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < kRequests; ++i) ok += MatMul("w", kRows) == grpc::StatusCode::OK;
    });
  }
  for (std::thread& t : callers) t.join();
  ASSERT_EQ(ok.load(), kCallers * kRequests);

  const Exposition e = Scrape();
  const BatchStats stats = server_.server->batcher().stats();
  EXPECT_EQ(e.Value("qmm_batch_requests_count"), stats.launches);
  EXPECT_EQ(e.Value("qmm_batch_rows_count"), stats.launches);
  EXPECT_EQ(e.Value("qmm_batch_requests_sum"), kCallers * kRequests);
  EXPECT_EQ(e.Value("qmm_batch_rows_sum"), kCallers * kRequests * kRows);
  // Launches of more than one request are those above the le="1" bucket.
  const double single = *e.Value("qmm_batch_requests_bucket", {{"le", "1"}});
  EXPECT_EQ(*e.Value("qmm_batch_requests_count") - single, stats.multi_request_launches);
  EXPECT_GT(stats.multi_request_launches, 0);
  EXPECT_LT(*e.Value("qmm_batch_requests_count"), kCallers * kRequests);
  EXPECT_EQ(e.Value("qmm_queue_duration_seconds_count", {{"method", "MatMul"}}),
            kCallers * kRequests);
  EXPECT_EQ(e.Sum("qmm_compute_duration_seconds_count"), stats.launches);
}

TEST_F(MetricsServerTest, PerWeightSeriesFollowUploadsAndDeletes) {
  ServerOptions options;
  options.metrics_per_weight = true;
  Start(options);
  UploadWeight("alpha");
  UploadWeight("beta", v1::SCHEME_W4A16);
  ASSERT_EQ(MatMul("alpha", 3), grpc::StatusCode::OK);
  ASSERT_EQ(MatMul("alpha", 5), grpc::StatusCode::OK);
  Exposition e = Scrape();
  EXPECT_EQ(e.Value("qmm_weight_requests_total", {{"weight", "alpha"}}), 2);
  EXPECT_EQ(e.Value("qmm_weight_rows_total", {{"weight", "alpha"}}), 8);
  EXPECT_GT(e.Value("qmm_weight_compute_seconds_total", {{"weight", "alpha"}}).value_or(0), 0);
  EXPECT_EQ(e.Value("qmm_weight_requests_total", {{"weight", "beta"}}), 0);
  EXPECT_GT(e.Value("qmm_weight_bytes", {{"scheme", "w4a16"}}).value_or(0), 0);
  {
    grpc::ClientContext context;
    v1::DeleteWeightRequest request;
    request.set_name("alpha");
    v1::DeleteWeightResponse response;
    EXPECT_TRUE(server_.stub->DeleteWeight(&context, request, &response).ok());
  }
  e = Scrape();
  EXPECT_FALSE(e.Value("qmm_weight_requests_total", {{"weight", "alpha"}}).has_value());
  EXPECT_EQ(e.Value("qmm_weight_requests_total", {{"weight", "beta"}}), 0);
}

TEST_F(MetricsServerTest, BadMetricsAddressFailsStart) {
  for (const char* address : {"127.0.0.1", "[::1]:0"}) {
    BackendOptions backend_options;
    backend_options.kind = BackendOptions::Kind::kCpu;
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics_listen = address;
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(backend_options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    QmmServer server(*std::move(backend), options);
    const absl::StatusOr<int> port = server.Start();
    ASSERT_FALSE(port.ok()) << address;
    EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument) << port.status();
  }
}

TEST_F(MetricsServerTest, MetricsOffServesNothing) {
  ServerOptions options;  // metrics_listen empty
  TestServer server = StartTestServer(options);
  ASSERT_NE(server.server, nullptr);
  EXPECT_EQ(server.server->metrics_port(), 0);
}

}  // namespace
}  // namespace qmm::testing
