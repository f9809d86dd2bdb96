// The MatMulStream bidirectional stream: one request at a time, answered in order.
// Read -> validate (gRPC thread) -> the weight's batching queue, shared with unary MatMul
// (server/batcher.h) -> write -> read the next.
// A failed request ends the stream with its status; the client's half-close ends it OK.
// Each request message is counted in the metrics on its own (method MatMulStream).
#ifndef QMM_SERVER_MATMUL_STREAM_REACTOR_H_
#define QMM_SERVER_MATMUL_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/request_clock.h"
#include "server/service_context.h"

namespace qmm {

// Deletes itself when gRPC is done with the call (OnDone).
class MatMulStreamReactor : public grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse> {
 public:
  MatMulStreamReactor(const ServiceContext& context, grpc::CallbackServerContext* rpc);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  const ServiceContext& context_;
  grpc::CallbackServerContext* const rpc_;
  // Reused for every request; only one is in flight at a time.
  v1::MatMulRequest request_;
  v1::MatMulResponse response_;
  // Times the request in flight.
  RequestClock clock_;
};

}  // namespace qmm

#endif  // QMM_SERVER_MATMUL_STREAM_REACTOR_H_
