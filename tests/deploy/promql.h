// What the deploy tests need to know about the PromQL in deploy/: the expressions of a
// Grafana dashboard and of a Prometheus rules file, and the metric names each one reads.
#ifndef QMM_TESTS_DEPLOY_PROMQL_H_
#define QMM_TESTS_DEPLOY_PROMQL_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace qmm::testing {

// Every PromQL expression of a Grafana dashboard (panel targets' `expr`, and the metric
// selector inside each templating `label_values(...)` query), with the dashboard's
// variables replaced so that Prometheus can run them: $__rate_interval and friends by 1m,
// any other $var or ${var} by ".*" (they only appear inside label matchers).
// INVALID_ARGUMENT when the JSON does not parse or has no expressions.
absl::StatusOr<std::vector<std::string>> DashboardQueries(absl::string_view json);

// The `expr:` values of a Prometheus rules file (each written on one line).
std::vector<std::string> RuleExpressions(absl::string_view yaml);

// The metric names an expression selects: identifiers that are not functions,
// aggregation operators, keywords, label names, label values or durations.
std::set<std::string> MetricNames(absl::string_view expr);

}  // namespace qmm::testing

#endif  // QMM_TESTS_DEPLOY_PROMQL_H_
