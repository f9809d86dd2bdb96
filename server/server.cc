#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/limits.h"

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
  return absl::OkStatus();
}

}  // namespace

int64_t DefaultMemoryLimit(const Backend& backend) {
  if (backend.name() == "cpu") return backend.memory_total_bytes() / 2;
  return backend.memory_free_bytes() / 10 * 9;
}

QmmServer::QmmServer(std::unique_ptr<Backend> backend, ServerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {}

QmmServer::~QmmServer() { Shutdown(); }

absl::StatusOr<int> QmmServer::Start() {
  if (absl::Status status = CheckOptions(options_); !status.ok()) return status;
  const int64_t limit = options_.memory_limit_bytes != 0 ? options_.memory_limit_bytes
                                                         : DefaultMemoryLimit(*backend_);
  store_ = std::make_unique<WeightStore>(limit);
  compute_ = std::make_unique<ComputePool>("compute", backend_->num_workers(),
                                           options_.max_queued_requests);
  loader_ = std::make_unique<ComputePool>("upload", options_.upload_threads,
                                          options_.max_queued_requests);
  ServiceContext context{
      .backend = backend_.get(),
      .store = store_.get(),
      .compute = compute_.get(),
      .loader = loader_.get(),
      .limits = {.max_message_bytes = options_.max_message_bytes,
                 .max_rows = options_.max_rows,
                 .max_upload_bytes = HostMemoryBytes() / 2},
  };
  service_ = std::make_unique<QmmService>(context);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, grpc::InsecureServerCredentials(), &port);
  // gRPC sets SO_REUSEPORT by default, which would let a second server share a busy port
  // and silently split the traffic; a taken port must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", options_.listen_address, "\""));
  }
  return port;
}

void QmmServer::Shutdown() {
  if (server_ != nullptr) {
    SetServing(false);
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(options_.shutdown_grace));
    server_->Wait();
    server_.reset();
  }
  // Every call has finished; what is still queued only finishes already-ended work.
  compute_.reset();
  loader_.reset();
}

void QmmServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

}  // namespace qmm
