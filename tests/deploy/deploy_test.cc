// Checks deploy/ against what qmm-server really exports: the Grafana dashboard parses,
// has the panels operators need, and every PromQL expression in it and in the alert
// rules names only metrics the Metrics class registers. With promtool installed, every
// dashboard expression must also parse as PromQL.
#include <prometheus/metric_family.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "tests/deploy/promql.h"
#include "tests/server/promtool.h"

namespace qmm::testing {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(absl::StrCat(QMM_SOURCE_DIR, "/", relative));
  EXPECT_TRUE(in.good()) << relative;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every series name qmm-server can export (per-weight families included), the way
// PromQL sees them: a histogram `x` is x_bucket, x_sum and x_count.
std::set<std::string> ExportedNames() {
  MetricsOptions options;
  options.per_weight = true;
  Metrics metrics(options);
  // Per-weight series appear with their weight.
  metrics.AddWeight("w");
  std::set<std::string> names;
  for (const prometheus::MetricFamily& family : metrics.Collect()) {
    if (family.type == prometheus::MetricType::Histogram) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        names.insert(family.name + suffix);
      }
    } else {
      names.insert(family.name);
    }
  }
  return names;
}

TEST(PromqlTest, MetricNamesSkipsFunctionsLabelsAndDurations) {
  EXPECT_EQ(MetricNames(R"(histogram_quantile(0.99, sum by (le, method) )"
                        R"((rate(qmm_x_bucket{method=~"MatMul|up", le!="1"}[5m]))))"),
            (std::set<std::string>{"qmm_x_bucket"}));
  EXPECT_EQ(MetricNames("a_total / ignoring (kind) (b{kind=\"limit\"} > 0) > 0.9"),
            (std::set<std::string>{"a_total", "b"}));
  EXPECT_EQ(MetricNames("sum without (instance) (rate(c[1m] offset 5m)) * on (job) "
                        "group_left (version) d unless bool e and f or g"),
            (std::set<std::string>{"c", "d", "e", "f", "g"}));
  EXPECT_EQ(MetricNames("max(h) + 1e-5 + .5 - Inf + topk(3, i)[10m:1m]"),
            (std::set<std::string>{"h", "i"}));
  EXPECT_EQ(MetricNames("label_replace(j, \"dst\", \"$1 (x)\", \"src\", \"(.*)\")"),
            (std::set<std::string>{"j"}));
}

TEST(PromqlTest, DashboardQueriesSubstitutesVariables) {
  const absl::StatusOr<std::vector<std::string>> queries = DashboardQueries(R"json({
    "panels": [{"targets": [{"expr": "rate(a{instance=~\"$instance\"}[$__rate_interval])"}]},
               {"panels": [{"targets": [{"expr": "b{job=\"${job}\"}"}]}]}],
    "templating": {"list": [
      {"type": "query", "query": {"query": "label_values(c{x=\"$job\"}, instance)"}},
      {"type": "query", "query": "label_values(job)"},
      {"type": "datasource", "query": "prometheus"}]}})json");
  ASSERT_TRUE(queries.ok()) << queries.status();
  EXPECT_EQ(*queries, (std::vector<std::string>{"rate(a{instance=~\".*\"}[1m])", "b{job=\".*\"}",
                                                "c{x=\".*\"}"}));
  EXPECT_FALSE(DashboardQueries("{\"panels\": [").ok());
  EXPECT_FALSE(DashboardQueries("{\"panels\": []}").ok());
  EXPECT_FALSE(DashboardQueries("[1, 2]").ok());
}

TEST(DeployTest, ExportedNamesAreWhatTheIssueAsks) {
  const std::set<std::string> names = ExportedNames();
  for (const char* name :
       {"qmm_requests_total", "qmm_request_duration_seconds_bucket",
        "qmm_queue_duration_seconds_bucket", "qmm_compute_duration_seconds_bucket",
        "qmm_transfer_duration_seconds_bucket", "qmm_batch_rows_bucket",
        "qmm_batch_requests_bucket", "qmm_queue_rows", "qmm_weights", "qmm_weight_bytes",
        "qmm_device_memory_bytes", "qmm_rejected_requests_total", "qmm_upload_bytes_total",
        "qmm_build_info", "process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
}

TEST(DeployTest, DashboardNamesOnlyExportedMetrics) {
  const absl::StatusOr<std::vector<std::string>> queries =
      DashboardQueries(ReadSource("deploy/grafana/qmm-dashboard.json"));
  ASSERT_TRUE(queries.ok()) << queries.status();
  const std::set<std::string> exported = ExportedNames();
  std::set<std::string> used;
  for (const std::string& query : *queries) {
    const std::set<std::string> names = MetricNames(query);
    EXPECT_FALSE(names.empty()) << "reads no metric: " << query;
    for (const std::string& name : names) {
      EXPECT_TRUE(exported.count(name)) << name << " is not exported by qmm, in: " << query;
      used.insert(name);
    }
  }
  // The panels the issue lists: latency by method, request and row throughput, batch
  // size, queue depth, rejections, compute time by scheme, device memory.
  for (const char* name : {"qmm_request_duration_seconds_bucket", "qmm_requests_total",
                           "qmm_batch_rows_sum", "qmm_batch_rows_count", "qmm_queue_requests",
                           "qmm_queue_rows", "qmm_rejected_requests_total",
                           "qmm_compute_duration_seconds_bucket", "qmm_device_memory_bytes"}) {
    EXPECT_TRUE(used.count(name)) << "no panel reads " << name;
  }
  const std::string all = absl::StrJoin(*queries, "\n");
  EXPECT_TRUE(absl::StrContains(all, "histogram_quantile(0.5, sum by (method, le)"));
  EXPECT_TRUE(absl::StrContains(all, "histogram_quantile(0.99, sum by (method, le)"));
  EXPECT_TRUE(absl::StrContains(all, "sum by (reason)"));
  EXPECT_TRUE(absl::StrContains(all, "histogram_quantile(0.99, sum by (scheme, le)"));
}

TEST(DeployTest, DashboardPanelsAreWellFormed) {
  const nlohmann::json dashboard =
      nlohmann::json::parse(ReadSource("deploy/grafana/qmm-dashboard.json"));
  EXPECT_EQ(dashboard.value("uid", ""), "qmm-overview");
  std::set<int> ids;
  for (const nlohmann::json& panel : dashboard.at("panels")) {
    const std::string title = panel.at("title");
    EXPECT_TRUE(ids.insert(panel.at("id").get<int>()).second) << "repeated id: " << title;
    const nlohmann::json& grid = panel.at("gridPos");
    EXPECT_GE(grid.at("x").get<int>(), 0) << title;
    EXPECT_LE(grid.at("x").get<int>() + grid.at("w").get<int>(), 24) << title;
    EXPECT_FALSE(panel.value("description", "").empty()) << title;
    std::set<std::string> refs;
    ASSERT_FALSE(panel.at("targets").empty()) << title;
    for (const nlohmann::json& target : panel.at("targets")) {
      EXPECT_TRUE(refs.insert(target.at("refId").get<std::string>()).second) << title;
      EXPECT_EQ(target.at("datasource").at("uid"), "${datasource}") << title;
    }
  }
}

TEST(DeployTest, AlertRulesNameOnlyExportedMetrics) {
  const std::vector<std::string> exprs =
      RuleExpressions(ReadSource("deploy/prometheus/qmm-rules.yml"));
  ASSERT_GE(exprs.size(), 4u);
  std::set<std::string> exported = ExportedNames();
  exported.insert("up");  // written by Prometheus itself for every target
  for (const std::string& expr : exprs) {
    for (const std::string& name : MetricNames(expr)) {
      EXPECT_TRUE(exported.count(name)) << name << " is not exported by qmm, in: " << expr;
    }
  }
}

// promtool has no "check this expression" command, but it parses every rule of a rules
// file: each dashboard query becomes one recording rule.
TEST(DeployTest, DashboardQueriesParseAsPromql) {
  const std::optional<std::string> promtool = FindOnPath("promtool");
  if (!promtool) GTEST_SKIP() << "promtool is not installed";
  const absl::StatusOr<std::vector<std::string>> queries =
      DashboardQueries(ReadSource("deploy/grafana/qmm-dashboard.json"));
  ASSERT_TRUE(queries.ok()) << queries.status();
  const std::string path = ::testing::TempDir() + "/qmm-dashboard-rules.yml";
  {
    std::ofstream rules(path);
    rules << "groups:\n  - name: dashboard\n    rules:\n";
    for (size_t i = 0; i < queries->size(); ++i) {
      rules << "      - record: qmm:dashboard_query_" << i
            << "\n        expr: " << nlohmann::json((*queries)[i]).dump() << "\n";
    }
  }
  const std::string command = absl::StrCat(*promtool, " check rules ", path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_TRUE(absl::StrContains(output, absl::StrCat("SUCCESS: ", queries->size(), " rules")))
      << output;
}

}  // namespace
}  // namespace qmm::testing
