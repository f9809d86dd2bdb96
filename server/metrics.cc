#include "server/metrics.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "server/process_metrics.h"

namespace qmm {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr absl::string_view kMethodNames[kNumRpcMethods] = {
    "UploadWeight", "GetWeight",       "ListWeights",   "DeleteWeight", "ServerInfo",
    "MatMul",       "MatMulStream",    "CreateModel",   "GetModel",     "ListModels",
    "DeleteModel",  "Forward",         "ForwardStream", "ServerLive",   "ServerReady",
    "ModelReady",   "ServerMetadata",  "ModelMetadata", "ModelInfer",   "ModelStreamInfer",
    "ModelConfig",  "ModelStatistics", "HttpHealth",    "HttpMetadata", "HttpInfer",
    "LocalMatMul"};
constexpr absl::string_view kRejectReasonNames[kNumRejectReasons] = {
    "queue_full", "memory_budget", "deadline_exceeded", "cancelled", "draining"};
constexpr absl::string_view kTransferDirectionNames[2] = {"h2d", "d2h"};

// Prometheus drops a label whose value is empty, which would change the series' identity.
std::string NonEmpty(std::string value) { return value.empty() ? "unknown" : value; }

// absl's names are gRPC's (OK, INVALID_ARGUMENT, ...), which is what operators grep for.
std::string CodeName(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Label values in lower case, as Prometheus users write them ("w4a16").
std::string SchemeLabel(Scheme scheme) {
  return absl::AsciiStrToLower(std::string(SchemeName(scheme)));
}

template <typename T>
T& Add(Family<T>& family, absl::string_view label, absl::string_view value) {
  return family.Add({{std::string(label), std::string(value)}});
}

Histogram& AddHistogram(Family<Histogram>& family, absl::string_view label, absl::string_view value,
                        const std::vector<double>& buckets) {
  return family.Add({{std::string(label), std::string(value)}}, buckets);
}

}  // namespace

absl::string_view RpcMethodName(RpcMethod method) { return kMethodNames[static_cast<int>(method)]; }

absl::string_view RejectReasonName(RejectReason reason) {
  return kRejectReasonNames[static_cast<int>(reason)];
}

absl::string_view TransferDirectionName(TransferDirection direction) {
  return kTransferDirectionNames[static_cast<int>(direction)];
}

const std::vector<double>& DurationBuckets() {
  static const std::vector<double> buckets = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,     0.1,     0.25,   0.5,     1,      2.5,   5,      10};
  return buckets;
}

const std::vector<double>& BatchRowsBuckets() {
  static const std::vector<double> buckets = [] {
    std::vector<double> powers;
    for (double rows = 1; rows <= 65536; rows *= 2) powers.push_back(rows);
    return powers;
  }();
  return buckets;
}

const std::vector<double>& BatchRequestsBuckets() {
  static const std::vector<double> buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return buckets;
}

Metrics::Metrics(const MetricsOptions& options)
    : per_weight_(options.per_weight),
      registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_unique<ProcessCollector>()),
      requests_(BuildCounter()
                    .Name("qmm_requests_total")
                    .Help("RPCs finished, by method and gRPC status code (MatMulStream counts "
                          "each request message).")
                    .Register(*registry_)) {
  auto& request_duration =
      BuildHistogram()
          .Name("qmm_request_duration_seconds")
          .Help("Time from a request's arrival to its response, inside the server.")
          .Register(*registry_);
  auto& queue_duration = BuildHistogram()
                             .Name("qmm_queue_duration_seconds")
                             .Help("Time a request waited in a queue before a worker took it.")
                             .Register(*registry_);
  for (int i = 0; i < kNumRpcMethods; ++i) {
    const absl::string_view method = kMethodNames[i];
    // OK exists from the start, so that rate() sees the first successes (a series that
    // appears with a value already above 0 hides its first increase). Error codes appear
    // once they happen.
    request_counters_[i][0] = &requests_.Add({{"method", std::string(method)}, {"code", "OK"}});
    request_duration_[i] = &AddHistogram(request_duration, "method", method, DurationBuckets());
    queue_duration_[i] = &AddHistogram(queue_duration, "method", method, DurationBuckets());
  }

  auto& compute = BuildHistogram()
                      .Name("qmm_compute_duration_seconds")
                      .Help(
                          "Kernel time of one launch: device time on a GPU, wall time on the "
                          "CPU.")
                      .Register(*registry_);
  auto& weight_bytes = BuildGauge()
                           .Name("qmm_weight_bytes")
                           .Help("Memory held by the published weights, by scheme.")
                           .Register(*registry_);
  for (size_t i = 0; i < std::size(kAllSchemes); ++i) {
    const std::string scheme = SchemeLabel(kAllSchemes[i]);
    compute_duration_[i] = &AddHistogram(compute, "scheme", scheme, DurationBuckets());
    weight_bytes_[i] = &Add(weight_bytes, "scheme", scheme);
  }

  auto& transfer = BuildHistogram()
                       .Name("qmm_transfer_duration_seconds")
                       .Help("Time of one launch's host-to-device or device-to-host copy.")
                       .Register(*registry_);
  for (int i = 0; i < 2; ++i) {
    transfer_duration_[i] =
        &AddHistogram(transfer, "direction", kTransferDirectionNames[i], DurationBuckets());
  }

  launch_host_duration_ = &BuildHistogram()
                               .Name("qmm_launch_host_duration_seconds")
                               .Help(
                                   "A worker's time on one launch beyond its measured kernel "
                                   "and copy times: taking the batch, issuing the launch, "
                                   "seeing it end, filling the responses.")
                               .Register(*registry_)
                               .Add({}, DurationBuckets());

  batch_rows_ = &BuildHistogram()
                     .Name("qmm_batch_rows")
                     .Help("Activation rows run by one launch.")
                     .Register(*registry_)
                     .Add({}, BatchRowsBuckets());
  batch_requests_ = &BuildHistogram()
                         .Name("qmm_batch_requests")
                         .Help("Requests whose rows one launch ran together.")
                         .Register(*registry_)
                         .Add({}, BatchRequestsBuckets());

  queue_rows_ = &BuildGauge()
                     .Name("qmm_queue_rows")
                     .Help("Activation rows waiting for a worker.")
                     .Register(*registry_)
                     .Add({});
  queue_requests_ = &BuildGauge()
                         .Name("qmm_queue_requests")
                         .Help("Requests waiting for a worker.")
                         .Register(*registry_)
                         .Add({});
  queue_limit_ = &BuildGauge()
                      .Name("qmm_queue_limit_requests")
                      .Help("Requests that may wait before new ones are rejected.")
                      .Register(*registry_)
                      .Add({});
  weights_ = &BuildGauge()
                  .Name("qmm_weights")
                  .Help("Weights published and ready for MatMul.")
                  .Register(*registry_)
                  .Add({});

  auto& memory = BuildGauge()
                     .Name("qmm_device_memory_bytes")
                     .Help(
                         "Weight memory: used (charged to the budget), limit (the budget) and "
                         "total (the device).")
                     .Register(*registry_);
  memory_used_ = &Add(memory, "kind", "used");
  memory_limit_ = &Add(memory, "kind", "limit");
  memory_total_ = &Add(memory, "kind", "total");

  auto& rejected = BuildCounter()
                       .Name("qmm_rejected_requests_total")
                       .Help("Requests refused or dropped before running, by reason.")
                       .Register(*registry_);
  for (int i = 0; i < kNumRejectReasons; ++i) {
    rejected_[i] = &Add(rejected, "reason", kRejectReasonNames[i]);
  }

  upload_bytes_ = &BuildCounter()
                       .Name("qmm_upload_bytes_total")
                       .Help("Weight payload bytes received by UploadWeight.")
                       .Register(*registry_)
                       .Add({});

  BuildGauge()
      .Name("qmm_build_info")
      .Help("Always 1; the labels describe the running server.")
      .Register(*registry_)
      .Add({{"version", NonEmpty(options.build.version)},
            {"git_sha", NonEmpty(options.build.git_sha)},
            {"backend", NonEmpty(options.build.backend)},
            {"device", NonEmpty(options.build.device)}})
      .Set(1);

  if (per_weight_) {
    weight_requests_ = &BuildCounter()
                            .Name("qmm_weight_requests_total")
                            .Help("MatMul requests run, by weight.")
                            .Register(*registry_);
    weight_rows_ = &BuildCounter()
                        .Name("qmm_weight_rows_total")
                        .Help("Activation rows run, by weight.")
                        .Register(*registry_);
    weight_compute_ = &BuildCounter()
                           .Name("qmm_weight_compute_seconds_total")
                           .Help("Kernel time spent, by weight.")
                           .Register(*registry_);
  }
}

Metrics::~Metrics() = default;

prometheus::Counter& Metrics::RequestCounter(RpcMethod method, absl::StatusCode code) {
  int code_index = static_cast<int>(code);
  // absl has no codes past 16; anything else is reported as UNKNOWN rather than dropped.
  if (code_index < 0 || code_index >= kNumCodes)
    code_index = static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<Counter*>& slot = request_counters_[static_cast<int>(method)][code_index];
  Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing child for the same labels, so two threads racing
    // here store the same pointer.
    counter = &requests_.Add(
        {{"method", std::string(RpcMethodName(method))}, {"code", CodeName(code_index)}});
    slot.store(counter, std::memory_order_release);
  }
  return *counter;
}

void Metrics::RecordRequest(RpcMethod method, absl::StatusCode code, double seconds) {
  RequestCounter(method, code).Increment();
  request_duration_[static_cast<int>(method)]->Observe(seconds);
}

void Metrics::RecordQueue(RpcMethod method, double seconds) {
  queue_duration_[static_cast<int>(method)]->Observe(seconds);
}

void Metrics::RecordCompute(Scheme scheme, double seconds) {
  compute_duration_[static_cast<int>(scheme)]->Observe(seconds);
}

void Metrics::RecordTransfer(TransferDirection direction, double seconds) {
  transfer_duration_[static_cast<int>(direction)]->Observe(seconds);
}

void Metrics::RecordLaunchHost(double seconds) { launch_host_duration_->Observe(seconds); }

void Metrics::RecordBatch(int64_t rows, int64_t requests) {
  batch_rows_->Observe(static_cast<double>(rows));
  batch_requests_->Observe(static_cast<double>(requests));
}

void Metrics::RecordRejected(RejectReason reason) {
  rejected_[static_cast<int>(reason)]->Increment();
}

void Metrics::AddUploadBytes(int64_t bytes) {
  upload_bytes_->Increment(static_cast<double>(bytes));
}

void Metrics::AddQueued(int64_t rows, int64_t requests) {
  queue_rows_->Increment(static_cast<double>(rows));
  queue_requests_->Increment(static_cast<double>(requests));
}

void Metrics::SetQueueLimit(int64_t requests) { queue_limit_->Set(static_cast<double>(requests)); }

void Metrics::SetWeights(const WeightTotals& totals) {
  weights_->Set(static_cast<double>(totals.count));
  for (size_t i = 0; i < weight_bytes_.size(); ++i) {
    weight_bytes_[i]->Set(static_cast<double>(totals.bytes_by_scheme[i]));
  }
}

void Metrics::SetDeviceMemory(int64_t used_bytes, int64_t limit_bytes, int64_t total_bytes) {
  memory_used_->Set(static_cast<double>(used_bytes));
  memory_limit_->Set(static_cast<double>(limit_bytes));
  memory_total_->Set(static_cast<double>(total_bytes));
}

void Metrics::AddWeight(absl::string_view weight) {
  if (!per_weight_) return;
  absl::MutexLock lock(&weight_mu_);
  const auto [it, inserted] = weight_series_.try_emplace(weight);
  if (!inserted) return;
  it->second = {&Add(*weight_requests_, "weight", weight), &Add(*weight_rows_, "weight", weight),
                &Add(*weight_compute_, "weight", weight)};
}

void Metrics::RecordWeightMatMul(absl::string_view weight, int64_t rows, double compute_seconds) {
  if (!per_weight_) return;
  absl::MutexLock lock(&weight_mu_);
  const auto it = weight_series_.find(weight);
  if (it == weight_series_.end()) return;
  it->second.requests->Increment();
  it->second.rows->Increment(static_cast<double>(rows));
  it->second.compute_seconds->Increment(compute_seconds);
}

void Metrics::ForgetWeight(absl::string_view weight) {
  if (!per_weight_) return;
  absl::MutexLock lock(&weight_mu_);
  const auto it = weight_series_.find(weight);
  if (it == weight_series_.end()) return;
  weight_requests_->Remove(it->second.requests);
  weight_rows_->Remove(it->second.rows);
  weight_compute_->Remove(it->second.compute_seconds);
  weight_series_.erase(it);
}

void Metrics::SetCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&hook_mu_);
  hook_ = std::move(hook);
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  {
    absl::MutexLock lock(&hook_mu_);
    if (hook_) hook_();
  }
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& family : process_->Collect()) {
    families.push_back(std::move(family));
  }
  return families;
}

}  // namespace qmm
