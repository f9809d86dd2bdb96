// The transport by itself, for qmmctl bench: a qmm.v1.Qmm service whose one "weight" is
// the identity, so that MatMul and MatMulStream answer each request with its own
// activations (copied into the answer, as a real server copies its results) and nothing
// else: no queue, no batch, no kernel. qmmctl bench runs against it unchanged (it asks
// ServerInfo and GetWeight first), and what it measures there is gRPC's own cost on the
// host, with the same client, messages and server API (callback) as against qmm-server:
// the figure the batching server's requests/s and latency are read against, as the
// kernels' are against a device copy (docs/PERFORMANCE.md). A lone call's latency through
// it is a floor for qmm-server's; its rate under many streams is not a ceiling, since it
// answers on gRPC's callback threads, which qmm-server relieves with completion threads of
// its own (it served 10-20% more than the echo on a 16-core GPU machine).
//
// Requests are checked as qmm-server checks them (the weight's name, the input's dtype,
// shape and size, the rows against max_rows) and refused with the same codes; an echo
// cannot change dtype, so an output_dtype other than the input's is refused too. The other
// methods of the service answer UNIMPLEMENTED.
#ifndef QMM_SERVER_ECHO_ECHO_SERVICE_H_
#define QMM_SERVER_ECHO_ECHO_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "qmm/v1/qmm.grpc.pb.h"

namespace qmm::echo {

struct EchoOptions {
  std::string weight = "w";  // the identity weight's name
  int64_t features = 8192;   // its K = N
  int64_t max_rows = 65536;  // largest M of one request (qmm-server's default)
  int64_t max_message_bytes = int64_t{64} << 20;
};

// The answer to `request`: its input, or why it is refused (nothing is written then).
absl::Status Echo(const EchoOptions& options, const v1::MatMulRequest& request,
                  v1::MatMulResponse* response);

// Stateless beyond its options; may be called from any gRPC thread.
class EchoService final : public v1::Qmm::CallbackService {
 public:
  explicit EchoService(EchoOptions options) : options_(std::move(options)) {}

  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* rpc,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetWeight(grpc::CallbackServerContext* rpc,
                                      const v1::GetWeightRequest* request,
                                      v1::WeightInfo* response) override;
  grpc::ServerUnaryReactor* ListWeights(grpc::CallbackServerContext* rpc,
                                        const v1::ListWeightsRequest* request,
                                        v1::ListWeightsResponse* response) override;
  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* rpc,
                                   const v1::MatMulRequest* request,
                                   v1::MatMulResponse* response) override;
  grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse>* MatMulStream(
      grpc::CallbackServerContext* rpc) override;

 private:
  void FillWeightInfo(v1::WeightInfo* info) const;

  const EchoOptions options_;
};

}  // namespace qmm::echo

#endif  // QMM_SERVER_ECHO_ECHO_SERVICE_H_
