// qmmctl matmul: y = x * W^T on the server, repeated and timed, optionally written to .npy
// and checked against a float64 reference.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/npy.h"
#include "client/qmmctl/commands.h"
#include "client/qmmctl/names.h"
#include "client/qmmctl/stats.h"
#include "client/qmmctl/verify.h"
#include "client/random_data.h"
#include "proto/enum_convert.h"

namespace qmm::ctl {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string_view WireName(ElementType type) {
  const std::optional<DType> wire = ToWireDType(type);
  return wire ? DTypeName(*wire) : ElementTypeName(type);
}

// Checks each flag given against what the server holds.
absl::Status CheckWeightFlags(const MatMulOptions& o, const v1::WeightInfo& w) {
  const std::string scheme = ProtoSchemeName(w.scheme());
  if (o.scheme && SchemeFlagName(*o.scheme) != scheme) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight '", w.name(), "' is ", scheme,
                     ", not --scheme=", std::string(SchemeFlagName(*o.scheme))));
  }
  if ((o.n && *o.n != w.n()) || (o.k && *o.k != w.k())) {
    return absl::InvalidArgumentError(absl::StrCat("weight '", w.name(), "' is [", w.n(), ", ",
                                                   w.k(), "], not --n=", o.n.value_or(w.n()),
                                                   " --k=", o.k.value_or(w.k())));
  }
  if (o.group_size && *o.group_size != w.group_size()) {
    return absl::InvalidArgumentError(absl::StrCat("weight '", w.name(), "' has group_size ",
                                                   w.group_size(),
                                                   ", not --group_size=", *o.group_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<NdArray> LoadActivations(const MatMulOptions& o, int64_t k) {
  if (!o.npy_path) {
    if (o.m < 1) return absl::InvalidArgumentError("--m must be at least 1");
    const std::vector<float> x = RandomActivationValues(o.m, k, o.seed);
    return FromFloats(o.dtype.value_or(DType::kF32), {o.m, k}, x);
  }
  absl::StatusOr<NdArray> x = ReadNpy(*o.npy_path);
  if (!x.ok()) return x.status();
  if (x->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        *o.npy_path, " has shape ", ShapeString(x->shape), "; activations are 2-D [M, K]"));
  }
  const std::optional<DType> file_dtype = ToWireDType(x->type);
  const DType dtype = o.dtype.value_or(file_dtype.value_or(DType::kF32));
  if (file_dtype == dtype) return x;
  return FromFloats(dtype, x->shape, ToFloats(*x));
}

struct Runs {
  MatMulResult last;
  std::vector<absl::Duration> latencies;
  std::vector<int64_t> compute_ns;
};

absl::StatusOr<Runs> RunRepeats(Client& client, const MatMulOptions& o, const NdArray& x) {
  Runs runs;
  std::unique_ptr<MatMulStream> stream;
  if (o.stream) {
    absl::StatusOr<std::unique_ptr<MatMulStream>> opened = client.OpenMatMulStream();
    if (!opened.ok()) return opened.status();
    stream = *std::move(opened);
  }
  for (int r = 0; r < o.repeat; ++r) {
    const absl::Time start = absl::Now();
    absl::StatusOr<MatMulResult> result = stream ? stream->Call(o.weight, x, o.output_dtype)
                                                 : client.MatMul(o.weight, x, o.output_dtype);
    if (!result.ok()) return result.status();
    runs.latencies.push_back(absl::Now() - start);
    runs.compute_ns.push_back(result->compute_ns);
    runs.last = *std::move(result);
  }
  if (stream) {
    if (absl::Status status = stream->Finish(); !status.ok()) return status;
  }
  return runs;
}

void PrintSummary(const MatMulOptions& o, const NdArray& x, const Runs& runs,
                  const std::vector<float>& y) {
  const NdArray& out = runs.last.output;
  std::printf("matmul %s: x %s %s -> y %s %s\n", o.weight.c_str(), ShapeString(x.shape).c_str(),
              std::string(WireName(x.type)).c_str(), ShapeString(out.shape).c_str(),
              std::string(WireName(out.type)).c_str());
  const ValueSummary s = SummarizeValues(y);
  std::printf("  y: mean=%.6g std=%.6g min=%.6g max=%.6g", s.mean, s.stddev, s.min, s.max);
  if (s.non_finite > 0) std::printf(" non-finite=%lld", static_cast<long long>(s.non_finite));
  std::printf("\n");
  const int64_t n = out.shape.size() == 2 ? out.shape[1] : static_cast<int64_t>(y.size());
  const int64_t shown = std::min<int64_t>(n, 6);
  std::vector<std::string> values;
  for (int64_t i = 0; i < shown; ++i) values.push_back(absl::StrFormat("%.6g", y[i]));
  std::printf("  y[0, :%lld] = %s%s\n", static_cast<long long>(shown),
              absl::StrJoin(values, " ").c_str(), shown < n ? " ..." : "");

  std::vector<int64_t> compute = runs.compute_ns;
  std::sort(compute.begin(), compute.end());
  std::printf("  server compute: %.3f ms (median of %zu)\n", compute[compute.size() / 2] / 1e6,
              compute.size());
  const LatencySummary l = SummarizeLatencies(runs.latencies);
  std::printf(
      "  latency over %lld %s: p50=%.3f ms p90=%.3f ms p99=%.3f ms min=%.3f ms mean=%.3f ms\n",
      static_cast<long long>(l.count), o.stream ? "streamed calls" : "calls", Ms(l.p50), Ms(l.p90),
      Ms(l.p99), Ms(l.min), Ms(l.mean));
}

absl::StatusOr<bool> Verify(Client& client, const MatMulOptions& o, const v1::WeightInfo& w,
                            const NdArray& x, const NdArray& out, const std::vector<float>& y) {
  const std::optional<Scheme> scheme = SchemeFromProto(w.scheme());
  if (!scheme) return absl::InvalidArgumentError("the weight's scheme is unknown to qmmctl");
  // The reference sees the activations as the server did, after rounding to the wire dtype.
  const std::vector<float> x_sent = ToFloats(x);
  absl::StatusOr<std::vector<double>> reference = ReferenceForRandomWeight(
      *scheme, {w.n(), w.k(), w.group_size(), w.zero_points(), w.act_order()}, *o.verify_seed,
      x_sent, x.shape[0]);
  if (!reference.ok()) return reference.status();
  double tolerance = o.tolerance;
  std::string backend = "given";
  if (tolerance <= 0) {
    absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
    if (!info.ok()) return info.status();
    backend = info->backend();
    tolerance = DefaultTolerance(*scheme, ToWireDType(out.type).value_or(DType::kF32), backend);
  }
  const Comparison c = CompareWithReference(y, *reference, tolerance);
  std::printf(
      "  verify (seed %llu, float64 reference): max|y-ref|=%.3g max|ref|=%.3g relative=%.3g "
      "tolerance=%.3g (%s)",
      static_cast<unsigned long long>(*o.verify_seed), c.max_abs_error, c.max_abs_reference,
      c.relative_error, tolerance, backend.c_str());
  if (c.non_finite > 0) std::printf(" non-finite=%lld", static_cast<long long>(c.non_finite));
  std::printf(": %s\n", c.passed ? "PASS" : "FAIL");
  return c.passed;
}

}  // namespace

absl::StatusOr<bool> RunMatMul(Client& client, const MatMulOptions& o) {
  if (o.weight.empty()) return absl::InvalidArgumentError("matmul needs --weight");
  if (o.repeat < 1) return absl::InvalidArgumentError("--repeat must be at least 1");
  absl::StatusOr<v1::WeightInfo> weight = client.GetWeight(o.weight);
  if (!weight.ok()) return weight.status();
  if (absl::Status status = CheckWeightFlags(o, *weight); !status.ok()) return status;
  absl::StatusOr<NdArray> x = LoadActivations(o, weight->k());
  if (!x.ok()) return x.status();

  absl::StatusOr<Runs> runs = RunRepeats(client, o, *x);
  if (!runs.ok()) return runs.status();
  const NdArray& out = runs->last.output;
  const std::vector<float> y = ToFloats(out);
  PrintSummary(o, *x, *runs, y);

  if (!o.output_path.empty()) {
    // .npy has no bf16: such results are written widened to f32, exactly.
    const bool widen = out.type == ElementType::kBF16;
    absl::Status status =
        WriteNpy(o.output_path, widen ? FromFloats(DType::kF32, out.shape, y) : out);
    if (!status.ok()) return status;
    std::printf("  wrote %s%s\n", o.output_path.c_str(), widen ? " (bf16 widened to f32)" : "");
  }
  if (!o.verify_seed) return true;
  return Verify(client, o, *weight, *x, out, y);
}

}  // namespace qmm::ctl
