// The UploadWeight stream. The header is checked in full and the name and memory are
// reserved before any data is accepted; chunks are counted and hashed as they arrive on
// the gRPC thread; conversion, Backend::Load and publishing run on the loader pool.
// Any failure releases the reservation before the status goes out, so nothing of a
// failed upload remains and a retry under the same name is not refused.
#ifndef QMM_SERVER_UPLOAD_REACTOR_H_
#define QMM_SERVER_UPLOAD_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/request_clock.h"
#include "server/service_context.h"
#include "server/upload_assembler.h"
#include "server/validation.h"
#include "server/weight_store.h"

namespace qmm {

// Deletes itself when gRPC is done with the call (OnDone).
class UploadReactor : public grpc::ServerReadReactor<v1::UploadWeightRequest> {
 public:
  UploadReactor(const ServiceContext& context, grpc::CallbackServerContext* rpc,
                v1::UploadWeightResponse* response);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  absl::Status HandleMessage();
  absl::Status HandleHeader(const v1::WeightHeader& header);
  // End of stream: checks the payload and hands it to the loader pool.
  void EndOfStream();
  // On the loader pool: payload -> packed form -> backend -> store.
  absl::Status LoadAndPublish(std::vector<uint8_t> payload);
  // Releases everything this upload holds, then finishes the RPC.
  void Reply(const absl::Status& status);
  // Counts a RESOURCE_EXHAUSTED from the budget or the backend as a memory rejection;
  // returns `status`.
  absl::Status CountMemoryRejection(absl::Status status);

  const ServiceContext& context_;
  grpc::CallbackServerContext* const rpc_;
  v1::UploadWeightResponse* const response_;
  v1::UploadWeightRequest request_;
  std::optional<UploadSpec> spec_;
  std::optional<WeightStore::Reservation> reservation_;
  std::optional<UploadAssembler> assembler_;
  const RequestClock clock_;
};

}  // namespace qmm

#endif  // QMM_SERVER_UPLOAD_REACTOR_H_
