// The standard process_* metrics (as the Go and Python clients export them), which
// prometheus-cpp lacks: read from /proc/self on every Collect(), so they cost nothing
// between scrapes.
//
// Exports process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds and
// process_start_time_seconds. A value that cannot be read (no /proc) is left out of the
// scrape rather than reported as a wrong number.
//
// Thread-safe: Collect() keeps no state.
#ifndef QMM_SERVER_PROCESS_METRICS_H_
#define QMM_SERVER_PROCESS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace qmm {

// The fields of /proc/<pid>/stat that the metrics use, in the kernel's units.
struct ProcStat {
  int64_t utime_ticks = 0;
  int64_t stime_ticks = 0;
  int64_t start_ticks = 0;  // since boot
  int64_t vsize_bytes = 0;
  int64_t rss_pages = 0;
};

// Parses one /proc/<pid>/stat line; nullopt when it is malformed. The command name may
// hold spaces and parentheses, so fields are counted from its last ')'.
std::optional<ProcStat> ParseProcStat(absl::string_view text);

// The boot time (seconds since the epoch) from the `btime` line of /proc/stat.
std::optional<int64_t> ParseBootTime(absl::string_view proc_stat);

// The soft "Max open files" limit from /proc/<pid>/limits; nullopt when it is
// "unlimited" or missing.
std::optional<int64_t> ParseMaxOpenFiles(absl::string_view proc_limits);

class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace qmm

#endif  // QMM_SERVER_PROCESS_METRICS_H_
