// The MatMulStream bidirectional stream (server/ordered_stream_reactor.h): requests join
// the weight's batching queue, shared with unary MatMul.
#ifndef QMM_SERVER_MATMUL_STREAM_REACTOR_H_
#define QMM_SERVER_MATMUL_STREAM_REACTOR_H_

#include <utility>

#include "qmm/v1/qmm.grpc.pb.h"
#include "server/matmul_runner.h"
#include "server/ordered_stream_reactor.h"

namespace qmm {

struct MatMulStreamTraits {
  using Request = v1::MatMulRequest;
  using Response = v1::MatMulResponse;
  static constexpr RpcMethod kMethod = RpcMethod::kMatMulStream;

  static absl::StatusOr<MatMulJob> Prepare(const Request& request, const ServiceContext& context) {
    return PrepareMatMul(request, *context.store, context.limits);
  }
  static void Dispatch(const ServiceContext& context, grpc::CallbackServerContext* rpc,
                       MatMulJob job, Response* response,
                       absl::AnyInvocable<void(const absl::Status&) &&> done) {
    DispatchMatMul(context, kMethod, ControlOf(rpc), std::move(job), response, std::move(done));
  }
};

using MatMulStreamReactor = OrderedStreamReactor<MatMulStreamTraits>;

}  // namespace qmm

#endif  // QMM_SERVER_MATMUL_STREAM_REACTOR_H_
