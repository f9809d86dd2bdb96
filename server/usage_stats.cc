#include "server/usage_stats.h"

#include <algorithm>

namespace qmm {
namespace {

uint64_t Ns(absl::Duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}
uint64_t Ns(int64_t ns) { return static_cast<uint64_t>(std::max<int64_t>(0, ns)); }

void Add(UsageStats::Duration& d, uint64_t ns) {
  ++d.count;
  d.ns += ns;
}

}  // namespace

void UsageStats::RecordArrival(absl::Time when) {
  absl::MutexLock lock(&mu_);
  stats_.last_request = std::max(stats_.last_request, when);
}

void UsageStats::RecordLaunch(int64_t rows, const LaunchTimes& times,
                              std::span<const RequestTimes> requests) {
  const uint64_t input = Ns(times.input_ns);
  const uint64_t infer = Ns(times.infer_ns);
  const uint64_t output = Ns(times.output_ns);
  absl::MutexLock lock(&mu_);
  ++stats_.launches;
  BatchTimes& batch = stats_.batches[rows];
  ++batch.count;
  batch.input_ns += input;
  batch.infer_ns += infer;
  batch.output_ns += output;
  for (const RequestTimes& r : requests) {
    stats_.rows += static_cast<uint64_t>(r.rows);
    Add(stats_.success, Ns(r.total));
    Add(stats_.queue, Ns(r.queued));
    Add(stats_.compute_input, input);
    Add(stats_.compute_infer, infer);
    Add(stats_.compute_output, output);
  }
}

void UsageStats::RecordFailure(absl::Duration total) {
  absl::MutexLock lock(&mu_);
  Add(stats_.fail, Ns(total));
}

UsageStats::Snapshot UsageStats::snapshot() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace qmm
