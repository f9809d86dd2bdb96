#include "server/request_clock.h"

#include "server/grpc_status.h"

namespace qmm {

grpc::Status RequestClock::Finish(const grpc::Status& status) const {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  // gRPC's codes and absl's have the same numbers.
  metrics_->RecordRequest(method_, static_cast<absl::StatusCode>(status.error_code()),
                          elapsed.count());
  return status;
}

grpc::Status RequestClock::Finish(const absl::Status& status) const {
  return Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* rpc, const RequestClock& clock,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  reactor->Finish(clock.Finish(status));
  return reactor;
}

}  // namespace qmm
