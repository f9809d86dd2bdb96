// The ForwardStream bidirectional stream (server/ordered_stream_reactor.h): requests join
// the model's batching queue, shared with unary Forward.
#ifndef QMM_SERVER_FORWARD_STREAM_REACTOR_H_
#define QMM_SERVER_FORWARD_STREAM_REACTOR_H_

#include <utility>

#include "qmm/v1/qmm.grpc.pb.h"
#include "server/model_runner.h"
#include "server/ordered_stream_reactor.h"

namespace qmm {

struct ForwardStreamTraits {
  using Request = v1::ForwardRequest;
  using Response = v1::ForwardResponse;
  static constexpr RpcMethod kMethod = RpcMethod::kForwardStream;

  static absl::StatusOr<ForwardJob> Prepare(const Request& request, const ServiceContext& context) {
    return PrepareForward(request, *context.models, context.limits);
  }
  static void Dispatch(const ServiceContext& context, grpc::CallbackServerContext* rpc,
                       ForwardJob job, Response* response,
                       absl::AnyInvocable<void(const absl::Status&) &&> done) {
    DispatchForward(context, kMethod, ControlOf(rpc), std::move(job), response, std::move(done));
  }
};

using ForwardStreamReactor = OrderedStreamReactor<ForwardStreamTraits>;

}  // namespace qmm

#endif  // QMM_SERVER_FORWARD_STREAM_REACTOR_H_
