// Runs the Debian `prometheus` package's promtool from tests, which skip themselves where
// it is not installed.
#ifndef QMM_TESTS_SERVER_PROMTOOL_H_
#define QMM_TESTS_SERVER_PROMTOOL_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace qmm::testing {

// The path of an executable named `name` on $PATH; nullopt when there is none.
std::optional<std::string> FindOnPath(absl::string_view name);

// Runs `promtool check metrics` on `exposition`. OK when it found nothing to report;
// FAILED_PRECONDITION carrying promtool's output for a parse error or a lint finding.
absl::Status PromtoolCheckMetrics(absl::string_view exposition);

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_PROMTOOL_H_
