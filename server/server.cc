#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/open_inference.grpc.pb.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/http_address.h"
#include "server/limits.h"
#include "server/unix_socket.h"

namespace qmm {
namespace {

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pages) * page_size;
}

absl::Status CheckOptions(const ServerOptions& options) {
  // A full 1 MiB upload chunk plus its framing must fit in one message.
  constexpr int64_t kMinMessageBytes = 2 * kMaxChunkBytes;
  if (options.max_message_bytes < kMinMessageBytes ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes = ", options.max_message_bytes, " must be in [",
                     kMinMessageBytes, ", ", std::numeric_limits<int>::max(), "]"));
  }
  if (options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_limit_bytes = ", options.memory_limit_bytes, " must not be negative"));
  }
  if (options.max_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_rows = ", options.max_rows, " must be at least 1"));
  }
  if (options.max_queued_requests < 1 || options.upload_threads < 1) {
    return absl::InvalidArgumentError("max_queued_requests and upload_threads must be >= 1");
  }
  if (!options.admin_names.empty() && options.tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "admin_names needs tls_client_ca: operators are told apart by their client "
        "certificates");
  }
  if (!options.http_listen.empty()) {
    if (!options.tls.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "http_listen serves plain, unauthenticated HTTP: it cannot be combined with tls_cert "
          "(the gRPC port's TLS would be bypassed)");
    }
    if (absl::Status s = CheckHttpAddress(options.http_listen, "HTTP", "127.0.0.1:8000"); !s.ok()) {
      return s;
    }
  }
  if (!options.local_listen.empty() && !options.tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "local_listen serves the clients of this host without authentication: it cannot be "
        "combined with tls_cert (the gRPC port's TLS would be bypassed)");
  }
  LocalTransportOptions local;
  local.spin = options.local_spin;
  local.threads = options.local_threads;
  local.pinned_bytes = options.local_pinned_bytes;
  if (absl::Status s = CheckLocalTransportOptions(local); !s.ok()) return s;
  if (options.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shutdown_grace = ", absl::FormatDuration(options.shutdown_grace),
                     " must not be negative"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DefaultMemoryLimit(const Backend& backend) {
  if (backend.name() == "cpu") return backend.memory_total_bytes() / 2;
  return backend.memory_free_bytes() / 10 * 9;
}

QmmServer::QmmServer(std::unique_ptr<Backend> backend, ServerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)), access_(options_.admin_names) {}

QmmServer::~QmmServer() { Shutdown(); }

absl::StatusOr<int> QmmServer::Start() {
  if (absl::Status status = CheckOptions(options_); !status.ok()) return status;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options_.tls);
  if (!credentials.ok()) return credentials.status();
  const int64_t limit = options_.memory_limit_bytes != 0 ? options_.memory_limit_bytes
                                                         : DefaultMemoryLimit(*backend_);
  store_ = std::make_unique<WeightStore>(limit);
  models_ = std::make_unique<ModelStore>(*store_);
  if (absl::Status status = StartMetrics(); !status.ok()) return status;
  absl::StatusOr<std::unique_ptr<Batcher>> batcher =
      Batcher::Create(*backend_, *store_, *metrics_,
                      {.max_batch_rows = options_.max_batch_rows,
                       .max_queue_delay = options_.max_queue_delay,
                       .max_queue_rows = options_.max_queue_rows,
                       .max_queued_requests = options_.max_queued_requests,
                       .worker_spin = options_.worker_spin,
                       .completion_threads = options_.completion_threads},
                      models_.get());
  if (!batcher.ok()) return batcher.status();
  batcher_ = *std::move(batcher);
  loader_ = std::make_unique<ComputePool>("upload", options_.upload_threads,
                                          options_.max_queued_requests);
  ServiceContext context{
      .backend = backend_.get(),
      .store = store_.get(),
      .models = models_.get(),
      .batcher = batcher_.get(),
      .compute = &batcher_->pool(),
      .loader = loader_.get(),
      .metrics = metrics_.get(),
      .access = &access_,
      .limits = {.max_message_bytes = options_.max_message_bytes,
                 .max_rows = options_.max_rows,
                 .max_upload_bytes = HostMemoryBytes() / 2},
  };
  service_ = std::make_unique<QmmService>(context);
  inference_ = std::make_unique<InferenceService>(context, ready_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (const std::optional<std::string> path = UnixSocketPath(options_.listen_address)) {
    if (absl::Status free = CheckUnixSocketFree(*path); !free.ok()) return free;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, *credentials, &port);
  // gRPC sets SO_REUSEPORT by default, which would let a second server share a busy port
  // and silently split the traffic; a taken port must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.RegisterService(service_.get());
  builder.RegisterService(inference_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", options_.listen_address, "\""));
  }
  if (!options_.http_listen.empty()) {
    absl::StatusOr<std::unique_ptr<InferenceHttpServer>> http =
        InferenceHttpServer::Start(options_.http_listen, context, ready_);
    if (!http.ok()) {
      server_->Shutdown();
      server_.reset();
      return http.status();
    }
    http_ = *std::move(http);
  }
  if (!options_.local_listen.empty()) {
    absl::StatusOr<std::unique_ptr<LocalTransport>> local =
        LocalTransport::Start({.path = options_.local_listen,
                               .spin = options_.local_spin,
                               .threads = options_.local_threads,
                               .pinned_bytes = options_.local_pinned_bytes},
                              context);
    if (!local.ok()) {
      http_.reset();
      server_->Shutdown();
      server_.reset();
      return local.status();
    }
    local_ = *std::move(local);
  }
  // The health service knows only "" (the whole server) until a name is set; probes that
  // ask for a service by its own name (a Kubernetes readiness probe, say) would get
  // NOT_FOUND. Set once, the names follow SetServing with "".
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(v1::Qmm::service_full_name(), true);
    health->SetServingStatus(inference::GRPCInferenceService::service_full_name(), true);
  }
  ready_.store(true, std::memory_order_release);
  return port;
}

void QmmServer::Shutdown() {
  if (server_ != nullptr) {
    SetServing(false);
    // No new HTTP or local requests; the running ones finish first (the batcher is still
    // there).
    http_.reset();
    local_.reset();
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(options_.shutdown_grace));
    server_->Wait();
    server_.reset();
  }
  // Every call has finished; what is still queued only finishes already-ended work.
  batcher_.reset();
  loader_.reset();
  exposer_.reset();
  if (metrics_ != nullptr) metrics_->SetCollectHook(nullptr);
}

absl::Status QmmServer::StartMetrics() {
  MetricsOptions metrics_options;
  metrics_options.build = {.version = QMM_VERSION,
                           .git_sha = QMM_GIT_SHA,
                           .backend = std::string(backend_->name()),
                           .device = backend_->device_name()};
  metrics_options.per_weight = options_.metrics_per_weight;
  metrics_ = std::make_shared<Metrics>(metrics_options);
  metrics_->SetQueueLimit(options_.max_queued_requests);
  // Read on each scrape rather than kept up to date on every upload and delete.
  metrics_->SetCollectHook(
      [metrics = metrics_.get(), store = store_.get(), backend = backend_.get()] {
        Metrics::WeightTotals totals;
        for (const std::shared_ptr<const StoredWeight>& weight : store->List()) {
          ++totals.count;
          totals.bytes_by_scheme[static_cast<int>(weight->desc().scheme)] += weight->device_bytes();
        }
        metrics->SetWeights(totals);
        metrics->SetDeviceMemory(store->used_bytes(), store->limit_bytes(),
                                 backend->memory_total_bytes());
      });
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start(options_.metrics_listen, metrics_);
  if (!exposer.ok()) return exposer.status();
  exposer_ = *std::move(exposer);
  return absl::OkStatus();
}

void QmmServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  ready_.store(serving, std::memory_order_release);
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

}  // namespace qmm
