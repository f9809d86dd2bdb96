// QmmServer: the gRPC server with the qmm.v1.Qmm service, grpc.health.v1 health and
// server reflection, over one backend. Used by qmm-server's main and by in-process tests.
//
// Threads: every method is called from one controlling thread (main, or a test).
#ifndef QMM_SERVER_SERVER_H_
#define QMM_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend.h"
#include "server/compute_pool.h"
#include "server/service.h"
#include "server/weight_store.h"

namespace qmm {

struct ServerOptions {
  // host:port; port 0 picks a free port (Start returns it).
  std::string listen_address = "127.0.0.1:50051";
  // Weight memory budget; 0 means DefaultMemoryLimit(backend).
  int64_t memory_limit_bytes = 0;
  // Largest gRPC message either way, in [2 MiB, 2 GiB).
  int64_t max_message_bytes = int64_t{64} << 20;
  // Largest M of one MatMul request.
  int64_t max_rows = 65536;
  // MatMul requests that may wait for a worker before new ones get RESOURCE_EXHAUSTED.
  int64_t max_queued_requests = 4096;
  // Threads that quantize and load uploads.
  int upload_threads = 2;
  // How long Shutdown lets in-flight calls run before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(20);
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

  // Starts serving; returns the bound port. INVALID_ARGUMENT for bad options,
  // UNAVAILABLE when the address cannot be bound. Call once.
  absl::StatusOr<int> Start();

  // Stops accepting calls, lets in-flight calls finish (up to shutdown_grace, then
  // cancels them), then stops the workers. Idempotent.
  void Shutdown();

  // What grpc.health.v1 reports for every service.
  void SetServing(bool serving);

  const Backend& backend() const { return *backend_; }
  int64_t memory_limit_bytes() const { return store_->limit_bytes(); }

 private:
  // Destruction order matters: the gRPC server, then the pools (whose tasks hold weights),
  // then the store, then the backend that owns the weights' memory.
  std::unique_ptr<Backend> backend_;
  ServerOptions options_;
  std::unique_ptr<WeightStore> store_;
  std::unique_ptr<ComputePool> loader_;
  std::unique_ptr<ComputePool> compute_;
  std::unique_ptr<QmmService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace qmm

#endif  // QMM_SERVER_SERVER_H_
