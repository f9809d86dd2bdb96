#include "server/request_clock.h"

#include <thread>

#include "gtest/gtest.h"
#include "tests/server/exposition.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using ::qmm::testing::Scrape;

TEST(RequestClockTest, RecordsCodeAndDurationAndPassesTheStatusThrough) {
  Metrics metrics(MetricsOptions{});
  RequestClock clock(&metrics, RpcMethod::kGetWeight);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const grpc::Status status = clock.Finish(absl::NotFoundError("no weight \"w\""));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no weight \"w\"");
  const grpc::Status ok = clock.Finish(grpc::Status::OK);
  EXPECT_TRUE(ok.ok());

  const testing::Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "GetWeight"}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "GetWeight"}, {"code", "OK"}}), 1);
  EXPECT_EQ(e.Value("qmm_request_duration_seconds_count", {{"method", "GetWeight"}}), 2);
  // Both finishes measured from the same start, at least 30 ms before.
  EXPECT_GE(*e.Value("qmm_request_duration_seconds_sum", {{"method", "GetWeight"}}), 0.06);
  EXPECT_EQ(
      e.Value("qmm_request_duration_seconds_bucket", {{"method", "GetWeight"}, {"le", "0.025"}}),
      0);
}

TEST(RequestClockTest, RestartMeasuresFromTheRestart) {
  Metrics metrics(MetricsOptions{});
  RequestClock clock(&metrics, RpcMethod::kMatMulStream);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  clock.Restart();
  clock.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "gone"));
  const testing::Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "MatMulStream"}, {"code", "CANCELLED"}}), 1);
  EXPECT_LT(*e.Value("qmm_request_duration_seconds_sum", {{"method", "MatMulStream"}}), 0.05);
}

}  // namespace
}  // namespace qmm
