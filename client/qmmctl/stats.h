// Summaries qmmctl prints: value statistics of a result, latency percentiles, and means of
// the server's statistics.
#ifndef QMM_CLIENT_QMMCTL_STATS_H_
#define QMM_CLIENT_QMMCTL_STATS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/time/time.h"
#include "inference/open_inference.pb.h"

namespace qmm::ctl {

struct ValueSummary {
  int64_t count = 0;
  int64_t non_finite = 0;  // NaN and Inf, left out of the statistics below
  double mean = 0;
  double stddev = 0;  // population standard deviation
  double min = 0;
  double max = 0;
};

ValueSummary SummarizeValues(std::span<const float> values);

struct LatencySummary {
  int64_t count = 0;
  absl::Duration min;
  absl::Duration p50;
  absl::Duration p90;
  absl::Duration p99;
  absl::Duration max;
  absl::Duration mean;
};

// Nearest-rank percentiles (the smallest sample at or above p% of them); all zero for
// no samples.
LatencySummary SummarizeLatencies(std::vector<absl::Duration> samples);

// The mean of a server statistic's durations (ModelStatistics) in milliseconds; 0 without
// events.
double MeanMs(const inference::StatisticDuration& d);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_STATS_H_
