// Times one request from its arrival and records it in the metrics when it finishes: the
// `qmm_requests_total{method,code}` count and the `qmm_request_duration_seconds{method}`
// histogram, always together, so that the two agree.
//
// Threads: Finish may be called from any thread, once per request.
#ifndef QMM_SERVER_REQUEST_CLOCK_H_
#define QMM_SERVER_REQUEST_CLOCK_H_

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/status/status.h"
#include "server/metrics.h"

namespace qmm {

class RequestClock {
 public:
  // Starts timing now; `metrics` must outlive the request.
  RequestClock(Metrics* metrics, RpcMethod method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}

  // Restarts timing (a stream's next request message).
  void Restart() { start_ = std::chrono::steady_clock::now(); }

  // Records the request with `status`'s code and returns the status to finish it with.
  grpc::Status Finish(const grpc::Status& status) const;
  grpc::Status Finish(const absl::Status& status) const;

 private:
  Metrics* metrics_;
  RpcMethod method_;
  std::chrono::steady_clock::time_point start_;
};

// Finishes a unary call at once, on the gRPC thread (for cheap metadata calls and for
// requests refused before they are queued), recording it with `clock`.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* rpc, const RequestClock& clock,
                                    const absl::Status& status);

}  // namespace qmm

#endif  // QMM_SERVER_REQUEST_CLOCK_H_
