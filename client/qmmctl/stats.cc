#include "client/qmmctl/stats.h"

#include <algorithm>
#include <cmath>

namespace qmm::ctl {
namespace {

absl::Duration NearestRank(const std::vector<absl::Duration>& sorted, int percent) {
  const size_t n = sorted.size();
  const size_t rank = (static_cast<size_t>(percent) * n + 99) / 100;  // ceil(p * n / 100)
  return sorted[std::max<size_t>(rank, 1) - 1];
}

}  // namespace

ValueSummary SummarizeValues(std::span<const float> values) {
  ValueSummary s;
  s.count = static_cast<int64_t>(values.size());
  // Welford's update: one pass, no cancellation for large means.
  double mean = 0;
  double m2 = 0;
  int64_t finite = 0;
  for (float v : values) {
    if (!std::isfinite(v)) {
      ++s.non_finite;
      continue;
    }
    if (finite == 0) {
      s.min = v;
      s.max = v;
    } else {
      s.min = std::min<double>(s.min, v);
      s.max = std::max<double>(s.max, v);
    }
    ++finite;
    const double delta = v - mean;
    mean += delta / static_cast<double>(finite);
    m2 += delta * (v - mean);
  }
  if (finite > 0) {
    s.mean = mean;
    s.stddev = std::sqrt(m2 / static_cast<double>(finite));
  }
  return s;
}

LatencySummary SummarizeLatencies(std::vector<absl::Duration> samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = static_cast<int64_t>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.p50 = NearestRank(samples, 50);
  s.p90 = NearestRank(samples, 90);
  s.p99 = NearestRank(samples, 99);
  absl::Duration total;
  for (absl::Duration d : samples) total += d;
  s.mean = total / static_cast<int64_t>(samples.size());
  return s;
}

double MeanMs(const inference::StatisticDuration& d) {
  return d.count() > 0 ? static_cast<double>(d.ns()) / static_cast<double>(d.count()) * 1e-6 : 0;
}

}  // namespace qmm::ctl
