#include "server/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace qmm {
namespace {

// Field numbers of proc(5), counted from the state field (3) after the command name.
constexpr int kFirstFieldAfterComm = 3;
constexpr int kUtime = 14 - kFirstFieldAfterComm;
constexpr int kStime = 15 - kFirstFieldAfterComm;
constexpr int kStartTime = 22 - kFirstFieldAfterComm;
constexpr int kVsize = 23 - kFirstFieldAfterComm;
constexpr int kRss = 24 - kFirstFieldAfterComm;

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

std::optional<int64_t> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  int64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  // The descriptor opendir itself holds is not one of the process's own.
  return count - 1;
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

}  // namespace

std::optional<ProcStat> ParseProcStat(absl::string_view text) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text.substr(close + 1)), ' ', absl::SkipEmpty());
  if (static_cast<int>(fields.size()) <= kRss) return std::nullopt;
  ProcStat stat;
  if (!absl::SimpleAtoi(fields[kUtime], &stat.utime_ticks) ||
      !absl::SimpleAtoi(fields[kStime], &stat.stime_ticks) ||
      !absl::SimpleAtoi(fields[kStartTime], &stat.start_ticks) ||
      !absl::SimpleAtoi(fields[kVsize], &stat.vsize_bytes) ||
      !absl::SimpleAtoi(fields[kRss], &stat.rss_pages)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<int64_t> ParseBootTime(absl::string_view proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      int64_t seconds = 0;
      if (absl::SimpleAtoi(line, &seconds)) return seconds;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> ParseMaxOpenFiles(absl::string_view proc_limits) {
  for (absl::string_view line : absl::StrSplit(proc_limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t soft = 0;
    if (!fields.empty() && absl::SimpleAtoi(fields[0], &soft)) return soft;
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  const std::optional<std::string> stat_text = ReadFile("/proc/self/stat");
  const std::optional<ProcStat> stat =
      stat_text ? ParseProcStat(*stat_text) : std::optional<ProcStat>();
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (stat && ticks_per_second > 0 && page_bytes > 0) {
    const double ticks = static_cast<double>(ticks_per_second);
    families.push_back(
        Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
               MetricType::Counter, (stat->utime_ticks + stat->stime_ticks) / ticks));
    families.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                              MetricType::Gauge,
                              static_cast<double>(stat->rss_pages) * page_bytes));
    families.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                              MetricType::Gauge, static_cast<double>(stat->vsize_bytes)));
    const std::optional<std::string> proc_stat = ReadFile("/proc/stat");
    const std::optional<int64_t> boot = proc_stat ? ParseBootTime(*proc_stat) : std::nullopt;
    if (boot) {
      families.push_back(Family("process_start_time_seconds",
                                "Start time of the process since unix epoch in seconds.",
                                MetricType::Gauge, *boot + stat->start_ticks / ticks));
    }
  }
  if (const std::optional<int64_t> fds = CountOpenFds()) {
    families.push_back(Family("process_open_fds", "Number of open file descriptors.",
                              MetricType::Gauge, static_cast<double>(*fds)));
  }
  const std::optional<std::string> limits = ReadFile("/proc/self/limits");
  if (const std::optional<int64_t> max_fds = limits ? ParseMaxOpenFiles(*limits) : std::nullopt) {
    families.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                              MetricType::Gauge, static_cast<double>(*max_fds)));
  }
  return families;
}

}  // namespace qmm
