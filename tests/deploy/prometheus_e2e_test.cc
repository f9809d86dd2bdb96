// A real Prometheus (the Debian `prometheus` package) scraping a real qmm-server on
// loopback: after traffic, the latency quantile and the batch-size average that the
// dashboard shows come back through Prometheus's HTTP API with sane values, the alert
// rules load, and every dashboard query runs. Skipped where prometheus is not installed.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "tests/deploy/child_process.h"
#include "tests/deploy/promql.h"
#include "tests/server/http_get.h"
#include "tests/server/promtool.h"
#include "tests/server/server_test_util.h"

namespace qmm::testing {
namespace {

constexpr int64_t kN = 96;
constexpr int64_t kK = 256;
constexpr int64_t kRows = 3;  // per request
constexpr int kCallers = 4;
constexpr int kRequestsPerCaller = 40;
constexpr int kNotFound = 5;
constexpr int kInvalid = 3;

// A port that was free a moment ago (Prometheus cannot report the one it bound).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

std::string ReadSource(const std::string& relative) {
  std::ifstream in(absl::StrCat(QMM_SOURCE_DIR, "/", relative));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::optional<std::string> prometheus = FindOnPath("prometheus");
    if (!prometheus) GTEST_SKIP() << "prometheus is not installed (Debian package prometheus)";
    dir_ = absl::StrCat(::testing::TempDir(), "/qmm-prometheus-", getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(std::filesystem::create_directories(dir_)) << dir_;

    absl::StatusOr<std::unique_ptr<ChildProcess>> server = ChildProcess::Start(
        QMM_SERVER_PATH,
        {"--listen=127.0.0.1:0", "--backend=cpu", "--workers=2", "--metrics_listen=127.0.0.1:0"},
        dir_ + "/qmm-server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<std::string> grpc_address =
        server_->WaitForOutput(R"(qmm-server listening on (\S+:\d+))", absl::Seconds(60));
    ASSERT_TRUE(grpc_address.ok()) << grpc_address.status();
    absl::StatusOr<std::string> metrics_address = server_->WaitForOutput(
        R"(qmm-server metrics on http://(\S+:\d+)/metrics)", absl::Seconds(10));
    ASSERT_TRUE(metrics_address.ok()) << metrics_address.status();

    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel(*grpc_address, grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Qmm::NewStub(channel_);

    // Scrapes every second, with qmm's own alert rules loaded as an operator would.
    prometheus_port_ = FreePort();
    ASSERT_GT(prometheus_port_, 0);
    std::ofstream(dir_ + "/prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "rule_files:\n  - " << QMM_SOURCE_DIR << "/deploy/prometheus/qmm-rules.yml\n"
        << "scrape_configs:\n  - job_name: qmm\n    static_configs:\n"
        << "      - targets: [\"" << *metrics_address << "\"]\n";
    absl::StatusOr<std::unique_ptr<ChildProcess>> started = ChildProcess::Start(
        *prometheus,
        {"--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
         absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port_), "--log.level=warn"},
        dir_ + "/prometheus.log");
    ASSERT_TRUE(started.ok()) << started.status();
    prometheus_ = *std::move(started);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (true) {
      absl::StatusOr<HttpResponse> ready = HttpGet(prometheus_port_, "/-/ready", absl::Seconds(2));
      if (ready.ok() && ready->status == 200) break;
      ASSERT_LT(absl::Now(), deadline) << "prometheus is not ready:\n" << prometheus_->Output();
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  void TearDown() override {
    prometheus_.reset();
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // GETs /api/v1/PATH and returns `data`, failing the test on any error.
  nlohmann::json Api(const std::string& path_and_query) {
    absl::StatusOr<HttpResponse> response =
        HttpGet(prometheus_port_, "/api/v1/" + path_and_query, absl::Seconds(10));
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return nullptr;
    const nlohmann::json body = nlohmann::json::parse(response->body, nullptr, false);
    EXPECT_FALSE(body.is_discarded()) << response->body;
    EXPECT_EQ(response->status, 200) << path_and_query << ": " << response->body;
    if (body.is_discarded() || body.value("status", "") != "success") {
      ADD_FAILURE() << path_and_query << ": " << response->body;
      return nullptr;
    }
    return body["data"];
  }

  // The single value of an instant query; NaN when the result is empty.
  double Query(const std::string& promql) {
    const nlohmann::json data = Api("query?query=" + UrlEncode(promql));
    if (data.is_null() || data["result"].empty()) return std::nan("");
    EXPECT_EQ(data["result"].size(), 1u) << promql << ": " << data.dump();
    return std::stod(data["result"][0]["value"][1].get<std::string>());
  }

  // Polls until `promql` returns `want` (Prometheus has scraped what we expect).
  void WaitForValue(const std::string& promql, double want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    double got = Query(promql);
    while (got != want && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(250));
      got = Query(promql);
    }
    ASSERT_EQ(got, want) << promql << "\nqmm-server:\n"
                         << server_->Output() << "\nprometheus:\n"
                         << prometheus_->Output();
  }

  std::string dir_;
  std::unique_ptr<ChildProcess> server_;
  std::unique_ptr<ChildProcess> prometheus_;
  int prometheus_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Qmm::Stub> stub_;
};

TEST_F(PrometheusTest, LatencyQuantileAndBatchSizeThroughPrometheus) {
  // A scrape before any traffic, so that rate() sees every request as an increase.
  WaitForValue(R"(up{job="qmm"})", 1);

  const std::vector<float> weight = RandomFloats(kN * kK, 5);
  const std::string payload = ToBytes(DType::kF32, weight);
  const grpc::Status uploaded =
      Upload(*stub_,
             MakeHeader("layer0", v1::SCHEME_W8A16, kN, kK, 0, v1::SOURCE_ENCODING_FLOAT,
                        v1::DTYPE_FP32, payload),
             payload);
  ASSERT_TRUE(uploaded.ok()) << uploaded.error_message();

  absl::Mutex mu;
  absl::Duration slowest;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < kRequestsPerCaller; ++i) {
        const v1::MatMulRequest request =
            MakeMatMulRequest("layer0", DType::kF32, kRows, kK,
                              RandomFloats(kRows * kK, 100 * c + i), v1::DTYPE_FP32);
        v1::MatMulResponse response;
        grpc::ClientContext context;
        const absl::Time start = absl::Now();
        const grpc::Status status = stub_->MatMul(&context, request, &response);
        const absl::Duration took = absl::Now() - start;
        if (!status.ok()) ++failures;
        absl::MutexLock lock(&mu);
        slowest = std::max(slowest, took);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  ASSERT_EQ(failures.load(), 0);
  for (int i = 0; i < kNotFound; ++i) {
    v1::MatMulResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(stub_
                  ->MatMul(&context,
                           MakeMatMulRequest("missing", DType::kF32, 1, kK, RandomFloats(kK, i),
                                             v1::DTYPE_FP32),
                           &response)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  for (int i = 0; i < kInvalid; ++i) {
    v1::MatMulResponse response;
    grpc::ClientContext context;
    // K one short of the weight's.
    EXPECT_EQ(stub_
                  ->MatMul(&context,
                           MakeMatMulRequest("layer0", DType::kF32, 1, kK - 1,
                                             RandomFloats(kK - 1, i), v1::DTYPE_FP32),
                           &response)
                  .error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  constexpr int kOk = kCallers * kRequestsPerCaller;
  WaitForValue(R"(qmm_requests_total{method="MatMul", code="OK"})", kOk);
  WaitForValue(R"(qmm_requests_total{method="MatMul", code="INVALID_ARGUMENT"})", kInvalid);
  EXPECT_EQ(Query(R"(qmm_requests_total{method="MatMul", code="NOT_FOUND"})"), kNotFound);
  EXPECT_EQ(Query(R"(qmm_request_duration_seconds_count{method="MatMul"})"),
            kOk + kNotFound + kInvalid);
  EXPECT_EQ(Query(R"(qmm_requests_total{method="UploadWeight", code="OK"})"), 1);
  EXPECT_EQ(Query("qmm_weights"), 1);
  EXPECT_EQ(Query("qmm_upload_bytes_total"), static_cast<double>(payload.size()));
  EXPECT_GT(Query(R"(qmm_device_memory_bytes{kind="used"})"), 0);

  // p99 of the server-side latency: positive, at least the median, and no more than the
  // bucket bound above the slowest latency a caller saw (the server's share of it).
  const double p99 = Query(
      R"(histogram_quantile(0.99, sum by (le) (rate(qmm_request_duration_seconds_bucket{method="MatMul"}[1m]))))");
  const double p50 = Query(
      R"(histogram_quantile(0.5, sum by (le) (rate(qmm_request_duration_seconds_bucket{method="MatMul"}[1m]))))");
  const std::vector<double>& bounds = DurationBuckets();
  const double slowest_s = absl::ToDoubleSeconds(slowest);
  const auto above = std::lower_bound(bounds.begin(), bounds.end(), slowest_s);
  ASSERT_NE(above, bounds.end()) << "a request took " << slowest_s << " s";
  EXPECT_TRUE(std::isfinite(p99)) << p99;
  EXPECT_GT(p99, 0);
  EXPECT_GE(p99, p50);
  EXPECT_LE(p99, *above) << "slowest client latency " << slowest_s << " s";

  // Rows per launch: every request has kRows rows; requests may share a launch, at most
  // all concurrent callers' together.
  const double batch_rows =
      Query("sum(rate(qmm_batch_rows_sum[1m])) / sum(rate(qmm_batch_rows_count[1m]))");
  EXPECT_GE(batch_rows, kRows);
  EXPECT_LE(batch_rows, kRows * kCallers);
  const double batch_requests =
      Query("sum(rate(qmm_batch_requests_sum[1m])) / sum(rate(qmm_batch_requests_count[1m]))");
  EXPECT_NEAR(batch_rows / batch_requests, kRows, 1e-6);

  // Compute time was recorded once per launch, under the weight's scheme.
  EXPECT_EQ(Query(R"(qmm_compute_duration_seconds_count{scheme="w8a16"})"),
            Query("qmm_batch_rows_count"));
}

TEST_F(PrometheusTest, AlertRulesLoadAndDashboardQueriesRun) {
  WaitForValue(R"(up{job="qmm"})", 1);
  const nlohmann::json rules = Api("rules");
  ASSERT_FALSE(rules.is_null());
  int loaded = 0;
  for (const nlohmann::json& group : rules["groups"]) {
    for (const nlohmann::json& rule : group["rules"]) {
      ++loaded;
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
    }
  }
  EXPECT_EQ(loaded, static_cast<int>(
                        RuleExpressions(ReadSource("deploy/prometheus/qmm-rules.yml")).size()));

  const absl::StatusOr<std::vector<std::string>> queries =
      DashboardQueries(ReadSource("deploy/grafana/qmm-dashboard.json"));
  ASSERT_TRUE(queries.ok()) << queries.status();
  for (const std::string& query : *queries) {
    SCOPED_TRACE(query);
    Api("query?query=" + UrlEncode(query));
  }
  // The build-info panel and the instance picker find this server.
  EXPECT_EQ(Query(R"(count(qmm_build_info{backend="cpu"}))"), 1);
}

}  // namespace
}  // namespace qmm::testing
