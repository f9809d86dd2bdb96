// QmmServer: the gRPC server with the qmm.v1.Qmm service, the Open Inference Protocol's
// inference.GRPCInferenceService (and, when asked for, its HTTP/REST endpoint),
// grpc.health.v1 health and server reflection, over one backend. Used by qmm-server's main and by
// in-process tests.
//
// Threads: every method is called from one controlling thread (main, or a test).
#ifndef QMM_SERVER_SERVER_H_
#define QMM_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend.h"
#include "server/batcher.h"
#include "server/compute_pool.h"
#include "server/inference_http.h"
#include "server/inference_service.h"
#include "server/local_transport.h"
#include "server/metrics.h"
#include "server/metrics_exposer.h"
#include "server/model_store.h"
#include "server/service.h"
#include "server/tls.h"
#include "server/weight_store.h"

namespace qmm {

struct ServerOptions {
  // host:port; port 0 picks a free port (Start returns it). Or a Unix domain socket,
  // "unix:PATH" (server/unix_socket.h), for clients on the same host.
  std::string listen_address = "127.0.0.1:50051";
  // TLS or mutual TLS on listen_address; none by default (plaintext).
  TlsServerOptions tls;
  // Certificate names (server/access.h) of the clients that may upload and delete weights
  // and models; empty: every client. Needs mutual TLS (tls.client_ca_file).
  std::vector<std::string> admin_names;
  // Weight memory budget; 0 means DefaultMemoryLimit(backend).
  int64_t memory_limit_bytes = 0;
  // Largest gRPC message either way, in [2 MiB, 2 GiB).
  int64_t max_message_bytes = int64_t{64} << 20;
  // Largest M of one MatMul request.
  int64_t max_rows = 65536;
  // MatMul requests that may wait for a worker before new ones get RESOURCE_EXHAUSTED.
  int64_t max_queued_requests = 4096;
  // MatMul batching (server/batcher.h): most rows per launch, how long an idle weight's
  // first request waits for company, most rows waiting per weight.
  int64_t max_batch_rows = 64;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int64_t max_queue_rows = 65536;
  // BatcherOptions::worker_spin and completion_threads.
  absl::Duration worker_spin = absl::ZeroDuration();
  int completion_threads = 2;
  // Threads that quantize and load uploads.
  int upload_threads = 2;
  // How long Shutdown lets in-flight calls run before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(20);
  // HOST:PORT of the Prometheus endpoint (/metrics); empty serves none (the metrics are
  // still kept). Port 0 picks a free port (metrics_port() returns it).
  std::string metrics_listen;
  // Export per-weight series (labelled with weight names; one set per weight).
  bool metrics_per_weight = false;
  // HOST:PORT of the Open Inference Protocol's HTTP/REST endpoint (server/inference_http.h);
  // empty serves none. Plain HTTP: refused together with TLS on listen_address. Port 0 picks
  // a free port (http_port() returns it).
  std::string http_listen;
  // The local transport (server/local_transport.h): the Unix socket path where clients on
  // this host open shared-memory sessions; empty serves none. Refused together with TLS
  // (its clients are not authenticated). Its pollers' spin and count, and how much of its
  // sessions' memory the backend may page-lock (LocalTransportOptions::pinned_bytes).
  std::string local_listen;
  absl::Duration local_spin = absl::Microseconds(100);
  int local_threads = 2;
  int64_t local_pinned_bytes = int64_t{1} << 30;
};

// The budget a server uses when none is given: half the RAM for the CPU backend, 90% of
// the free device memory for a GPU backend.
int64_t DefaultMemoryLimit(const Backend& backend);

class QmmServer {
 public:
  QmmServer(std::unique_ptr<Backend> backend, ServerOptions options);
  // Shuts down if still running.
  ~QmmServer();

  QmmServer(const QmmServer&) = delete;
  QmmServer& operator=(const QmmServer&) = delete;

  // Starts serving (and the metrics endpoint, when configured); returns the bound port (1
  // on a Unix socket, as gRPC reports it). INVALID_ARGUMENT for bad options (TLS files
  // included) or a malformed metrics address, UNAVAILABLE when an address cannot be bound
  // or another server listens on the Unix socket, FAILED_PRECONDITION when a file other
  // than a socket is at its path. Call once.
  absl::StatusOr<int> Start();

  // Stops accepting calls, lets in-flight calls finish (up to shutdown_grace, then
  // cancels them), then stops the workers and the metrics endpoint. Idempotent.
  void Shutdown();

  // What grpc.health.v1 reports for the whole server ("") and for each service by name,
  // and what the inference service's ServerReady and ModelReady say.
  void SetServing(bool serving);

  const Backend& backend() const { return *backend_; }
  int64_t memory_limit_bytes() const { return store_->limit_bytes(); }
  // The bound metrics port; 0 when there is no metrics endpoint.
  int metrics_port() const { return exposer_ != nullptr ? exposer_->port() : 0; }
  // The bound HTTP inference port; 0 when there is no HTTP endpoint.
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  // Sessions open on the local transport; 0 without one.
  int local_sessions() const { return local_ != nullptr ? local_->sessions() : 0; }
  // The MatMul batcher (its statistics); valid between Start and Shutdown.
  const Batcher& batcher() const { return *batcher_; }

 private:
  // Creates the metrics and, when configured, their HTTP endpoint.
  absl::Status StartMetrics();

  // Destruction order matters: the gRPC server, then the pools (whose tasks hold weights
  // and record metrics), then the metrics endpoint (whose scrapes read the store and the
  // backend), the metrics, the store, and the backend that owns the weights' memory.
  std::unique_ptr<Backend> backend_;
  ServerOptions options_;
  std::unique_ptr<WeightStore> store_;
  // After the store it refers to; its models hold weights and backend memory.
  std::unique_ptr<ModelStore> models_;
  std::shared_ptr<Metrics> metrics_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::unique_ptr<ComputePool> loader_;
  std::unique_ptr<Batcher> batcher_;
  AccessPolicy access_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<QmmService> service_;
  std::unique_ptr<InferenceService> inference_;
  std::unique_ptr<InferenceHttpServer> http_;
  std::unique_ptr<LocalTransport> local_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace qmm

#endif  // QMM_SERVER_SERVER_H_
