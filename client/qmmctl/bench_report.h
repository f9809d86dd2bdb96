// qmmctl bench's bookkeeping: what each caller saw (BenchTally), the whole run summed up
// (BenchReport), and the report as text on stdout and as JSON.
#ifndef QMM_CLIENT_QMMCTL_BENCH_REPORT_H_
#define QMM_CLIENT_QMMCTL_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/qmmctl/stats.h"
#include "inference/open_inference.pb.h"
#include "nlohmann/json.hpp"
#include "qmm/v1/qmm.pb.h"

namespace qmm::ctl {

// One caller's results; only that caller's thread writes it.
struct BenchTally {
  std::vector<absl::Duration> latencies;  // of the successful requests
  std::vector<int64_t> compute_ns;        // the server's time of their batches
  int64_t ok = 0;
  std::map<absl::StatusCode, int64_t> errors;
  std::map<absl::StatusCode, std::string> first_error;  // one message per code
  int64_t verified = 0;
  int64_t mismatches = 0;
  double max_relative_error = 0;  // over the verified results
  std::string first_mismatch;

  // `compute`: the server's batch time, when its answer says (qmm.v1's does).
  void RecordOk(absl::Duration latency, std::optional<int64_t> compute);
  void RecordError(const absl::Status& status);
};

// What the run was; echoed in the report.
struct BenchSetup {
  std::string server;
  // A weight's name, or with `model`, a model's.
  std::string weight;
  bool model = false;
  int layers = 0;  // the model's
  // As qmmctl spells it, "w4a16"; "model" or "token model".
  std::string scheme;
  int64_t n = 0;  // N, or the model's out_features
  int64_t k = 0;  // K, the model's in_features, or a token model's vocabulary
  int32_t group_size = 0;
  std::string backend;  // the server's, "cpu" or "cuda"
  std::string device;
  int concurrency = 0;
  bool stream = false;
  int inflight = 1;  // requests a stream keeps ahead of their answers
  // "qmm.v1" (MatMul, MatMulStream) or "open-inference" (ModelInfer, ModelStreamInfer).
  std::string protocol = "qmm.v1";
  int channels = 0;
  int64_t rows = 0;
  std::string dtype;
  std::string output_dtype;
  int inputs = 0;
  std::optional<int64_t> requests;         // the run's bound: a count ...
  std::optional<absl::Duration> duration;  // ... or a time
  int warmup = 0;
  std::optional<uint64_t> verify_seed;
  std::map<std::string, uint64_t> verify_seeds;  // a model's weights'
  double tolerance = 0;

  bool verifying() const { return verify_seed.has_value() || !verify_seeds.empty(); }
};

struct BenchReport {
  BenchSetup setup;
  absl::Duration wall;  // the measured phase, first request sent to last answer
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<absl::StatusCode, int64_t> errors_by_code;
  std::map<absl::StatusCode, std::string> error_examples;
  int64_t verified = 0;
  int64_t mismatches = 0;
  double max_relative_error = 0;
  std::string first_mismatch;
  double requests_per_second = 0;  // successful ones
  double rows_per_second = 0;
  LatencySummary latency;
  // The server's batch time, median over the requests; absent when the answers do not
  // carry it (the Open Inference Protocol's).
  std::optional<absl::Duration> compute_p50;
  // The server's batcher over the run (counters as differences; limits and maxima as
  // the server reported them at the end). Absent when ServerInfo did not answer.
  std::optional<v1::BatchingStats> batching;
  // The weight's (or model's) own statistics over the run (ModelStatistics of the Open
  // Inference Protocol, as differences): where its requests' time went inside the server.
  // Absent when the server does not answer ModelStatistics.
  std::optional<inference::ModelStatistics> server_model;

  // No errors and no mismatches.
  bool passed() const { return errors == 0 && mismatches == 0; }
};

// Sums the callers' tallies (consumed) over a measured phase of `wall`.
BenchReport Summarize(const BenchSetup& setup, std::vector<BenchTally> tallies,
                      absl::Duration wall);

// `after` minus `before` for the counters; the rest from `after`.
v1::BatchingStats BatchingDelta(const v1::BatchingStats& before, const v1::BatchingStats& after);

// `after` minus `before` for the counts and durations (the batch sizes matched by size);
// name, version and last_inference from `after`.
inference::ModelStatistics StatisticsDelta(const inference::ModelStatistics& before,
                                           const inference::ModelStatistics& after);

// The human-readable report, several lines ending in '\n'.
std::string FormatReport(const BenchReport& report);
nlohmann::ordered_json ReportJson(const BenchReport& report);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_BENCH_REPORT_H_
