#include "client/qmmctl/bench_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace qmm::ctl {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Requests per launch and rows per launch of a batching delta, 0 without launches.
double PerLaunch(int64_t total, int64_t launches) {
  return launches > 0 ? static_cast<double>(total) / static_cast<double>(launches) : 0;
}

int64_t Dropped(const v1::BatchingStats& b) {
  return b.rejected_queue_full() + b.dropped_deadline() + b.dropped_cancelled() +
         b.dropped_weight_deleted();
}

void SubtractDuration(const inference::StatisticDuration& before, inference::StatisticDuration* d) {
  d->set_count(d->count() - before.count());
  d->set_ns(d->ns() - before.ns());
}

nlohmann::ordered_json LatencyJson(const LatencySummary& l) {
  return {{"count", l.count}, {"min", Ms(l.min)}, {"p50", Ms(l.p50)},  {"p90", Ms(l.p90)},
          {"p99", Ms(l.p99)}, {"max", Ms(l.max)}, {"mean", Ms(l.mean)}};
}

}  // namespace

void BenchTally::RecordOk(absl::Duration latency, std::optional<int64_t> compute) {
  ++ok;
  latencies.push_back(latency);
  if (compute) compute_ns.push_back(*compute);
}

void BenchTally::RecordError(const absl::Status& status) {
  ++errors[status.code()];
  first_error.emplace(status.code(), std::string(status.message()));
}

BenchReport Summarize(const BenchSetup& setup, std::vector<BenchTally> tallies,
                      absl::Duration wall) {
  BenchReport r;
  r.setup = setup;
  r.wall = wall;
  std::vector<absl::Duration> latencies;
  std::vector<int64_t> compute;
  for (BenchTally& t : tallies) {
    r.ok += t.ok;
    for (const auto& [code, count] : t.errors) {
      r.errors += count;
      r.errors_by_code[code] += count;
    }
    for (auto& [code, message] : t.first_error) r.error_examples.emplace(code, std::move(message));
    r.verified += t.verified;
    r.mismatches += t.mismatches;
    r.max_relative_error = std::max(r.max_relative_error, t.max_relative_error);
    if (r.first_mismatch.empty()) r.first_mismatch = std::move(t.first_mismatch);
    latencies.insert(latencies.end(), t.latencies.begin(), t.latencies.end());
    compute.insert(compute.end(), t.compute_ns.begin(), t.compute_ns.end());
  }
  const double seconds = absl::ToDoubleSeconds(wall);
  if (seconds > 0) {
    r.requests_per_second = static_cast<double>(r.ok) / seconds;
    r.rows_per_second = static_cast<double>(r.ok * setup.rows) / seconds;
  }
  r.latency = SummarizeLatencies(std::move(latencies));
  if (!compute.empty()) {
    const auto middle = compute.begin() + static_cast<ptrdiff_t>(compute.size() / 2);
    std::nth_element(compute.begin(), middle, compute.end());
    r.compute_p50 = absl::Nanoseconds(*middle);
  }
  return r;
}

v1::BatchingStats BatchingDelta(const v1::BatchingStats& before, const v1::BatchingStats& after) {
  v1::BatchingStats d = after;
  d.set_launches(after.launches() - before.launches());
  d.set_failed_launches(after.failed_launches() - before.failed_launches());
  d.set_requests(after.requests() - before.requests());
  d.set_rows(after.rows() - before.rows());
  d.set_multi_request_launches(after.multi_request_launches() - before.multi_request_launches());
  d.set_rejected_queue_full(after.rejected_queue_full() - before.rejected_queue_full());
  d.set_dropped_deadline(after.dropped_deadline() - before.dropped_deadline());
  d.set_dropped_cancelled(after.dropped_cancelled() - before.dropped_cancelled());
  d.set_dropped_weight_deleted(after.dropped_weight_deleted() - before.dropped_weight_deleted());
  return d;
}

inference::ModelStatistics StatisticsDelta(const inference::ModelStatistics& before,
                                           const inference::ModelStatistics& after) {
  inference::ModelStatistics d = after;
  d.set_inference_count(after.inference_count() - before.inference_count());
  d.set_execution_count(after.execution_count() - before.execution_count());
  const inference::InferStatistics& b = before.inference_stats();
  inference::InferStatistics* s = d.mutable_inference_stats();
  SubtractDuration(b.success(), s->mutable_success());
  SubtractDuration(b.fail(), s->mutable_fail());
  SubtractDuration(b.queue(), s->mutable_queue());
  SubtractDuration(b.compute_input(), s->mutable_compute_input());
  SubtractDuration(b.compute_infer(), s->mutable_compute_infer());
  SubtractDuration(b.compute_output(), s->mutable_compute_output());
  d.clear_batch_stats();
  for (const inference::InferBatchStatistics& a : after.batch_stats()) {
    inference::InferBatchStatistics batch = a;
    for (const inference::InferBatchStatistics& e : before.batch_stats()) {
      if (e.batch_size() != a.batch_size()) continue;
      SubtractDuration(e.compute_input(), batch.mutable_compute_input());
      SubtractDuration(e.compute_infer(), batch.mutable_compute_infer());
      SubtractDuration(e.compute_output(), batch.mutable_compute_output());
    }
    if (batch.compute_infer().count() > 0) *d.add_batch_stats() = std::move(batch);
  }
  return d;
}

std::string FormatReport(const BenchReport& r) {
  const BenchSetup& s = r.setup;
  const std::string target =
      s.model ? absl::StrFormat("model %s (%d layer%s, [%d, %d])", s.weight, s.layers,
                                s.layers == 1 ? "" : "s", s.n, s.k)
              : absl::StrFormat("%s (%s [%d, %d])", s.weight, s.scheme, s.n, s.k);
  std::string out = absl::StrFormat(
      "bench %s on %s (%s%s): %d %s%s over %d %s%s, M=%d %s -> %s, %d input%s\n", target, s.server,
      s.backend, s.protocol == "qmm.v1" ? "" : absl::StrCat(", ", s.protocol), s.concurrency,
      s.stream ? "streams" : "unary callers",
      s.inflight > 1 ? absl::StrCat(" (", s.inflight, " requests in flight each)") : "", s.channels,
      s.protocol == "local" ? "local session" : "connection", s.channels == 1 ? "" : "s", s.rows,
      s.dtype, s.output_dtype, s.inputs, s.inputs == 1 ? "" : "s");
  absl::StrAppendFormat(&out, "  requests: %d ok, %d error%s", r.ok, r.errors,
                        r.errors == 1 ? "" : "s");
  if (s.verifying()) {
    std::string seeds;
    if (s.verify_seed) seeds = absl::StrCat("seed ", *s.verify_seed);
    for (const auto& [name, seed] : s.verify_seeds) {
      absl::StrAppend(&seeds, seeds.empty() ? "seeds " : ",", name, "=", seed);
    }
    absl::StrAppendFormat(&out,
                          ", %d verified against %s: %d mismatch%s (max relative error "
                          "%.3g, tolerance %.3g)",
                          r.verified, seeds, r.mismatches, r.mismatches == 1 ? "" : "es",
                          r.max_relative_error, s.tolerance);
  }
  out += "\n";
  for (const auto& [code, count] : r.errors_by_code) {
    const auto example = r.error_examples.find(code);
    absl::StrAppendFormat(&out, "    %s: %d (%s)\n", absl::StatusCodeToString(code), count,
                          example != r.error_examples.end() ? example->second : "");
  }
  if (!r.first_mismatch.empty())
    absl::StrAppendFormat(&out, "    first mismatch: %s\n", r.first_mismatch);
  absl::StrAppendFormat(&out, "  throughput: %.1f requests/s, %.1f rows/s over %.3f s\n",
                        r.requests_per_second, r.rows_per_second, absl::ToDoubleSeconds(r.wall));
  const LatencySummary& l = r.latency;
  absl::StrAppendFormat(&out,
                        "  latency: p50=%.3f ms p90=%.3f ms p99=%.3f ms max=%.3f ms "
                        "mean=%.3f ms\n",
                        Ms(l.p50), Ms(l.p90), Ms(l.p99), Ms(l.max), Ms(l.mean));
  if (r.compute_p50) {
    absl::StrAppendFormat(&out, "  server compute per batch: p50=%.3f ms\n", Ms(*r.compute_p50));
  }
  if (r.batching) {
    const v1::BatchingStats& b = *r.batching;
    absl::StrAppendFormat(&out,
                          "  server batching: %d launches, %.2f requests/launch, %.2f rows/launch, "
                          "%d dropped (max_batch_rows=%d; since the server started, at most %d "
                          "requests and %d rows in one launch)\n",
                          b.launches(), PerLaunch(b.requests(), b.launches()),
                          PerLaunch(b.rows(), b.launches()), Dropped(b), b.max_batch_rows(),
                          b.max_requests_per_launch(), b.max_rows_per_launch());
  }
  if (r.server_model) {
    const inference::InferStatistics& m = r.server_model->inference_stats();
    absl::StrAppendFormat(&out,
                          "  server, per request of %s: %.3f ms from its queue to its result, "
                          "%.3f ms queued; its launch %.3f ms in, %.3f ms compute, %.3f ms out "
                          "(%d requests, %d failed, in %d launches)\n",
                          s.weight, MeanMs(m.success()), MeanMs(m.queue()),
                          MeanMs(m.compute_input()), MeanMs(m.compute_infer()),
                          MeanMs(m.compute_output()), m.success().count(), m.fail().count(),
                          r.server_model->execution_count());
  }
  if (!r.passed()) out += "  FAIL: there were errors or mismatches\n";
  return out;
}

nlohmann::ordered_json ReportJson(const BenchReport& r) {
  const BenchSetup& s = r.setup;
  nlohmann::ordered_json setup = {
      {"server", s.server},
      {s.model ? "model" : "weight", s.weight},
      {"scheme", s.scheme},
      {"n", s.n},
      {"k", s.k},
      {"group_size", s.group_size},
      {"backend", s.backend},
      {"device", s.device},
      {"concurrency", s.concurrency},
      {"stream", s.stream},
      {"inflight", s.inflight},
      {"protocol", s.protocol},
      {"channels", s.channels},
      {"rows", s.rows},
      {"dtype", s.dtype},
      {"output_dtype", s.output_dtype},
      {"inputs", s.inputs},
      {"warmup", s.warmup},
      {"requests",
       s.requests ? nlohmann::ordered_json(*s.requests) : nlohmann::ordered_json(nullptr)},
      {"duration_s", s.duration ? nlohmann::ordered_json(absl::ToDoubleSeconds(*s.duration))
                                : nlohmann::ordered_json(nullptr)},
      {"verify_seed",
       s.verify_seed ? nlohmann::ordered_json(*s.verify_seed) : nlohmann::ordered_json(nullptr)},
      {"verify_seeds", s.verify_seeds},
      {"tolerance", s.tolerance},
  };
  if (s.model) setup["layers"] = s.layers;
  nlohmann::ordered_json errors = nlohmann::ordered_json::object();
  for (const auto& [code, count] : r.errors_by_code) {
    errors[absl::StatusCodeToString(code)] = count;
  }
  nlohmann::ordered_json examples = nlohmann::ordered_json::object();
  for (const auto& [code, message] : r.error_examples) {
    examples[absl::StatusCodeToString(code)] = message;
  }
  nlohmann::ordered_json out = {
      {"setup", setup},
      {"ok", r.ok},
      {"errors", r.errors},
      {"errors_by_code", errors},
      {"error_examples", examples},
      {"verified", r.verified},
      {"mismatches", r.mismatches},
      {"first_mismatch", r.first_mismatch},
      {"max_relative_error", r.max_relative_error},
      {"wall_s", absl::ToDoubleSeconds(r.wall)},
      {"requests_per_s", r.requests_per_second},
      {"rows_per_s", r.rows_per_second},
      {"latency_ms", LatencyJson(r.latency)},
      {"server_compute_p50_ms",
       r.compute_p50 ? nlohmann::ordered_json(Ms(*r.compute_p50)) : nlohmann::ordered_json()},
      {"passed", r.passed()},
  };
  if (r.batching) {
    const v1::BatchingStats& b = *r.batching;
    out["server_batching"] = {
        {"max_batch_rows", b.max_batch_rows()},
        {"max_queue_delay_us", b.max_queue_delay_us()},
        {"max_queue_rows", b.max_queue_rows()},
        {"launches", b.launches()},
        {"failed_launches", b.failed_launches()},
        {"requests", b.requests()},
        {"rows", b.rows()},
        {"requests_per_launch", PerLaunch(b.requests(), b.launches())},
        {"rows_per_launch", PerLaunch(b.rows(), b.launches())},
        {"multi_request_launches", b.multi_request_launches()},
        {"max_requests_per_launch", b.max_requests_per_launch()},
        {"max_rows_per_launch", b.max_rows_per_launch()},
        {"rejected_queue_full", b.rejected_queue_full()},
        {"dropped_deadline", b.dropped_deadline()},
        {"dropped_cancelled", b.dropped_cancelled()},
        {"dropped_weight_deleted", b.dropped_weight_deleted()},
    };
  }
  if (r.server_model) {
    const inference::InferStatistics& m = r.server_model->inference_stats();
    out["server_model"] = {
        {"requests", m.success().count()},
        {"failed", m.fail().count()},
        {"rows", r.server_model->inference_count()},
        {"launches", r.server_model->execution_count()},
        {"mean_ms",
         {{"total", MeanMs(m.success())},
          {"queued", MeanMs(m.queue())},
          {"compute_input", MeanMs(m.compute_input())},
          {"compute_infer", MeanMs(m.compute_infer())},
          {"compute_output", MeanMs(m.compute_output())}}},
    };
  }
  return out;
}

}  // namespace qmm::ctl
