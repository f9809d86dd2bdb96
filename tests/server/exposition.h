// A strict reader of the Prometheus text exposition format (0.0.4), for tests that check
// what qmm serves at /metrics: every line must parse, HELP and TYPE appear at most once
// per family and before its samples, and label values are unescaped.
#ifndef QMM_TESTS_SERVER_EXPOSITION_H_
#define QMM_TESTS_SERVER_EXPOSITION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace qmm::testing {

using LabelSet = std::map<std::string, std::string>;

struct Sample {
  std::string name;  // e.g. qmm_request_duration_seconds_count
  LabelSet labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> help;  // family name -> text
  std::map<std::string, std::string> type;  // family name -> counter|gauge|histogram|...

  // The sample with exactly these labels; nullopt when there is none.
  std::optional<double> Value(absl::string_view name, const LabelSet& labels = {}) const;
  // The sum of the samples named `name` whose labels include all of `labels`.
  double Sum(absl::string_view name, const LabelSet& labels = {}) const;
  // How many samples are named `name`.
  int Count(absl::string_view name) const;
};

// INVALID_ARGUMENT naming the line for anything malformed.
absl::StatusOr<Exposition> ParseExposition(absl::string_view text);

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_EXPOSITION_H_
