#include "server/metrics.h"

#include <prometheus/text_serializer.h>

#include <atomic>
#include <cmath>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/exposition.h"
#include "tests/server/promtool.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using ::qmm::testing::Exposition;
using ::qmm::testing::LabelSet;

std::string Text(const Metrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.Collect());
}

using ::qmm::testing::Scrape;

MetricsOptions Options(bool per_weight = false) {
  MetricsOptions options;
  options.build = {"1.2.3", "abc123", "cpu", "Test CPU"};
  options.per_weight = per_weight;
  return options;
}

constexpr RpcMethod kAllMethods[] = {
    RpcMethod::kUploadWeight,    RpcMethod::kGetWeight,        RpcMethod::kListWeights,
    RpcMethod::kDeleteWeight,    RpcMethod::kServerInfo,       RpcMethod::kMatMul,
    RpcMethod::kMatMulStream,    RpcMethod::kCreateModel,      RpcMethod::kGetModel,
    RpcMethod::kListModels,      RpcMethod::kDeleteModel,      RpcMethod::kForward,
    RpcMethod::kForwardStream,   RpcMethod::kServerLive,       RpcMethod::kServerReady,
    RpcMethod::kModelReady,      RpcMethod::kServerMetadata,   RpcMethod::kModelMetadata,
    RpcMethod::kModelInfer,      RpcMethod::kModelStreamInfer, RpcMethod::kModelConfig,
    RpcMethod::kModelStatistics, RpcMethod::kHttpHealth,       RpcMethod::kHttpMetadata,
    RpcMethod::kHttpInfer,       RpcMethod::kLocalMatMul};
constexpr RejectReason kAllReasons[] = {RejectReason::kQueueFull, RejectReason::kMemoryBudget,
                                        RejectReason::kDeadline, RejectReason::kCancelled,
                                        RejectReason::kDraining};

TEST(MetricsTest, NamesAreDistinctAndLabelValuesFixed) {
  std::set<absl::string_view> methods;
  for (RpcMethod m : kAllMethods) methods.insert(RpcMethodName(m));
  EXPECT_EQ(methods.size(), std::size(kAllMethods));
  EXPECT_EQ(std::size(kAllMethods), static_cast<size_t>(kNumRpcMethods));
  EXPECT_EQ(RpcMethodName(RpcMethod::kMatMul), "MatMul");
  EXPECT_EQ(RpcMethodName(RpcMethod::kMatMulStream), "MatMulStream");
  std::set<absl::string_view> reasons;
  for (RejectReason r : kAllReasons) reasons.insert(RejectReasonName(r));
  EXPECT_EQ(reasons.size(), static_cast<size_t>(kNumRejectReasons));
  EXPECT_EQ(RejectReasonName(RejectReason::kQueueFull), "queue_full");
  EXPECT_EQ(TransferDirectionName(TransferDirection::kHostToDevice), "h2d");
  EXPECT_EQ(TransferDirectionName(TransferDirection::kDeviceToHost), "d2h");
}

TEST(MetricsTest, BucketsAreIncreasingAndSpanTheRange) {
  for (const std::vector<double>* buckets :
       {&DurationBuckets(), &BatchRowsBuckets(), &BatchRequestsBuckets()}) {
    ASSERT_FALSE(buckets->empty());
    for (size_t i = 1; i < buckets->size(); ++i) EXPECT_LT((*buckets)[i - 1], (*buckets)[i]);
  }
  EXPECT_DOUBLE_EQ(DurationBuckets().front(), 1e-5);
  EXPECT_DOUBLE_EQ(DurationBuckets().back(), 10);
  for (const std::vector<double>* buckets : {&BatchRowsBuckets(), &BatchRequestsBuckets()}) {
    EXPECT_DOUBLE_EQ(buckets->front(), 1);
    for (size_t i = 1; i < buckets->size(); ++i)
      EXPECT_DOUBLE_EQ((*buckets)[i], 2 * (*buckets)[i - 1]);
  }
  EXPECT_DOUBLE_EQ(BatchRowsBuckets().back(), 65536);  // the default --max_rows
  EXPECT_DOUBLE_EQ(BatchRequestsBuckets().back(), 1024);
}

TEST(MetricsTest, EveryFamilyFollowsTheConventions) {
  Metrics metrics(Options(/*per_weight=*/true));
  metrics.AddWeight("w");
  metrics.RecordRequest(RpcMethod::kMatMul, absl::StatusCode::kOk, 0.001);
  const Exposition e = Scrape(metrics);
  const std::map<std::string, std::string> expected = {
      {"qmm_requests_total", "counter"},
      {"qmm_request_duration_seconds", "histogram"},
      {"qmm_queue_duration_seconds", "histogram"},
      {"qmm_compute_duration_seconds", "histogram"},
      {"qmm_transfer_duration_seconds", "histogram"},
      {"qmm_launch_host_duration_seconds", "histogram"},
      {"qmm_batch_rows", "histogram"},
      {"qmm_batch_requests", "histogram"},
      {"qmm_queue_rows", "gauge"},
      {"qmm_queue_requests", "gauge"},
      {"qmm_queue_limit_requests", "gauge"},
      {"qmm_weights", "gauge"},
      {"qmm_weight_bytes", "gauge"},
      {"qmm_device_memory_bytes", "gauge"},
      {"qmm_rejected_requests_total", "counter"},
      {"qmm_upload_bytes_total", "counter"},
      {"qmm_build_info", "gauge"},
      {"qmm_weight_requests_total", "counter"},
      {"qmm_weight_rows_total", "counter"},
      {"qmm_weight_compute_seconds_total", "counter"},
      {"process_cpu_seconds_total", "counter"},
      {"process_resident_memory_bytes", "gauge"},
      {"process_virtual_memory_bytes", "gauge"},
      {"process_open_fds", "gauge"},
      {"process_max_fds", "gauge"},
      {"process_start_time_seconds", "gauge"},
  };
  EXPECT_EQ(e.type, expected);
  for (const auto& [name, help] : e.help) {
    EXPECT_TRUE(absl::StartsWith(name, "qmm_") || absl::StartsWith(name, "process_")) << name;
    EXPECT_EQ(absl::EndsWith(name, "_total"), e.type.at(name) == "counter") << name;
    // prometheus-cpp writes HELP unescaped: it must be printable ASCII without backslashes.
    ASSERT_FALSE(help.empty()) << name;
    for (char c : help) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f && c != '\\') << name << ": " << help;
    }
  }
}

TEST(MetricsTest, RequestsCountByMethodAndCodeAndDurationsMatch) {
  Metrics metrics(Options());
  {
    const Exposition e = Scrape(metrics);
    EXPECT_EQ(e.Count("qmm_requests_total"), kNumRpcMethods) << "error codes appear when used";
    for (RpcMethod m : kAllMethods) {
      EXPECT_EQ(e.Value("qmm_requests_total",
                        {{"method", std::string(RpcMethodName(m))}, {"code", "OK"}}),
                0);
    }
  }

  std::mt19937 rng(7);
  const absl::StatusCode codes[] = {absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument,
                                    absl::StatusCode::kNotFound,
                                    absl::StatusCode::kResourceExhausted};
  std::map<std::pair<int, int>, int> counts;
  std::map<int, double> sums;
  std::map<int, int> per_method;
  std::uniform_real_distribution<double> seconds(2e-6, 12);
  for (int i = 0; i < 500; ++i) {
    const int m = static_cast<int>(rng() % std::size(kAllMethods));
    const int c = static_cast<int>(rng() % std::size(codes));
    const double s = seconds(rng);
    metrics.RecordRequest(kAllMethods[m], codes[c], s);
    ++counts[{m, c}];
    sums[m] += s;
    ++per_method[m];
  }
  const Exposition e = Scrape(metrics);
  for (const auto& [key, count] : counts) {
    const std::string method(RpcMethodName(kAllMethods[key.first]));
    const std::string code = absl::StatusCodeToString(codes[key.second]);
    EXPECT_EQ(e.Value("qmm_requests_total", {{"method", method}, {"code", code}}), count)
        << method << " " << code;
  }
  EXPECT_EQ(e.Sum("qmm_requests_total"), 500);
  for (int m = 0; m < kNumRpcMethods; ++m) {
    const LabelSet labels = {{"method", std::string(RpcMethodName(kAllMethods[m]))}};
    EXPECT_EQ(e.Value("qmm_request_duration_seconds_count", labels), per_method[m]);
    EXPECT_NEAR(*e.Value("qmm_request_duration_seconds_sum", labels), sums[m], 1e-6 * sums[m]);
    LabelSet inf = labels;
    inf["le"] = "+Inf";
    EXPECT_EQ(e.Value("qmm_request_duration_seconds_bucket", inf), per_method[m]);
  }
}

TEST(MetricsTest, CodeNamesAreTheGrpcSpellings) {
  Metrics metrics(Options());
  metrics.RecordRequest(RpcMethod::kGetWeight, absl::StatusCode::kDeadlineExceeded, 0.5);
  metrics.RecordRequest(RpcMethod::kGetWeight, absl::StatusCode::kUnauthenticated, 0.5);
  // Not a gRPC code: counted as UNKNOWN rather than lost.
  metrics.RecordRequest(RpcMethod::kGetWeight, static_cast<absl::StatusCode>(99), 0.5);
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "GetWeight"}, {"code", "DEADLINE_EXCEEDED"}}),
            1);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "GetWeight"}, {"code", "UNAUTHENTICATED"}}),
            1);
  EXPECT_EQ(e.Value("qmm_requests_total", {{"method", "GetWeight"}, {"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(e.Count("qmm_requests_total"), kNumRpcMethods + 3);
}

TEST(MetricsTest, DurationLandsInTheRightBucket) {
  Metrics metrics(Options());
  metrics.RecordQueue(RpcMethod::kMatMul, 3e-5);  // between 2.5e-05 and 5e-05
  metrics.RecordQueue(RpcMethod::kMatMul, 0.7);   // between 0.5 and 1
  metrics.RecordQueue(RpcMethod::kMatMul, 60);    // past the last bound
  const Exposition e = Scrape(metrics);
  const auto bucket = [&](const char* le) {
    return e.Value("qmm_queue_duration_seconds_bucket", {{"method", "MatMul"}, {"le", le}});
  };
  EXPECT_EQ(bucket("2.5e-05"), 0);
  EXPECT_EQ(bucket("5e-05"), 1);
  EXPECT_EQ(bucket("0.5"), 1);
  EXPECT_EQ(bucket("1"), 2);
  EXPECT_EQ(bucket("10"), 2);
  EXPECT_EQ(bucket("+Inf"), 3);
  EXPECT_EQ(e.Count("qmm_queue_duration_seconds_bucket"),
            kNumRpcMethods * static_cast<int>(DurationBuckets().size() + 1));
}

TEST(MetricsTest, ComputeTransferAndBatchHistogramsMove) {
  Metrics metrics(Options());
  std::mt19937 rng(11);
  std::map<Scheme, int> per_scheme;
  for (int i = 0; i < 40; ++i) {
    const Scheme s = kAllSchemes[rng() % std::size(kAllSchemes)];
    metrics.RecordCompute(s, 1e-4 * (1 + rng() % 100));
    ++per_scheme[s];
  }
  metrics.RecordTransfer(TransferDirection::kHostToDevice, 2e-5);
  metrics.RecordTransfer(TransferDirection::kHostToDevice, 3e-5);
  metrics.RecordTransfer(TransferDirection::kDeviceToHost, 4e-5);
  metrics.RecordLaunchHost(7e-5);
  metrics.RecordLaunchHost(3e-6);
  int64_t rows = 0;
  for (int i = 0; i < 25; ++i) {
    const int64_t r = 1 + rng() % 64;
    metrics.RecordBatch(r, 1 + r / 8);
    rows += r;
  }
  const Exposition e = Scrape(metrics);
  const char* const kSchemeLabels[] = {"fp16", "bf16", "w8a16", "w4a16", "w2a8"};
  for (size_t i = 0; i < std::size(kAllSchemes); ++i) {
    EXPECT_EQ(e.Value("qmm_compute_duration_seconds_count", {{"scheme", kSchemeLabels[i]}}),
              per_scheme[kAllSchemes[i]])
        << kSchemeLabels[i];
  }
  EXPECT_EQ(e.Value("qmm_transfer_duration_seconds_count", {{"direction", "h2d"}}), 2);
  EXPECT_NEAR(*e.Value("qmm_transfer_duration_seconds_sum", {{"direction", "h2d"}}), 5e-5, 1e-12);
  EXPECT_EQ(e.Value("qmm_transfer_duration_seconds_count", {{"direction", "d2h"}}), 1);
  EXPECT_EQ(e.Value("qmm_launch_host_duration_seconds_count"), 2);
  EXPECT_NEAR(*e.Value("qmm_launch_host_duration_seconds_sum"), 7.3e-5, 1e-12);
  EXPECT_EQ(e.Value("qmm_launch_host_duration_seconds_bucket", {{"le", "1e-05"}}), 1);
  EXPECT_EQ(e.Value("qmm_batch_rows_count"), 25);
  EXPECT_EQ(e.Value("qmm_batch_rows_sum"), rows);
  EXPECT_EQ(e.Value("qmm_batch_requests_count"), 25);
  EXPECT_EQ(e.Value("qmm_batch_rows_bucket", {{"le", "65536"}}), 25);
}

TEST(MetricsTest, GaugesFollowTheirSetters) {
  Metrics metrics(Options());
  metrics.AddQueued(64, 3);
  metrics.AddQueued(8, 1);
  metrics.AddQueued(-64, -3);
  metrics.SetQueueLimit(4096);
  Metrics::WeightTotals totals;
  totals.count = 3;
  totals.bytes_by_scheme[static_cast<int>(Scheme::kW4A16)] = 123456789;
  totals.bytes_by_scheme[static_cast<int>(Scheme::kFp16)] = 2048;
  metrics.SetWeights(totals);
  metrics.SetDeviceMemory(int64_t{5} << 30, int64_t{100} << 30, int64_t{141} << 30);
  Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_queue_rows"), 8);
  EXPECT_EQ(e.Value("qmm_queue_requests"), 1);
  EXPECT_EQ(e.Value("qmm_queue_limit_requests"), 4096);
  EXPECT_EQ(e.Value("qmm_weights"), 3);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "w4a16"}}), 123456789);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "fp16"}}), 2048);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "w8a16"}}), 0);
  EXPECT_EQ(e.Count("qmm_weight_bytes"), static_cast<int>(std::size(kAllSchemes)));
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "used"}}), double(int64_t{5} << 30));
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "limit"}}), double(int64_t{100} << 30));
  EXPECT_EQ(e.Value("qmm_device_memory_bytes", {{"kind", "total"}}), double(int64_t{141} << 30));

  metrics.SetWeights({});  // every weight deleted
  e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_weights"), 0);
  EXPECT_EQ(e.Value("qmm_weight_bytes", {{"scheme", "w4a16"}}), 0);
}

TEST(MetricsTest, RejectionsAreExportedForEveryReasonFromZero) {
  Metrics metrics(Options());
  Exposition e = Scrape(metrics);
  for (RejectReason r : kAllReasons) {
    EXPECT_EQ(
        e.Value("qmm_rejected_requests_total", {{"reason", std::string(RejectReasonName(r))}}), 0);
  }
  metrics.RecordRejected(RejectReason::kQueueFull);
  metrics.RecordRejected(RejectReason::kQueueFull);
  metrics.RecordRejected(RejectReason::kDeadline);
  metrics.AddUploadBytes(1000);
  metrics.AddUploadBytes(24);
  e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_rejected_requests_total", {{"reason", "queue_full"}}), 2);
  EXPECT_EQ(e.Value("qmm_rejected_requests_total", {{"reason", "deadline_exceeded"}}), 1);
  EXPECT_EQ(e.Value("qmm_rejected_requests_total", {{"reason", "cancelled"}}), 0);
  EXPECT_EQ(e.Value("qmm_upload_bytes_total"), 1024);
}

TEST(MetricsTest, BuildInfoCarriesItsLabelsEscaped) {
  MetricsOptions options = Options();
  options.build.device = "CPU \"x\" \\ 2.0GHz";
  Metrics metrics(options);
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_build_info", {{"version", "1.2.3"},
                                       {"git_sha", "abc123"},
                                       {"backend", "cpu"},
                                       {"device", "CPU \"x\" \\ 2.0GHz"}}),
            1);
}

TEST(MetricsTest, EmptyBuildInfoLabelsAreUnknown) {
  Metrics metrics(MetricsOptions{});
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_build_info", {{"version", "unknown"},
                                       {"git_sha", "unknown"},
                                       {"backend", "unknown"},
                                       {"device", "unknown"}}),
            1);
}

TEST(MetricsTest, PerWeightSeriesAreOffByDefault) {
  Metrics metrics(Options());
  EXPECT_FALSE(metrics.per_weight());
  metrics.AddWeight("secret-customer-weight");
  metrics.RecordWeightMatMul("secret-customer-weight", 4, 0.01);
  const std::string text = Text(metrics);
  EXPECT_FALSE(absl::StrContains(text, "secret-customer-weight"));
  EXPECT_FALSE(absl::StrContains(text, "qmm_weight_requests_total"));
}

TEST(MetricsTest, PerWeightSeriesFollowTheWeights) {
  Metrics metrics(Options(/*per_weight=*/true));
  EXPECT_TRUE(metrics.per_weight());
  metrics.AddWeight("a");
  metrics.AddWeight("b\"q");
  metrics.RecordWeightMatMul("a", 4, 0.25);
  metrics.RecordWeightMatMul("a", 3, 0.5);
  metrics.RecordWeightMatMul("never-added", 1, 1);  // ignored: no series
  metrics.AddWeight("a");                           // again: keeps the counts
  Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_weight_requests_total", {{"weight", "a"}}), 2);
  EXPECT_EQ(e.Value("qmm_weight_rows_total", {{"weight", "a"}}), 7);
  EXPECT_EQ(e.Value("qmm_weight_compute_seconds_total", {{"weight", "a"}}), 0.75);
  EXPECT_EQ(e.Value("qmm_weight_requests_total", {{"weight", "b\"q"}}), 0);
  EXPECT_EQ(e.Count("qmm_weight_requests_total"), 2);

  metrics.ForgetWeight("a");
  metrics.ForgetWeight("a");                 // twice is harmless
  metrics.RecordWeightMatMul("a", 4, 0.25);  // a request that outlived the delete
  e = Scrape(metrics);
  EXPECT_EQ(e.Count("qmm_weight_requests_total"), 1);
  EXPECT_EQ(e.Count("qmm_weight_rows_total"), 1);
  EXPECT_EQ(e.Count("qmm_weight_compute_seconds_total"), 1);
  EXPECT_FALSE(e.Value("qmm_weight_rows_total", {{"weight", "a"}}).has_value());

  metrics.AddWeight("a");  // re-uploaded under the same name: starts from zero
  e = Scrape(metrics);
  EXPECT_EQ(e.Value("qmm_weight_rows_total", {{"weight", "a"}}), 0);
}

TEST(MetricsTest, CollectHookRunsOnEveryScrapeUntilCleared) {
  Metrics metrics(Options());
  int calls = 0;
  metrics.SetCollectHook([&] {
    ++calls;
    metrics.SetDeviceMemory(calls, 100, 200);
  });
  EXPECT_EQ(Scrape(metrics).Value("qmm_device_memory_bytes", {{"kind", "used"}}), 1);
  EXPECT_EQ(Scrape(metrics).Value("qmm_device_memory_bytes", {{"kind", "used"}}), 2);
  metrics.SetCollectHook(nullptr);
  EXPECT_EQ(Scrape(metrics).Value("qmm_device_memory_bytes", {{"kind", "used"}}), 2);
  EXPECT_EQ(calls, 2);
}

TEST(MetricsTest, ProcessMetricsAreSane) {
  Metrics metrics(Options());
  const Exposition e = Scrape(metrics);
  ASSERT_TRUE(e.Value("process_cpu_seconds_total").has_value());
  EXPECT_GE(*e.Value("process_cpu_seconds_total"), 0);
  EXPECT_GT(*e.Value("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(*e.Value("process_virtual_memory_bytes"), *e.Value("process_resident_memory_bytes"));
  EXPECT_GE(*e.Value("process_open_fds"), 3);  // at least stdin, stdout, stderr
  EXPECT_GE(*e.Value("process_max_fds"), *e.Value("process_open_fds"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(*e.Value("process_start_time_seconds"), now + 1);
  EXPECT_GT(*e.Value("process_start_time_seconds"), now - 3600);
}

TEST(MetricsTest, ConcurrentRecordingAndScrapingLosesNothing) {
  Metrics metrics(Options(/*per_weight=*/true));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      const absl::StatusOr<Exposition> e = testing::ParseExposition(Text(metrics));
      ASSERT_TRUE(e.ok()) << e.status();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string weight = absl::StrCat("w", t % 2);
      for (int i = 0; i < kPerThread; ++i) {
        metrics.RecordRequest(RpcMethod::kMatMul,
                              i % 3 == 0 ? absl::StatusCode::kOk : absl::StatusCode::kCancelled,
                              1e-4);
        metrics.AddQueued(2, 1);
        metrics.RecordBatch(2, 1);
        metrics.AddQueued(-2, -1);
        if (i % 100 == 0) metrics.ForgetWeight(weight);
        if (i % 100 == 1) metrics.AddWeight(weight);
        metrics.RecordWeightMatMul(weight, 2, 1e-4);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  scraper.join();
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Sum("qmm_requests_total", {{"method", "MatMul"}}), kThreads * kPerThread);
  EXPECT_EQ(e.Value("qmm_request_duration_seconds_count", {{"method", "MatMul"}}),
            kThreads * kPerThread);
  EXPECT_EQ(e.Value("qmm_batch_rows_sum"), 2.0 * kThreads * kPerThread);
  EXPECT_EQ(e.Value("qmm_queue_rows"), 0);
  EXPECT_EQ(e.Value("qmm_queue_requests"), 0);
}

TEST(MetricsTest, ExpositionPassesPromtool) {
  if (!testing::FindOnPath("promtool")) GTEST_SKIP() << "promtool is not installed";
  MetricsOptions options = Options(/*per_weight=*/true);
  options.build.device = "GPU \"quoted\" \\ back";
  Metrics metrics(options);
  metrics.AddWeight("layer.0/q\"proj");
  metrics.RecordWeightMatMul("layer.0/q\"proj", 3, 0.002);
  for (RpcMethod m : kAllMethods) metrics.RecordRequest(m, absl::StatusCode::kOk, 0.003);
  metrics.RecordRequest(RpcMethod::kMatMul, absl::StatusCode::kResourceExhausted, 0.0001);
  metrics.RecordBatch(17, 5);
  metrics.RecordCompute(Scheme::kW2A8, 0.0004);
  const absl::Status status = testing::PromtoolCheckMetrics(Text(metrics));
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace qmm
