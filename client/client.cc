#include "client/client.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace qmm {

using client_internal::BuildForwardRequest;
using client_internal::BuildMatMulRequest;
using client_internal::FromGrpcStatus;
using client_internal::TakeForwardResult;
using client_internal::TakeMatMulResult;

namespace {

gpr_timespec ToGprDeadline(absl::Duration timeout) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros(absl::ToInt64Microseconds(timeout), GPR_TIMESPAN));
}

}  // namespace

absl::Status MatMulStream::Write(std::string_view weight, const NdArray& x,
                                 std::optional<DType> output_dtype) {
  if (rpc_.ended()) return rpc_.final_status();
  v1::MatMulRequest request;
  if (absl::Status status = BuildMatMulRequest(weight, x, output_dtype, &request); !status.ok()) {
    return status;  // nothing was sent: the stream stays usable
  }
  return rpc_.Write(request);
}

absl::StatusOr<MatMulResult> MatMulStream::Read() {
  v1::MatMulResponse response;
  if (absl::Status status = rpc_.Read(&response); !status.ok()) return status;
  return TakeMatMulResult(response);
}

absl::StatusOr<MatMulResult> MatMulStream::Call(std::string_view weight, const NdArray& x,
                                                std::optional<DType> output_dtype) {
  if (absl::Status status = Write(weight, x, output_dtype); !status.ok()) return status;
  return Read();
}

absl::Status ForwardStream::Write(std::string_view model, const NdArray& x,
                                  std::optional<DType> output_dtype) {
  if (rpc_.ended()) return rpc_.final_status();
  v1::ForwardRequest request;
  if (absl::Status status = BuildForwardRequest(model, x, output_dtype, &request); !status.ok()) {
    return status;  // nothing was sent: the stream stays usable
  }
  return rpc_.Write(request);
}

absl::Status ForwardStream::Write(std::string_view model, std::span<const int32_t> token_ids,
                                  std::optional<DType> output_dtype) {
  v1::ForwardRequest request;
  BuildForwardRequest(model, token_ids, output_dtype, &request);
  return rpc_.Write(request);
}

absl::StatusOr<MatMulResult> ForwardStream::Read() {
  v1::ForwardResponse response;
  if (absl::Status status = rpc_.Read(&response); !status.ok()) return status;
  return TakeForwardResult(response);
}

absl::StatusOr<MatMulResult> ForwardStream::Call(std::string_view model, const NdArray& x,
                                                 std::optional<DType> output_dtype) {
  if (absl::Status status = Write(model, x, output_dtype); !status.ok()) return status;
  return Read();
}

absl::StatusOr<MatMulResult> ForwardStream::Call(std::string_view model,
                                                 std::span<const int32_t> token_ids,
                                                 std::optional<DType> output_dtype) {
  if (absl::Status status = Write(model, token_ids, output_dtype); !status.ok()) return status;
  return Read();
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Qmm::NewStub(channel_)),
      inference_(inference::GRPCInferenceService::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  grpc::ChannelArguments args;
  const int max_message = static_cast<int>(
      std::clamp<int64_t>(options.max_message_bytes, 0, std::numeric_limits<int>::max()));
  args.SetMaxReceiveMessageSize(max_message);
  args.SetMaxSendMessageSize(max_message);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls, args);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.server, *credentials, args);
  if (!channel->WaitForConnected(ToGprDeadline(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", options.server, " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

void Client::SetDeadline(grpc::ClientContext& context) const {
  context.set_deadline(ToGprDeadline(options_.call_timeout));
}

absl::StatusOr<v1::WeightInfo> Client::Upload(const UploadSpec& spec,
                                              std::span<const uint8_t> payload,
                                              const UploadProgress& progress) {
  grpc::ClientContext context;
  v1::UploadWeightResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadWeightRequest>> writer =
      stub_->UploadWeight(&context, &response);

  v1::UploadWeightRequest request;
  *request.mutable_header() = client_internal::BuildUploadHeader(spec, payload);
  bool stream_ok = writer->Write(request);
  const int64_t total = static_cast<int64_t>(payload.size());
  int64_t sent = 0;
  for (std::span<const uint8_t> chunk :
       client_internal::SplitIntoChunks(payload, client_internal::kMaxChunkBytes)) {
    if (!stream_ok) break;  // the server ended the RPC; Finish() says why
    request.set_chunk(chunk.data(), chunk.size());
    stream_ok = writer->Write(request);
    sent += static_cast<int64_t>(chunk.size());
    if (progress && stream_ok) progress(sent, total);
  }
  if (stream_ok) writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish());
  if (!status.ok()) return status;
  if (!stream_ok) {
    return absl::UnknownError("the upload stream broke, yet the server reported success");
  }
  return std::move(*response.mutable_weight());
}

absl::StatusOr<v1::WeightInfo> Client::GetWeight(std::string_view name) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetWeightRequest request;
  request.set_name(std::string(name));
  v1::WeightInfo response;
  absl::Status status = FromGrpcStatus(stub_->GetWeight(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::WeightInfo>> Client::ListWeights() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListWeightsResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListWeights(&context, v1::ListWeightsRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::WeightInfo>(std::make_move_iterator(response.mutable_weights()->begin()),
                                     std::make_move_iterator(response.mutable_weights()->end()));
}

absl::Status Client::DeleteWeight(std::string_view name) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::DeleteWeightRequest request;
  request.set_name(std::string(name));
  v1::DeleteWeightResponse response;
  return FromGrpcStatus(stub_->DeleteWeight(&context, request, &response));
}

absl::StatusOr<v1::ServerInfoResponse> Client::ServerInfo() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ServerInfoResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ServerInfo(&context, v1::ServerInfoRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<inference::ModelStatisticsResponse> Client::Statistics(std::string_view name) {
  grpc::ClientContext context;
  SetDeadline(context);
  inference::ModelStatisticsRequest request;
  request.set_name(std::string(name));
  inference::ModelStatisticsResponse response;
  absl::Status status = FromGrpcStatus(inference_->ModelStatistics(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<bool> Client::Serving(std::string_view service) {
  grpc::ClientContext context;
  SetDeadline(context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::health::v1::HealthCheckResponse response;
  absl::Status status = FromGrpcStatus(
      grpc::health::v1::Health::NewStub(channel_)->Check(&context, request, &response));
  if (!status.ok()) return status;
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<v1::ModelInfo> Client::CreateModel(const v1::CreateModelRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ModelInfo response;
  absl::Status status = FromGrpcStatus(stub_->CreateModel(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ModelInfo> Client::GetModel(std::string_view name) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetModelRequest request;
  request.set_name(std::string(name));
  v1::ModelInfo response;
  absl::Status status = FromGrpcStatus(stub_->GetModel(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::ModelInfo>> Client::ListModels() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListModelsResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListModels(&context, v1::ListModelsRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::ModelInfo>(std::make_move_iterator(response.mutable_models()->begin()),
                                    std::make_move_iterator(response.mutable_models()->end()));
}

absl::Status Client::DeleteModel(std::string_view name) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::DeleteModelRequest request;
  request.set_name(std::string(name));
  v1::DeleteModelResponse response;
  return FromGrpcStatus(stub_->DeleteModel(&context, request, &response));
}

absl::StatusOr<MatMulResult> Client::Forward(std::string_view model, const NdArray& x,
                                             std::optional<DType> output_dtype) {
  v1::ForwardRequest request;
  if (absl::Status status = BuildForwardRequest(model, x, output_dtype, &request); !status.ok()) {
    return status;
  }
  return CallForward(request);
}

absl::StatusOr<MatMulResult> Client::Forward(std::string_view model,
                                             std::span<const int32_t> token_ids,
                                             std::optional<DType> output_dtype) {
  v1::ForwardRequest request;
  BuildForwardRequest(model, token_ids, output_dtype, &request);
  return CallForward(request);
}

absl::StatusOr<MatMulResult> Client::CallForward(const v1::ForwardRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ForwardResponse response;
  absl::Status status = FromGrpcStatus(stub_->Forward(&context, request, &response));
  if (!status.ok()) return status;
  return TakeForwardResult(response);
}

absl::StatusOr<MatMulResult> Client::MatMul(std::string_view weight, const NdArray& x,
                                            std::optional<DType> output_dtype) {
  v1::MatMulRequest request;
  if (absl::Status status = BuildMatMulRequest(weight, x, output_dtype, &request); !status.ok()) {
    return status;
  }
  grpc::ClientContext context;
  SetDeadline(context);
  v1::MatMulResponse response;
  absl::Status status = FromGrpcStatus(stub_->MatMul(&context, request, &response));
  if (!status.ok()) return status;
  return TakeMatMulResult(response);
}

absl::StatusOr<std::unique_ptr<MatMulStream>> Client::OpenMatMulStream() {
  auto context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<MatMulStream::Rpc::Stream> stream = stub_->MatMulStream(context.get());
  if (!stream) return absl::InternalError("gRPC returned no MatMul stream");
  return std::unique_ptr<MatMulStream>(new MatMulStream(std::move(context), std::move(stream)));
}

absl::StatusOr<std::unique_ptr<ForwardStream>> Client::OpenForwardStream() {
  auto context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<ForwardStream::Rpc::Stream> stream = stub_->ForwardStream(context.get());
  if (!stream) return absl::InternalError("gRPC returned no Forward stream");
  return std::unique_ptr<ForwardStream>(new ForwardStream(std::move(context), std::move(stream)));
}

}  // namespace qmm
