#include "server/metrics_exposer.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "tests/server/exposition.h"
#include "tests/server/http_get.h"
#include "tests/server/promtool.h"

namespace qmm {
namespace {

std::shared_ptr<Metrics> MakeMetrics() {
  MetricsOptions options;
  options.build = {"0.0.1", "deadbeef", "cpu", "test"};
  return std::make_shared<Metrics>(options);
}

TEST(MetricsExposerTest, ServesTheMetricsOverHttp) {
  std::shared_ptr<Metrics> metrics = MakeMetrics();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  EXPECT_GT(port, 0);

  metrics->RecordRequest(RpcMethod::kMatMul, absl::StatusCode::kOk, 0.002);
  metrics->RecordRequest(RpcMethod::kMatMul, absl::StatusCode::kNotFound, 0.0001);
  metrics->RecordBatch(5, 2);
  absl::StatusOr<testing::HttpResponse> response = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_TRUE(absl::StrContains(response->headers, "Content-Type: text/plain"))
      << response->headers;
  absl::StatusOr<testing::Exposition> e = testing::ParseExposition(response->body);
  ASSERT_TRUE(e.ok()) << e.status() << "\n" << response->body;
  EXPECT_EQ(e->Value("qmm_requests_total", {{"method", "MatMul"}, {"code", "OK"}}), 1);
  EXPECT_EQ(e->Value("qmm_requests_total", {{"method", "MatMul"}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(e->Value("qmm_request_duration_seconds_count", {{"method", "MatMul"}}), 2);
  EXPECT_EQ(e->Value("qmm_batch_rows_sum"), 5);
  EXPECT_TRUE(e->Value("process_open_fds").has_value());
  // prometheus-cpp adds its own exporter metrics to the same page.
  EXPECT_TRUE(e->type.count("exposer_scrapes_total"));

  if (testing::FindOnPath("promtool")) {
    const absl::Status lint = testing::PromtoolCheckMetrics(response->body);
    EXPECT_TRUE(lint.ok()) << lint;
  }
}

TEST(MetricsExposerTest, ScrapesAfterTheMetricsAreGoneStillAnswer) {
  std::shared_ptr<Metrics> metrics = MakeMetrics();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  metrics.reset();
  absl::StatusOr<testing::HttpResponse> response = testing::HttpGet((*exposer)->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_FALSE(absl::StrContains(response->body, "qmm_"));
}

TEST(MetricsExposerTest, MalformedAddressesAreInvalidArgument) {
  std::shared_ptr<Metrics> metrics = MakeMetrics();
  for (const char* address :
       {"", "9464", ":9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536",
        "127.0.0.1:123456", "127.0.0.1:-1", "127.0.0.1:9464s", "127.0.0.1:9464r",
        "127.0.0.1:0,127.0.0.1:0", "[::1]:9464", "local host:9464", "127.0.0.1:+80"}) {
    absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
        MetricsExposer::Start(address, metrics);
    ASSERT_FALSE(exposer.ok()) << address;
    EXPECT_EQ(exposer.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_TRUE(absl::StrContains(exposer.status().message(), "HOST:PORT")) << exposer.status();
  }
}

TEST(MetricsExposerTest, UnbindableAddressesAreUnavailable) {
  std::shared_ptr<Metrics> metrics = MakeMetrics();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> first =
      MetricsExposer::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  // 192.0.2.1 (TEST-NET-1) is never a local address.
  for (const std::string& address :
       {taken, std::string("192.0.2.1:9464"), std::string("no-such-host.invalid:9464")}) {
    absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
        MetricsExposer::Start(address, metrics);
    ASSERT_FALSE(exposer.ok()) << address;
    EXPECT_EQ(exposer.status().code(), absl::StatusCode::kUnavailable) << exposer.status();
    EXPECT_TRUE(absl::StrContains(exposer.status().message(), address)) << exposer.status();
  }
}

TEST(MetricsExposerTest, HostNamesAreAccepted) {
  std::shared_ptr<Metrics> metrics = MakeMetrics();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("localhost:0", metrics);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  absl::StatusOr<testing::HttpResponse> response = testing::HttpGet((*exposer)->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

}  // namespace
}  // namespace qmm
