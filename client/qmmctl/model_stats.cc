// qmmctl stats: one line per weight or model, from the server's ModelStatistics: what its
// requests did since it was stored, and where their time went inside the server.
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/qmmctl/commands.h"
#include "client/qmmctl/stats.h"

namespace qmm::ctl {
namespace {

std::string LastRequest(uint64_t unix_ms) {
  if (unix_ms == 0) return "never";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                          absl::FromUnixMillis(static_cast<int64_t>(unix_ms)), absl::UTCTimeZone());
}

}  // namespace

absl::Status RunStats(Client& client, const std::string& name) {
  absl::StatusOr<inference::ModelStatisticsResponse> stats = client.Statistics(name);
  if (!stats.ok()) return stats.status();
  std::printf("%-32s %10s %8s %10s %9s %8s  %-42s %s\n", "NAME", "REQUESTS", "FAILED", "ROWS",
              "LAUNCHES", "ROWS/L", "MEAN MS: TOTAL QUEUED IN COMPUTE OUT", "LAST REQUEST");
  for (const inference::ModelStatistics& m : stats->model_stats()) {
    const inference::InferStatistics& s = m.inference_stats();
    const double rows_per_launch =
        m.execution_count() > 0
            ? static_cast<double>(m.inference_count()) / static_cast<double>(m.execution_count())
            : 0;
    const std::string means = absl::StrFormat(
        "%.3f %.3f %.3f %.3f %.3f", MeanMs(s.success()), MeanMs(s.queue()),
        MeanMs(s.compute_input()), MeanMs(s.compute_infer()), MeanMs(s.compute_output()));
    std::printf("%-32s %10llu %8llu %10llu %9llu %8.2f  %-42s %s\n", m.name().c_str(),
                static_cast<unsigned long long>(s.success().count()),
                static_cast<unsigned long long>(s.fail().count()),
                static_cast<unsigned long long>(m.inference_count()),
                static_cast<unsigned long long>(m.execution_count()), rows_per_launch,
                means.c_str(), LastRequest(m.last_inference()).c_str());
  }
  return absl::OkStatus();
}

}  // namespace qmm::ctl
