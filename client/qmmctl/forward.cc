// qmmctl forward: y = model(x) on the server, repeated and timed, optionally written to
// .npy and checked against a float64 reference of the whole model.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/npy.h"
#include "client/qmmctl/forward_verify.h"
#include "client/qmmctl/model_commands.h"
#include "client/qmmctl/stats.h"
#include "client/qmmctl/verify.h"
#include "client/random_data.h"
#include "proto/enum_convert.h"

namespace qmm::ctl {

absl::StatusOr<bool> RunForward(Client& client, const ForwardOptions& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("forward needs --model");
  if (o.repeat < 1) return absl::InvalidArgumentError("--repeat must be at least 1");
  absl::StatusOr<v1::ModelInfo> model = client.GetModel(o.model);
  if (!model.ok()) return model.status();

  // The input: token ids for an embedding model, activations otherwise.
  std::vector<int32_t> ids = o.token_ids;
  NdArray x;
  bool bf16_activations = false;
  if (model->token_input()) {
    if (o.npy_path) return absl::InvalidArgumentError("model takes token ids; use --tokens");
    absl::StatusOr<v1::WeightInfo> table = client.GetWeight(model->layers(0).embedding().weight());
    if (!table.ok()) return table.status();
    if (ids.empty()) ids = RandomTokenIds(o.m, table->n(), o.seed);
    bf16_activations = table->scheme() == v1::SCHEME_BF16;
  } else {
    if (!ids.empty()) return absl::InvalidArgumentError("model takes activations, not --tokens");
    if (o.npy_path) {
      absl::StatusOr<NdArray> file = ReadNpy(*o.npy_path);
      if (!file.ok()) return file.status();
      const std::optional<DType> file_dtype = ToWireDType(file->type);
      const DType dtype = o.dtype.value_or(file_dtype.value_or(DType::kF32));
      x = file_dtype == dtype ? *std::move(file) : FromFloats(dtype, file->shape, ToFloats(*file));
    } else {
      if (o.m < 1) return absl::InvalidArgumentError("--m must be at least 1");
      x = FromFloats(o.dtype.value_or(DType::kF32), {o.m, model->in_features()},
                     RandomActivationValues(o.m, model->in_features(), o.seed));
    }
    bf16_activations = x.type == ElementType::kBF16;
  }

  std::unique_ptr<ForwardStream> stream;
  if (o.stream) {
    absl::StatusOr<std::unique_ptr<ForwardStream>> opened = client.OpenForwardStream();
    if (!opened.ok()) return opened.status();
    stream = *std::move(opened);
  }
  MatMulResult last;
  std::vector<absl::Duration> latencies;
  std::vector<int64_t> compute_ns;
  for (int r = 0; r < o.repeat; ++r) {
    const absl::Time start = absl::Now();
    absl::StatusOr<MatMulResult> result =
        model->token_input() ? (stream ? stream->Call(o.model, ids, o.output_dtype)
                                       : client.Forward(o.model, ids, o.output_dtype))
                             : (stream ? stream->Call(o.model, x, o.output_dtype)
                                       : client.Forward(o.model, x, o.output_dtype));
    if (!result.ok()) return result.status();
    latencies.push_back(absl::Now() - start);
    compute_ns.push_back(result->compute_ns);
    last = *std::move(result);
  }
  if (stream) {
    if (absl::Status status = stream->Finish(); !status.ok()) return status;
  }
  const std::vector<float> y = ToFloats(last.output);
  const int64_t m = model->token_input() ? static_cast<int64_t>(ids.size()) : x.shape[0];
  std::printf("forward %s: %lld %s -> y [%s] %s\n", o.model.c_str(), static_cast<long long>(m),
              model->token_input() ? "tokens" : "rows",
              absl::StrJoin(last.output.shape, ", ").c_str(),
              std::string(ElementTypeName(last.output.type)).c_str());
  const ValueSummary s = SummarizeValues(y);
  std::printf("  y: mean=%.6g std=%.6g min=%.6g max=%.6g\n", s.mean, s.stddev, s.min, s.max);
  std::sort(compute_ns.begin(), compute_ns.end());
  const LatencySummary l = SummarizeLatencies(latencies);
  std::printf("  server compute: %.3f ms (median of %zu); latency p50=%.3f ms p99=%.3f ms\n",
              compute_ns[compute_ns.size() / 2] / 1e6, compute_ns.size(),
              absl::ToDoubleMilliseconds(l.p50), absl::ToDoubleMilliseconds(l.p99));

  if (!o.output_path.empty()) {
    const bool widen = last.output.type == ElementType::kBF16;
    if (absl::Status status = WriteNpy(
            o.output_path, widen ? FromFloats(DType::kF32, last.output.shape, y) : last.output);
        !status.ok()) {
      return status;
    }
    std::printf("  wrote %s\n", o.output_path.c_str());
  }
  if (o.verify_seeds.empty()) return true;

  absl::StatusOr<std::map<std::string, RandomWeight, std::less<>>> weights =
      RandomWeightsOf(client, *model, o.verify_seeds);
  if (!weights.ok()) return weights.status();
  bool has_w2a8 = false;
  for (const auto& [name, w] : *weights) has_w2a8 |= w.scheme == Scheme::kW2A8;
  const std::vector<float> x_sent = ToFloats(x);  // as the server received it
  absl::StatusOr<std::vector<double>> reference =
      ReferenceForRandomModel(*model, *weights, ids, x_sent, m);
  if (!reference.ok()) return reference.status();
  double tolerance = o.tolerance;
  std::string backend = "given";
  if (tolerance <= 0) {
    absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
    if (!info.ok()) return info.status();
    backend = info->backend();
    tolerance = ForwardTolerance(has_w2a8, bf16_activations,
                                 ToWireDType(last.output.type).value_or(DType::kF32), backend);
  }
  const Comparison c = CompareWithReference(y, *reference, tolerance);
  std::printf(
      "  verify (float64 reference of the model): max|y-ref|=%.3g max|ref|=%.3g relative=%.3g "
      "tolerance=%.3g (%s)",
      c.max_abs_error, c.max_abs_reference, c.relative_error, tolerance, backend.c_str());
  if (c.non_finite > 0) std::printf(" non-finite=%lld", static_cast<long long>(c.non_finite));
  std::printf(": %s\n", c.passed ? "PASS" : "FAIL");
  return c.passed;
}

}  // namespace qmm::ctl
