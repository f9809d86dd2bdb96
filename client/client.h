// qmm::Client: the C++ client of the qmm.v1.Qmm service.
//
//   absl::StatusOr<std::unique_ptr<qmm::Client>> client =
//       qmm::Client::Connect({.server = "127.0.0.1:50051"});
//   absl::StatusOr<qmm::v1::WeightInfo> info = (*client)->Upload(spec, payload);
//   absl::StatusOr<qmm::MatMulResult> y = (*client)->MatMul("layer0", x);
//
// Every call returns the server's status unchanged (code and message); errors found on
// this side (an unencodable tensor, a dead stream) are INVALID_ARGUMENT or the stream's
// final status. A Client is thread-safe: calls may run concurrently from many threads
// over its one channel. A MatMulStream or ForwardStream belongs to one thread at a time.
#ifndef QMM_CLIENT_CLIENT_H_
#define QMM_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/credentials.h"
#include "client/matmul_messages.h"
#include "client/nd_array.h"
#include "client/rpc_stream.h"
#include "client/upload_request.h"
#include "inference/open_inference.grpc.pb.h"
#include "kernels/dtype.h"
#include "qmm/v1/qmm.grpc.pb.h"

namespace qmm {

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  // HOST:PORT
  // Plaintext by default (loopback or a trusted network), or TLS.
  TlsClientOptions tls;
  // Largest message sent or received (big MatMul results); the server has its own limit.
  int64_t max_message_bytes = int64_t{256} << 20;
  // How long Connect waits for the channel to come up.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadline of each unary call (not of Upload, nor of a stream).
  absl::Duration call_timeout = absl::Seconds(60);
};

// Called after each chunk an upload sent, with the bytes sent so far and the total.
using UploadProgress = std::function<void(int64_t sent_bytes, int64_t total_bytes)>;

// One MatMulStream RPC: requests written go out on one stream and are answered in order,
// without per-call setup, for decode loops. After any failure the stream is over and
// every later call returns the same status (the server's, when it ended the stream).
// Keep a few requests in flight at most: Write blocks when flow control is full.
// Destroying a stream that was not finished cancels it.
class MatMulStream {
 public:
  absl::Status Write(std::string_view weight, const NdArray& x,
                     std::optional<DType> output_dtype = std::nullopt);
  // The response to the oldest request not read yet.
  absl::StatusOr<MatMulResult> Read();
  // Write, then Read.
  absl::StatusOr<MatMulResult> Call(std::string_view weight, const NdArray& x,
                                    std::optional<DType> output_dtype = std::nullopt);
  // Half-closes the stream and waits for the server's final status. Responses not read
  // yet are discarded.
  absl::Status Finish() { return rpc_.Finish(); }

 private:
  friend class Client;
  using Rpc = client_internal::RpcStream<v1::MatMulRequest, v1::MatMulResponse>;

  MatMulStream(std::unique_ptr<grpc::ClientContext> context, std::unique_ptr<Rpc::Stream> stream)
      : rpc_(std::move(context), std::move(stream), "MatMul") {}

  Rpc rpc_;
};

// One ForwardStream RPC: the same for a model (Client::Forward), with activations or token
// ids per request.
class ForwardStream {
 public:
  absl::Status Write(std::string_view model, const NdArray& x,
                     std::optional<DType> output_dtype = std::nullopt);
  absl::Status Write(std::string_view model, std::span<const int32_t> token_ids,
                     std::optional<DType> output_dtype = std::nullopt);
  // The response to the oldest request not read yet.
  absl::StatusOr<MatMulResult> Read();
  // Write, then Read.
  absl::StatusOr<MatMulResult> Call(std::string_view model, const NdArray& x,
                                    std::optional<DType> output_dtype = std::nullopt);
  absl::StatusOr<MatMulResult> Call(std::string_view model, std::span<const int32_t> token_ids,
                                    std::optional<DType> output_dtype = std::nullopt);
  // As MatMulStream::Finish.
  absl::Status Finish() { return rpc_.Finish(); }

 private:
  friend class Client;
  using Rpc = client_internal::RpcStream<v1::ForwardRequest, v1::ForwardResponse>;

  ForwardStream(std::unique_ptr<grpc::ClientContext> context, std::unique_ptr<Rpc::Stream> stream)
      : rpc_(std::move(context), std::move(stream), "Forward") {}

  Rpc rpc_;
};

class Client {
 public:
  // Creates the channel and waits up to options.connect_timeout for it to connect;
  // UNAVAILABLE naming the server when it does not (a TLS handshake that fails included),
  // INVALID_ARGUMENT for TLS files that cannot be read (MakeChannelCredentials).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Streams the header and then `payload` in chunks of at most 1 MiB; the header carries
  // the payload's size and SHA-256. Returns the weight as the server stored it.
  absl::StatusOr<v1::WeightInfo> Upload(const UploadSpec& spec, std::span<const uint8_t> payload,
                                        const UploadProgress& progress = nullptr);

  absl::StatusOr<v1::WeightInfo> GetWeight(std::string_view name);
  // Sorted by name.
  absl::StatusOr<std::vector<v1::WeightInfo>> ListWeights();
  absl::Status DeleteWeight(std::string_view name);
  absl::StatusOr<v1::ServerInfoResponse> ServerInfo();
  // The standard health check (grpc.health.v1 Check) of `service`: "" asks about the whole
  // server, "qmm.v1.Qmm" about the API. true for SERVING, false for NOT_SERVING (a server
  // draining, or whose device was lost); NOT_FOUND for a service the server does not serve.
  absl::StatusOr<bool> Serving(std::string_view service = "");
  // The server's statistics of the weight or model `name` (all of them, by name, when
  // empty), through the Open Inference Protocol's ModelStatistics on the same connection.
  absl::StatusOr<inference::ModelStatisticsResponse> Statistics(std::string_view name = "");

  // y = x * W^T; x is [M, K] of f32, f16 or bf16. `output_dtype` nullopt: x's dtype.
  absl::StatusOr<MatMulResult> MatMul(std::string_view weight, const NdArray& x,
                                      std::optional<DType> output_dtype = std::nullopt);

  absl::StatusOr<std::unique_ptr<MatMulStream>> OpenMatMulStream();

  // Models (proto/qmm/v1/qmm.proto, "Models"); client/model_spec.h builds the request
  // from a JSON file.
  absl::StatusOr<v1::ModelInfo> CreateModel(const v1::CreateModelRequest& request);
  // With the layers' parameters.
  absl::StatusOr<v1::ModelInfo> GetModel(std::string_view name);
  // Sorted by name; the layers without their parameter values.
  absl::StatusOr<std::vector<v1::ModelInfo>> ListModels();
  absl::Status DeleteModel(std::string_view name);

  // y = model(x); x is [M, in_features] of f32, f16 or bf16. `output_dtype` nullopt: x's.
  // The result's compute_ns is the backend's time for the batch it ran in.
  absl::StatusOr<MatMulResult> Forward(std::string_view model, const NdArray& x,
                                       std::optional<DType> output_dtype = std::nullopt);
  // y = model(token_ids) for a model that starts with an embedding; `output_dtype`
  // nullopt: fp32.
  absl::StatusOr<MatMulResult> Forward(std::string_view model, std::span<const int32_t> token_ids,
                                       std::optional<DType> output_dtype = std::nullopt);

  absl::StatusOr<std::unique_ptr<ForwardStream>> OpenForwardStream();

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  void SetDeadline(grpc::ClientContext& context) const;
  absl::StatusOr<MatMulResult> CallForward(const v1::ForwardRequest& request);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Qmm::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
};

}  // namespace qmm

#endif  // QMM_CLIENT_CLIENT_H_
