// The statistics of one weight or model that the Open Inference Protocol reports
// (ModelStatistics, Triton's statistics extension): counts and durations since it was
// stored, whichever API its requests came through. The batcher records them; each stored
// weight and model holds its own (StoredWeight::usage, StoredModel::usage), so a weight
// uploaded again under its name starts from zero, as a model reloaded by Triton does.
//
// Thread-safe: every method may be called from any thread.
#ifndef QMM_SERVER_USAGE_STATS_H_
#define QMM_SERVER_USAGE_STATS_H_

#include <cstdint>
#include <map>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace qmm {

class UsageStats {
 public:
  // A count of events and their total time.
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  // A launch's phases: the inputs' copy to the device, the computation, the outputs' copy
  // back (nanoseconds; 0 where the backend has no such phase).
  struct LaunchTimes {
    int64_t input_ns = 0;
    int64_t infer_ns = 0;
    int64_t output_ns = 0;
  };
  // One request of a successful launch.
  struct RequestTimes {
    int64_t rows = 0;
    absl::Duration queued;  // from joining the queue to its launch's start
    absl::Duration total;   // from joining the queue to its result
  };
  // The successful launches of one batch size.
  struct BatchTimes {
    uint64_t count = 0;
    uint64_t input_ns = 0;
    uint64_t infer_ns = 0;
    uint64_t output_ns = 0;
  };
  struct Snapshot {
    absl::Time last_request = absl::UnixEpoch();  // the epoch: never
    uint64_t rows = 0;                            // of successful requests
    uint64_t launches = 0;                        // successful ones
    Duration success;
    Duration fail;
    Duration queue;  // of successful requests, as the compute durations below
    Duration compute_input;
    Duration compute_infer;
    Duration compute_output;
    std::map<int64_t, BatchTimes> batches;  // by rows per launch
  };

  UsageStats() = default;
  UsageStats(const UsageStats&) = delete;
  UsageStats& operator=(const UsageStats&) = delete;

  // A request joined the queue at `when`.
  void RecordArrival(absl::Time when);
  // A launch of `rows` rows succeeded with `times`, carrying `requests` (which a launch of
  // several requests counts each for the launch's whole times, as Triton does).
  void RecordLaunch(int64_t rows, const LaunchTimes& times, std::span<const RequestTimes> requests);
  // A request failed after `total` in the queue or in its launch.
  void RecordFailure(absl::Duration total);

  Snapshot snapshot() const;

 private:
  mutable absl::Mutex mu_;
  Snapshot stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace qmm

#endif  // QMM_SERVER_USAGE_STATS_H_
