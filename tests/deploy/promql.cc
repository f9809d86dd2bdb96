#include "tests/deploy/promql.h"

#include <nlohmann/json.hpp>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace qmm::testing {
namespace {

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || absl::ascii_isdigit(c); }

// Aggregation operators may put `by (...)` between their name and their '('.
const std::set<std::string>& Aggregations() {
  static const std::set<std::string> names = {"sum",          "min",     "max",    "avg",
                                              "group",        "stddev",  "stdvar", "count",
                                              "count_values", "bottomk", "topk",   "quantile"};
  return names;
}

// Words that are never metric names where they stand.
bool IsKeyword(absl::string_view word) {
  static const std::set<std::string> words = {"and",      "or",         "unless",     "bool",
                                              "offset",   "by",         "without",    "on",
                                              "ignoring", "group_left", "group_right"};
  return words.count(std::string(word)) != 0 || absl::EqualsIgnoreCase(word, "inf") ||
         absl::EqualsIgnoreCase(word, "nan");
}

// Skips from `i` (at an opening quote) past the closing one.
size_t SkipString(absl::string_view s, size_t i) {
  const char quote = s[i++];
  while (i < s.size() && s[i] != quote) i += (s[i] == '\\' && quote != '`') ? 2 : 1;
  return i + 1;
}

// Skips from `i` (at `open`) past the matching `close`, stepping over strings.
size_t SkipGroup(absl::string_view s, size_t i, char open, char close) {
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = SkipString(s, i);
      continue;
    }
    if (c == open) ++depth;
    if (c == close && --depth == 0) return i + 1;
    ++i;
  }
  return i;
}

std::string Substitute(std::string expr) {
  static const std::regex kIntervals(R"(\$__(rate_interval|interval|range))");
  static const std::regex kBraced(R"(\$\{[^}]*\})");
  static const std::regex kPlain(R"(\$[A-Za-z_][A-Za-z0-9_]*)");
  expr = std::regex_replace(expr, kIntervals, "1m");
  expr = std::regex_replace(expr, kBraced, ".*");
  return std::regex_replace(expr, kPlain, ".*");
}

void Walk(const nlohmann::json& node, std::vector<std::string>& out) {
  if (node.is_object()) {
    const auto expr = node.find("expr");
    if (expr != node.end() && expr->is_string()) out.push_back(Substitute(*expr));
    for (const auto& [key, value] : node.items()) {
      if (key != "expr") Walk(value, out);
    }
  } else if (node.is_array()) {
    for (const nlohmann::json& item : node) Walk(item, out);
  }
}

// The metric selector of `label_values(SELECTOR, label)`; nothing for label_values(label),
// which reads no metric.
void AddTemplatingQuery(const std::string& query, std::vector<std::string>& out) {
  static const std::regex kLabelValues(
      R"(^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$)");
  std::smatch match;
  if (std::regex_match(query, match, kLabelValues)) out.push_back(Substitute(match[1].str()));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> DashboardQueries(absl::string_view json) {
  const nlohmann::json dashboard = nlohmann::json::parse(json.begin(), json.end(), nullptr,
                                                         /*allow_exceptions=*/false);
  if (dashboard.is_discarded() || !dashboard.is_object()) {
    return absl::InvalidArgumentError("the dashboard is not a JSON object");
  }
  std::vector<std::string> queries;
  Walk(dashboard.value("panels", nlohmann::json::array()), queries);
  const nlohmann::json templating = dashboard.value("templating", nlohmann::json::object());
  for (const nlohmann::json& variable : templating.value("list", nlohmann::json::array())) {
    if (variable.value("type", "") != "query") continue;
    const nlohmann::json query = variable.value("query", nlohmann::json());
    if (query.is_string()) AddTemplatingQuery(query, queries);
    if (query.is_object()) AddTemplatingQuery(query.value("query", ""), queries);
  }
  if (queries.empty()) return absl::InvalidArgumentError("the dashboard has no PromQL queries");
  return queries;
}

std::vector<std::string> RuleExpressions(absl::string_view yaml) {
  std::vector<std::string> exprs;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "expr:")) continue;
    exprs.emplace_back(absl::StripAsciiWhitespace(line));
  }
  return exprs;
}

std::set<std::string> MetricNames(absl::string_view expr) {
  std::set<std::string> names;
  size_t i = 0;
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = SkipString(expr, i);
    } else if (c == '{') {
      i = SkipGroup(expr, i, '{', '}');  // label matchers
    } else if (c == '[') {
      i = SkipGroup(expr, i, '[', ']');  // range or subquery durations
    } else if (absl::ascii_isdigit(c) ||
               (c == '.' && i + 1 < expr.size() && absl::ascii_isdigit(expr[i + 1]))) {
      while (i < expr.size() && (IsIdentChar(expr[i]) || expr[i] == '.')) ++i;  // 1e3, 5m
    } else if (IsIdentStart(c)) {
      size_t end = i;
      while (end < expr.size() && IsIdentChar(expr[end])) ++end;
      const std::string word(expr.substr(i, end - i));
      size_t next = end;
      while (next < expr.size() && absl::ascii_isspace(expr[next])) ++next;
      const bool call = next < expr.size() && expr[next] == '(';
      if (call && (word == "by" || word == "without" || word == "on" || word == "ignoring" ||
                   word == "group_left" || word == "group_right")) {
        end = SkipGroup(expr, next, '(', ')');  // a list of label names
      } else if (!call && !IsKeyword(word) && Aggregations().count(word) == 0) {
        names.insert(word);
      }
      i = end;
    } else {
      ++i;
    }
  }
  return names;
}

}  // namespace qmm::testing
