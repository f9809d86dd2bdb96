// The Open Inference Protocol's ModelStreamInfer (server/ordered_stream_reactor.h): the
// requests of ModelInfer on one stream, answered in order; a failed request is answered
// with its error_message (its code's name, then the message) and the stream goes on, as
// Triton's clients expect.
#ifndef QMM_SERVER_INFERENCE_STREAM_REACTOR_H_
#define QMM_SERVER_INFERENCE_STREAM_REACTOR_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/open_inference.grpc.pb.h"
#include "server/inference_convert.h"
#include "server/inference_runner.h"
#include "server/ordered_stream_reactor.h"

namespace qmm {

struct InferenceStreamTraits {
  using Request = inference::ModelInferRequest;
  using Response = inference::ModelStreamInferResponse;
  static constexpr RpcMethod kMethod = RpcMethod::kModelStreamInfer;

  static absl::StatusOr<std::unique_ptr<InferJob>> Prepare(const Request& request,
                                                           const ServiceContext& context) {
    return PrepareInfer(request, context);
  }
  static void Dispatch(const ServiceContext& context, grpc::CallbackServerContext* rpc,
                       std::unique_ptr<InferJob> job, Response* response,
                       absl::AnyInvocable<void(const absl::Status&) &&> done) {
    response->Clear();
    DispatchInfer(context, kMethod, ControlOf(rpc), std::move(job),
                  response->mutable_infer_response(), std::move(done));
  }
  // The response names the request (model and id) so that clients can match it.
  static void AnswerError(const absl::Status& status, const Request& request, Response* response) {
    response->Clear();
    response->set_error_message(
        absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()));
    response->mutable_infer_response()->set_model_name(request.model_name());
    response->mutable_infer_response()->set_id(request.id());
  }
};

using InferenceStreamReactor = OrderedStreamReactor<InferenceStreamTraits>;

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_STREAM_REACTOR_H_
