#include "client/qmmctl/bench_report.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace qmm::ctl {
namespace {

BenchSetup ExampleSetup() {
  BenchSetup s;
  s.server = "127.0.0.1:1";
  s.weight = "w";
  s.scheme = "w4a16";
  s.n = 8;
  s.k = 128;
  s.backend = "cpu";
  s.concurrency = 2;
  s.channels = 1;
  s.rows = 4;
  s.dtype = "fp16";
  s.output_dtype = "fp16";
  s.inputs = 3;
  s.requests = 6;
  s.verify_seed = 9;
  s.tolerance = 1e-3;
  return s;
}

std::vector<BenchTally> TwoCallers() {
  std::vector<BenchTally> t(2);
  t[0].RecordOk(absl::Milliseconds(1), 100);
  t[0].RecordOk(absl::Milliseconds(3), 300);
  t[0].RecordError(absl::ResourceExhaustedError("queue for weight \"w\" is full"));
  t[0].verified = 2;
  t[0].max_relative_error = 2e-4;
  t[1].RecordOk(absl::Milliseconds(2), 200);
  t[1].RecordError(absl::ResourceExhaustedError("another message"));
  t[1].RecordError(absl::DeadlineExceededError("deadline"));
  t[1].verified = 1;
  t[1].mismatches = 1;
  t[1].max_relative_error = 0.5;
  t[1].first_mismatch = "request 4 (input 1): relative error 0.5, 0 non-finite";
  return t;
}

TEST(SummarizeTest, AddsUpTheCallers) {
  const BenchReport r = Summarize(ExampleSetup(), TwoCallers(), absl::Seconds(2));
  EXPECT_EQ(r.ok, 3);
  EXPECT_EQ(r.errors, 3);
  EXPECT_EQ(r.errors_by_code.at(absl::StatusCode::kResourceExhausted), 2);
  EXPECT_EQ(r.errors_by_code.at(absl::StatusCode::kDeadlineExceeded), 1);
  // The first message seen for a code is kept.
  EXPECT_EQ(r.error_examples.at(absl::StatusCode::kResourceExhausted),
            "queue for weight \"w\" is full");
  EXPECT_EQ(r.verified, 3);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_DOUBLE_EQ(r.max_relative_error, 0.5);
  EXPECT_EQ(r.first_mismatch, "request 4 (input 1): relative error 0.5, 0 non-finite");
  EXPECT_DOUBLE_EQ(r.requests_per_second, 1.5);
  EXPECT_DOUBLE_EQ(r.rows_per_second, 6.0);
  EXPECT_EQ(r.latency.count, 3);
  EXPECT_EQ(r.latency.p50, absl::Milliseconds(2));
  EXPECT_EQ(r.latency.max, absl::Milliseconds(3));
  EXPECT_EQ(r.compute_p50, absl::Nanoseconds(200));
  EXPECT_FALSE(r.passed());
}

TEST(SummarizeTest, ACleanRunPasses) {
  std::vector<BenchTally> t(1);
  t[0].RecordOk(absl::Milliseconds(1), 5);
  const BenchReport r = Summarize(ExampleSetup(), std::move(t), absl::Milliseconds(10));
  EXPECT_TRUE(r.passed());
  EXPECT_DOUBLE_EQ(r.requests_per_second, 100);
}

TEST(SummarizeTest, AnswersWithoutComputeTimeLeaveItOut) {
  std::vector<BenchTally> t(1);
  t[0].RecordOk(absl::Milliseconds(1), std::nullopt);
  BenchSetup setup = ExampleSetup();
  setup.protocol = "open-inference";
  const BenchReport r = Summarize(setup, std::move(t), absl::Milliseconds(10));
  EXPECT_FALSE(r.compute_p50.has_value());
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("(cpu, open-inference)"), std::string::npos) << text;
  EXPECT_EQ(text.find("server compute"), std::string::npos) << text;
  const nlohmann::ordered_json j = ReportJson(r);
  EXPECT_TRUE(j["server_compute_p50_ms"].is_null());
  EXPECT_EQ(j["setup"]["protocol"], "open-inference");
}

TEST(SummarizeTest, StreamsWithRequestsInFlightSaySo) {
  BenchSetup setup = ExampleSetup();
  setup.stream = true;
  setup.inflight = 8;
  const BenchReport r = Summarize(setup, {}, absl::Milliseconds(10));
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("streams (8 requests in flight each)"), std::string::npos) << text;
  EXPECT_EQ(ReportJson(r)["setup"]["inflight"], 8);
  setup.inflight = 1;
  const std::string one = FormatReport(Summarize(setup, {}, absl::Milliseconds(10)));
  EXPECT_EQ(one.find("in flight"), std::string::npos) << one;
}

TEST(SummarizeTest, AModelIsNamedAsOneWithItsLayersAndSeeds) {
  BenchSetup setup = ExampleSetup();
  setup.model = true;
  setup.weight = "mlp";
  setup.layers = 3;
  setup.scheme = "model";
  setup.verify_seed.reset();
  setup.verify_seeds = {{"down", 4}, {"gate", 2}};
  std::vector<BenchTally> t(1);
  t[0].RecordOk(absl::Milliseconds(1), 5);
  ++t[0].verified;
  const BenchReport r = Summarize(setup, std::move(t), absl::Milliseconds(10));
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("bench model mlp (3 layers, ["), std::string::npos) << text;
  EXPECT_NE(text.find("verified against seeds down=4,gate=2"), std::string::npos) << text;
  const nlohmann::ordered_json j = ReportJson(r);
  EXPECT_EQ(j["setup"]["model"], "mlp");
  EXPECT_FALSE(j["setup"].contains("weight"));
  EXPECT_EQ(j["setup"]["layers"], 3);
  EXPECT_EQ(j["setup"]["verify_seeds"]["gate"], 2);
}

TEST(SummarizeTest, NoTimeGivesNoRates) {
  const BenchReport r = Summarize(ExampleSetup(), {}, absl::ZeroDuration());
  EXPECT_EQ(r.ok, 0);
  EXPECT_EQ(r.requests_per_second, 0);
  EXPECT_EQ(r.latency.count, 0);
}

TEST(BatchingDeltaTest, CountersAreDifferencesTheRestIsTheEnd) {
  v1::BatchingStats before;
  before.set_launches(10);
  before.set_requests(30);
  before.set_rows(40);
  before.set_multi_request_launches(5);
  before.set_rejected_queue_full(1);
  before.set_dropped_deadline(2);
  before.set_max_requests_per_launch(9);
  v1::BatchingStats after = before;
  after.set_launches(15);
  after.set_requests(80);
  after.set_rows(100);
  after.set_multi_request_launches(9);
  after.set_rejected_queue_full(4);
  after.set_dropped_deadline(2);
  after.set_dropped_cancelled(1);
  after.set_max_requests_per_launch(12);
  after.set_max_batch_rows(64);
  const v1::BatchingStats d = BatchingDelta(before, after);
  EXPECT_EQ(d.launches(), 5);
  EXPECT_EQ(d.requests(), 50);
  EXPECT_EQ(d.rows(), 60);
  EXPECT_EQ(d.multi_request_launches(), 4);
  EXPECT_EQ(d.rejected_queue_full(), 3);
  EXPECT_EQ(d.dropped_deadline(), 0);
  EXPECT_EQ(d.dropped_cancelled(), 1);
  EXPECT_EQ(d.max_requests_per_launch(), 12);
  EXPECT_EQ(d.max_batch_rows(), 64);
}

inference::StatisticDuration Duration(uint64_t count, uint64_t ns) {
  inference::StatisticDuration d;
  d.set_count(count);
  d.set_ns(ns);
  return d;
}

TEST(StatisticsDeltaTest, CountsAndDurationsAreDifferencesBatchSizesMatched) {
  inference::ModelStatistics before;
  before.set_name("w");
  before.set_last_inference(100);
  before.set_inference_count(10);
  before.set_execution_count(4);
  *before.mutable_inference_stats()->mutable_success() = Duration(8, 8000);
  *before.mutable_inference_stats()->mutable_queue() = Duration(8, 800);
  *before.mutable_inference_stats()->mutable_compute_infer() = Duration(8, 4000);
  inference::InferBatchStatistics* one = before.add_batch_stats();
  one->set_batch_size(1);
  *one->mutable_compute_infer() = Duration(4, 2000);
  inference::ModelStatistics after = before;
  after.set_last_inference(250);
  after.set_inference_count(70);
  after.set_execution_count(9);
  *after.mutable_inference_stats()->mutable_success() = Duration(20, 38000);
  *after.mutable_inference_stats()->mutable_fail() = Duration(2, 50);
  *after.mutable_inference_stats()->mutable_queue() = Duration(20, 3800);
  *after.mutable_inference_stats()->mutable_compute_infer() = Duration(20, 16000);
  *after.mutable_batch_stats(0)->mutable_compute_infer() = Duration(4, 2000);  // unchanged
  inference::InferBatchStatistics* twelve = after.add_batch_stats();
  twelve->set_batch_size(12);
  *twelve->mutable_compute_infer() = Duration(5, 9000);

  const inference::ModelStatistics d = StatisticsDelta(before, after);
  EXPECT_EQ(d.name(), "w");
  EXPECT_EQ(d.last_inference(), 250u);
  EXPECT_EQ(d.inference_count(), 60u);
  EXPECT_EQ(d.execution_count(), 5u);
  EXPECT_EQ(d.inference_stats().success().count(), 12u);
  EXPECT_EQ(d.inference_stats().success().ns(), 30000u);
  EXPECT_EQ(d.inference_stats().fail().count(), 2u);
  EXPECT_EQ(d.inference_stats().queue().ns(), 3000u);
  EXPECT_EQ(d.inference_stats().compute_infer().ns(), 12000u);
  ASSERT_EQ(d.batch_stats_size(), 1);  // size 1 ran no launch over the run
  EXPECT_EQ(d.batch_stats(0).batch_size(), 12u);
  EXPECT_EQ(d.batch_stats(0).compute_infer().count(), 5u);
}

TEST(FormatReportTest, SaysWhatHappened) {
  BenchReport r = Summarize(ExampleSetup(), TwoCallers(), absl::Seconds(2));
  v1::BatchingStats b;
  b.set_launches(2);
  b.set_requests(3);
  b.set_rows(12);
  b.set_max_batch_rows(64);
  r.batching = b;
  inference::ModelStatistics m;
  m.set_execution_count(2);
  *m.mutable_inference_stats()->mutable_success() = Duration(3, 3'000'000);
  *m.mutable_inference_stats()->mutable_queue() = Duration(3, 600'000);
  *m.mutable_inference_stats()->mutable_compute_input() = Duration(3, 30'000);
  *m.mutable_inference_stats()->mutable_compute_infer() = Duration(3, 450'000);
  *m.mutable_inference_stats()->mutable_compute_output() = Duration(3, 15'000);
  r.server_model = m;
  const std::string text = FormatReport(r);
  for (const char* expected :
       {"bench w (w4a16 [8, 128]) on 127.0.0.1:1 (cpu): 2 unary callers over 1 connection, "
        "M=4 fp16 -> fp16, 3 inputs",
        "3 ok, 3 errors, 3 verified against seed 9: 1 mismatch",
        "RESOURCE_EXHAUSTED: 2 (queue for weight \"w\" is full)", "DEADLINE_EXCEEDED: 1",
        "first mismatch: request 4", "1.5 requests/s, 6.0 rows/s over 2.000 s", "p50=2.000 ms",
        "2 launches, 1.50 requests/launch, 6.00 rows/launch",
        "server, per request of w: 1.000 ms from its queue to its result, 0.200 ms queued; its "
        "launch 0.010 ms in, 0.150 ms compute, 0.005 ms out (3 requests, 0 failed, in 2 launches)",
        "FAIL"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(ReportJsonTest, HoldsTheNumbers) {
  BenchReport r = Summarize(ExampleSetup(), TwoCallers(), absl::Seconds(2));
  const nlohmann::ordered_json j = ReportJson(r);
  EXPECT_EQ(j["setup"]["weight"], "w");
  EXPECT_EQ(j["setup"]["requests"], 6);
  EXPECT_TRUE(j["setup"]["duration_s"].is_null());
  EXPECT_EQ(j["setup"]["verify_seed"], 9);
  EXPECT_EQ(j["ok"], 3);
  EXPECT_EQ(j["errors_by_code"]["RESOURCE_EXHAUSTED"], 2);
  EXPECT_EQ(j["mismatches"], 1);
  EXPECT_DOUBLE_EQ(j["latency_ms"]["p50"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["server_compute_p50_ms"].get<double>(), 0.0002);
  EXPECT_EQ(j["passed"], false);
  EXPECT_FALSE(j.contains("server_batching"));  // ServerInfo gave none
  EXPECT_FALSE(j.contains("server_model"));     // nor ModelStatistics

  inference::ModelStatistics m;
  m.set_inference_count(12);
  m.set_execution_count(2);
  *m.mutable_inference_stats()->mutable_success() = Duration(3, 6'000'000);
  *m.mutable_inference_stats()->mutable_compute_infer() = Duration(3, 300'000);
  r.server_model = m;
  const nlohmann::ordered_json with = ReportJson(r);
  EXPECT_EQ(with["server_model"]["requests"], 3);
  EXPECT_EQ(with["server_model"]["rows"], 12);
  EXPECT_EQ(with["server_model"]["launches"], 2);
  EXPECT_DOUBLE_EQ(with["server_model"]["mean_ms"]["total"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(with["server_model"]["mean_ms"]["compute_infer"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(with["server_model"]["mean_ms"]["queued"].get<double>(), 0.0);  // no events
}

}  // namespace
}  // namespace qmm::ctl
