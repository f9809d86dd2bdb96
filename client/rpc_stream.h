// One bidirectional RPC of the service whose responses come back in request order
// (MatMulStream, ForwardStream): the gRPC sync stream plus the status bookkeeping both
// client streams share. After any failure the stream is over and every later call returns
// the same status (the server's, when it ended the stream).
#ifndef QMM_CLIENT_RPC_STREAM_H_
#define QMM_CLIENT_RPC_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/grpc_status.h"

namespace qmm::client_internal {

template <typename Request, typename Response>
class RpcStream {
 public:
  using Stream = grpc::ClientReaderWriter<Request, Response>;

  // `what` names the RPC in the status of a stream the server closed early.
  RpcStream(std::unique_ptr<grpc::ClientContext> context, std::unique_ptr<Stream> stream,
            std::string what)
      : context_(std::move(context)), stream_(std::move(stream)), what_(std::move(what)) {}
  RpcStream(const RpcStream&) = delete;
  RpcStream& operator=(const RpcStream&) = delete;
  // Cancels the RPC if Finish() was not called.
  ~RpcStream() {
    if (ended_) return;
    context_->TryCancel();
    End().IgnoreError();
  }

  bool ended() const { return ended_; }
  const absl::Status& final_status() const { return final_status_; }

  absl::Status Write(const Request& request) {
    if (ended_) return final_status_;
    if (stream_->Write(request)) return absl::OkStatus();
    return End();
  }

  // The response to the oldest request not read yet.
  absl::Status Read(Response* response) {
    if (ended_) return final_status_;
    if (stream_->Read(response)) return absl::OkStatus();
    if (absl::Status status = End(); !status.ok()) return status;
    final_status_ = absl::OutOfRangeError(
        absl::StrCat("the server closed the ", what_, " stream with no response"));
    return final_status_;
  }

  // Half-closes the stream and waits for the server's final status. Responses not read
  // yet are discarded.
  absl::Status Finish() {
    if (ended_) return final_status_;
    stream_->WritesDone();
    return End();
  }

 private:
  // Drains the stream and records the server's status; returns it.
  absl::Status End() {
    // The sync API wants every incoming message read before Finish().
    Response discarded;
    while (stream_->Read(&discarded)) {
    }
    final_status_ = FromGrpcStatus(stream_->Finish());
    ended_ = true;
    return final_status_;
  }

  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  std::string what_;
  bool ended_ = false;
  absl::Status final_status_;
};

}  // namespace qmm::client_internal

#endif  // QMM_CLIENT_RPC_STREAM_H_
