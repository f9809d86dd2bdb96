// The Open Inference Protocol's HTTP/REST API (KServe v2, with Triton's binary tensor data
// extension) on a port of its own, over the same models, weights and batching queues as
// the gRPC service (server/inference_service.h):
//
//   GET  /v2/health/live                           200 {"live": true}
//   GET  /v2/health/ready                          200 {"ready": true}, 503 while not ready
//   GET  /v2                                       server metadata
//   GET  /v2/models/NAME[/versions/V]              model metadata
//   GET  /v2/models/NAME[/versions/V]/ready        200 {"ready": true}, 503 otherwise
//   POST /v2/models/NAME[/versions/V]/infer        inference (server/inference_json.h)
//   GET  /v2/models/NAME[/versions/V]/config       Triton's model config (inference_config.h)
//   GET  /v2/models/NAME[/versions/V]/stats        its statistics
//   GET  /v2/models/stats                          every model's statistics
//
// Failures answer {"error": message} with the HTTP status of their code (HttpStatusOf).
// The endpoint is plain HTTP without authentication; QmmServer refuses it together with
// TLS on the gRPC port.
//
// Threads: civetweb's, one per request in flight, each waiting for its batch. Create and
// destroy it from one controlling thread; the destructor waits for running requests.
#ifndef QMM_SERVER_INFERENCE_HTTP_H_
#define QMM_SERVER_INFERENCE_HTTP_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/service_context.h"

struct mg_connection;
struct mg_context;

namespace qmm {

class InferenceHttpServer {
 public:
  // Serves on ADDRESS (HOST:PORT, port 0 picks a free one). Everything `context` points to
  // and `ready` must outlive the server. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<InferenceHttpServer>> Start(absl::string_view address,
                                                                    const ServiceContext& context,
                                                                    const std::atomic<bool>& ready);

  ~InferenceHttpServer();
  InferenceHttpServer(const InferenceHttpServer&) = delete;
  InferenceHttpServer& operator=(const InferenceHttpServer&) = delete;

  // The bound port (the real one when 0 was asked for).
  int port() const { return port_; }

 private:
  InferenceHttpServer(const ServiceContext& context, const std::atomic<bool>& ready)
      : context_(context), ready_(ready) {}

  // civetweb's request handler; `self` is the server.
  static int Handle(mg_connection* connection, void* self);
  void Serve(mg_connection* connection);

  const ServiceContext context_;
  const std::atomic<bool>& ready_;
  mg_context* civetweb_ = nullptr;
  int port_ = 0;
};

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_HTTP_H_
