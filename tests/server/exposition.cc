#include "tests/server/exposition.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace qmm::testing {
namespace {

bool IsNameChar(char c, bool first) {
  return absl::ascii_isalpha(c) || c == '_' || c == ':' || (!first && absl::ascii_isdigit(c));
}

// Consumes a metric or label name from the front of `text`.
std::optional<std::string> ConsumeName(absl::string_view& text) {
  size_t n = 0;
  while (n < text.size() && IsNameChar(text[n], n == 0)) ++n;
  if (n == 0) return std::nullopt;
  std::string name(text.substr(0, n));
  text.remove_prefix(n);
  return name;
}

// Consumes `"value"` with the format's three escapes.
std::optional<std::string> ConsumeQuoted(absl::string_view& text) {
  if (!absl::ConsumePrefix(&text, "\"")) return std::nullopt;
  std::string value;
  while (!text.empty()) {
    const char c = text.front();
    text.remove_prefix(1);
    if (c == '"') return value;
    if (c == '\n') return std::nullopt;
    if (c != '\\') {
      value.push_back(c);
      continue;
    }
    if (text.empty()) return std::nullopt;
    const char e = text.front();
    text.remove_prefix(1);
    if (e == '\\') {
      value.push_back('\\');
    } else if (e == '"') {
      value.push_back('"');
    } else if (e == 'n') {
      value.push_back('\n');
    } else {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<double> ParseValue(absl::string_view text) {
  // Prometheus parses these as Go's ParseFloat does, case-insensitively (prometheus-cpp
  // writes "Nan").
  if (absl::EqualsIgnoreCase(text, "+Inf") || absl::EqualsIgnoreCase(text, "Inf")) {
    return std::numeric_limits<double>::infinity();
  }
  if (absl::EqualsIgnoreCase(text, "-Inf")) return -std::numeric_limits<double>::infinity();
  if (absl::EqualsIgnoreCase(text, "NaN")) return std::numeric_limits<double>::quiet_NaN();
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The family a sample belongs to: histogram and summary samples carry a suffix.
std::string FamilyOf(const std::string& sample, const std::map<std::string, std::string>& types) {
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    absl::string_view base = sample;
    if (!absl::ConsumeSuffix(&base, suffix)) continue;
    const auto it = types.find(std::string(base));
    if (it != types.end() && (it->second == "histogram" || it->second == "summary")) {
      return std::string(base);
    }
  }
  return sample;
}

bool Matches(const LabelSet& have, const LabelSet& want) {
  for (const auto& [key, value] : want) {
    const auto it = have.find(key);
    if (it == have.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

std::optional<double> Exposition::Value(absl::string_view name, const LabelSet& labels) const {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

double Exposition::Sum(absl::string_view name, const LabelSet& labels) const {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name == name && Matches(s.labels, labels)) sum += s.value;
  }
  return sum;
}

int Exposition::Count(absl::string_view name) const {
  int count = 0;
  for (const Sample& s : samples) count += s.name == name ? 1 : 0;
  return count;
}

absl::StatusOr<Exposition> ParseExposition(absl::string_view text) {
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the exposition does not end with a newline");
  }
  Exposition out;
  std::set<std::string> finished;  // families whose samples are behind us
  std::string current;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_number;
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, " (", why, "): ", line));
    };
    for (char c : line) {
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return bad("control character");
    }
    const bool is_help = absl::ConsumePrefix(&line, "# HELP ");
    if (is_help || absl::ConsumePrefix(&line, "# TYPE ")) {
      std::optional<std::string> name = ConsumeName(line);
      if (!name || !absl::ConsumePrefix(&line, " ")) return bad("no metric name");
      if (finished.count(*name) != 0 || current == *name) {
        return bad("HELP or TYPE after the family's samples");
      }
      std::map<std::string, std::string>& map = is_help ? out.help : out.type;
      if (!map.emplace(*name, std::string(line)).second) return bad("repeated HELP or TYPE");
      if (!is_help && line != "counter" && line != "gauge" && line != "histogram" &&
          line != "summary" && line != "untyped") {
        return bad("unknown type");
      }
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;

    Sample sample;
    std::optional<std::string> name = ConsumeName(line);
    if (!name) return bad("no metric name");
    sample.name = *name;
    if (absl::ConsumePrefix(&line, "{")) {
      while (!absl::ConsumePrefix(&line, "}")) {
        std::optional<std::string> label = ConsumeName(line);
        if (!label || !absl::ConsumePrefix(&line, "=")) return bad("bad label name");
        std::optional<std::string> value = ConsumeQuoted(line);
        if (!value) return bad("bad label value");
        if (!sample.labels.emplace(*label, *value).second) return bad("repeated label");
        if (!absl::ConsumePrefix(&line, ",") && !absl::StartsWith(line, "}")) {
          return bad("no ',' or '}' after a label");
        }
      }
    }
    if (!absl::ConsumePrefix(&line, " ")) return bad("no space before the value");
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 2) return bad("trailing fields");
    std::optional<double> value = ParseValue(fields[0]);
    int64_t timestamp = 0;
    if (!value) return bad("bad value");
    if (fields.size() == 2 && !absl::SimpleAtoi(fields[1], &timestamp)) return bad("bad timestamp");
    sample.value = *value;

    const std::string family = FamilyOf(sample.name, out.type);
    if (family != current) {
      if (finished.count(family) != 0) return bad("the family's samples are not contiguous");
      if (!current.empty()) finished.insert(current);
      current = family;
    }
    out.samples.push_back(std::move(sample));
  }
  return out;
}

}  // namespace qmm::testing
