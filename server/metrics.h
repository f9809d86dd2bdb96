// The server's Prometheus metrics: one registry with every qmm_* family, the process
// metrics, and small Record*/Set* methods that the service calls on its hot paths.
//
// Conventions (prometheus.io/docs/practices/naming): base units (seconds, bytes),
// `_total` on counters, histograms rather than summaries (they aggregate across
// replicas), help text of plain one-line ASCII (prometheus-cpp writes it unescaped).
// Every label value comes from a closed set (an enum below, a scheme, a gRPC code), except
// `weight`, which exists only with MetricsOptions::per_weight (an operator's choice, since
// weight names are unbounded).
//
// Threads: every method may be called from any thread at any time; Collect() (a scrape)
// may run concurrently with all of them.
#ifndef QMM_SERVER_METRICS_H_
#define QMM_SERVER_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/format.h"

namespace qmm {

// The RPCs of qmm.v1.Qmm and of inference.GRPCInferenceService (the Open Inference
// Protocol), and the requests of its HTTP endpoint, as the `method` label spells them.
enum class RpcMethod : uint8_t {
  kUploadWeight,
  kGetWeight,
  kListWeights,
  kDeleteWeight,
  kServerInfo,
  kMatMul,
  kMatMulStream,
  kCreateModel,
  kGetModel,
  kListModels,
  kDeleteModel,
  kForward,
  kForwardStream,
  kServerLive,
  kServerReady,
  kModelReady,
  kServerMetadata,
  kModelMetadata,
  kModelInfer,
  kModelStreamInfer,
  kModelConfig,
  kModelStatistics,
  // The Open Inference Protocol's HTTP endpoint (server/inference_http.h).
  kHttpHealth,
  kHttpMetadata,
  kHttpInfer,
  // MatMul through the local transport (server/local_transport.h).
  kLocalMatMul,
};
inline constexpr int kNumRpcMethods = 26;
absl::string_view RpcMethodName(RpcMethod method);

// Why a request was refused or dropped without running (the `reason` label).
enum class RejectReason : uint8_t {
  kQueueFull,     // a compute or batching queue was at its limit
  kMemoryBudget,  // an upload did not fit --memory_limit_bytes
  kDeadline,      // the deadline passed before the request launched
  kCancelled,     // the client cancelled before the request launched
  kDraining,      // the server was shutting down
};
inline constexpr int kNumRejectReasons = 5;
absl::string_view RejectReasonName(RejectReason reason);

enum class TransferDirection : uint8_t { kHostToDevice, kDeviceToHost };
absl::string_view TransferDirectionName(TransferDirection direction);  // "h2d" / "d2h"

// Labels of qmm_build_info; an empty one is exported as "unknown".
struct BuildInfo {
  std::string version;
  std::string git_sha;
  std::string backend;  // "cpu" or "cuda"
  std::string device;   // the device or CPU model name
};

struct MetricsOptions {
  BuildInfo build;
  // Adds qmm_weight_*{weight} families (one series per weight and family).
  bool per_weight = false;
};

// Bucket upper bounds (seconds) of every duration histogram: 10 us to 10 s in 1-2.5-5
// steps, which puts a boundary near any latency SLO a user is likely to pick.
const std::vector<double>& DurationBuckets();
// Bucket upper bounds of qmm_batch_rows: powers of two up to 65536 (the default
// --max_rows; a larger launch lands in +Inf).
const std::vector<double>& BatchRowsBuckets();
// Bucket upper bounds of qmm_batch_requests: powers of two up to 1024.
const std::vector<double>& BatchRequestsBuckets();

class Metrics : public prometheus::Collectable {
 public:
  explicit Metrics(const MetricsOptions& options);
  ~Metrics() override;

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One finished RPC (for MatMulStream, one request message): its final gRPC code and
  // its time in the server, from arrival to the response being handed to gRPC.
  void RecordRequest(RpcMethod method, absl::StatusCode code, double seconds);
  // Time a request waited between being queued and a worker taking it.
  void RecordQueue(RpcMethod method, double seconds);
  // Kernel time of one launch: device time from CUDA events, wall time on the CPU. The
  // `scheme` label is SchemeName() in lower case ("w4a16").
  void RecordCompute(Scheme scheme, double seconds);
  void RecordTransfer(TransferDirection direction, double seconds);
  // A worker's time on one successful launch beyond the kernel and copy times the backend
  // measured: taking the batch, preparing and issuing the launch, seeing it end and
  // filling the responses (handing them to the callers not included). Where it grows, the
  // host, not the device, sets how often a weight can launch.
  void RecordLaunchHost(double seconds);
  // One launch: how many activation rows it ran and how many requests they came from.
  void RecordBatch(int64_t rows, int64_t requests);
  void RecordRejected(RejectReason reason);
  // Payload bytes received by UploadWeight (counted as they arrive, failed uploads too).
  void AddUploadBytes(int64_t bytes);

  // Work waiting for a worker: rows and requests (the gauges move by `delta`).
  void AddQueued(int64_t rows, int64_t requests);
  // The configured queue limit in requests (for the queue-near-full alert).
  void SetQueueLimit(int64_t requests);

  // The published weights: how many and the memory they hold, per scheme.
  struct WeightTotals {
    int64_t count = 0;
    std::array<int64_t, std::size(kAllSchemes)> bytes_by_scheme{};
  };
  void SetWeights(const WeightTotals& totals);
  // Weight memory charged to the budget, the budget, and what the device has in all.
  void SetDeviceMemory(int64_t used_bytes, int64_t limit_bytes, int64_t total_bytes);

  // Per-weight series; all three are no-ops unless MetricsOptions::per_weight.
  // AddWeight creates a published weight's series (at zero); RecordWeightMatMul counts
  // into them and ignores a weight without series (one deleted while a request on it was
  // still running); ForgetWeight drops a deleted weight's series.
  void AddWeight(absl::string_view weight);
  void RecordWeightMatMul(absl::string_view weight, int64_t rows, double compute_seconds);
  void ForgetWeight(absl::string_view weight);

  // Runs on the scraping thread at the start of every Collect(), to refresh gauges that
  // are cheaper to read on demand (store totals, device memory). It must not call
  // SetCollectHook, and what it captures must outlive the hook: replace it with nullptr
  // before destroying that.
  void SetCollectHook(std::function<void()> hook);

  // A scrape: runs the hook, then returns the qmm_* families and the process metrics.
  std::vector<prometheus::MetricFamily> Collect() const override;

  bool per_weight() const { return per_weight_; }

 private:
  prometheus::Counter& RequestCounter(RpcMethod method, absl::StatusCode code);

  static constexpr int kNumCodes = 17;  // gRPC codes 0 (OK) .. 16 (UNAUTHENTICATED)

  const bool per_weight_;
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::unique_ptr<prometheus::Collectable> process_;

  prometheus::Family<prometheus::Counter>& requests_;
  // OK is created up front; other codes on first use, so that only codes that happened
  // are exported.
  std::array<std::array<std::atomic<prometheus::Counter*>, kNumCodes>, kNumRpcMethods>
      request_counters_{};
  std::array<prometheus::Histogram*, kNumRpcMethods> request_duration_{};
  std::array<prometheus::Histogram*, kNumRpcMethods> queue_duration_{};
  std::array<prometheus::Histogram*, std::size(kAllSchemes)> compute_duration_{};
  std::array<prometheus::Histogram*, 2> transfer_duration_{};
  prometheus::Histogram* launch_host_duration_ = nullptr;
  prometheus::Histogram* batch_rows_ = nullptr;
  prometheus::Histogram* batch_requests_ = nullptr;
  prometheus::Gauge* queue_rows_ = nullptr;
  prometheus::Gauge* queue_requests_ = nullptr;
  prometheus::Gauge* queue_limit_ = nullptr;
  prometheus::Gauge* weights_ = nullptr;
  std::array<prometheus::Gauge*, std::size(kAllSchemes)> weight_bytes_{};
  prometheus::Gauge* memory_used_ = nullptr;
  prometheus::Gauge* memory_limit_ = nullptr;
  prometheus::Gauge* memory_total_ = nullptr;
  std::array<prometheus::Counter*, kNumRejectReasons> rejected_{};
  prometheus::Counter* upload_bytes_ = nullptr;

  // Only with per_weight. The mutex keeps a series from being removed while another
  // thread increments it.
  prometheus::Family<prometheus::Counter>* weight_requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* weight_rows_ = nullptr;
  prometheus::Family<prometheus::Counter>* weight_compute_ = nullptr;
  struct WeightSeries {
    prometheus::Counter* requests = nullptr;
    prometheus::Counter* rows = nullptr;
    prometheus::Counter* compute_seconds = nullptr;
  };
  absl::Mutex weight_mu_;
  absl::flat_hash_map<std::string, WeightSeries> weight_series_ ABSL_GUARDED_BY(weight_mu_);

  mutable absl::Mutex hook_mu_;
  std::function<void()> hook_ ABSL_GUARDED_BY(hook_mu_);
};

}  // namespace qmm

#endif  // QMM_SERVER_METRICS_H_
