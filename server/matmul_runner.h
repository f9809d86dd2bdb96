// The MatMul path shared by the unary and the streaming RPC: validate on the gRPC
// thread (PrepareMatMul), compute on a compute-pool worker (RunMatMul).
#ifndef QMM_SERVER_MATMUL_RUNNER_H_
#define QMM_SERVER_MATMUL_RUNNER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/validation.h"
#include "server/weight_store.h"

namespace qmm {

// A validated request. Holds the weight, so a concurrent delete cannot free it; the
// request must stay alive and unchanged until RunMatMul returns.
struct MatMulJob {
  std::shared_ptr<const StoredWeight> weight;
  const v1::MatMulRequest* request = nullptr;
  MatMulSpec spec;
};

// INVALID_ARGUMENT for a bad name or input, NOT_FOUND for an unknown weight,
// RESOURCE_EXHAUSTED when the output would not fit in one message.
absl::StatusOr<MatMulJob> PrepareMatMul(const v1::MatMulRequest& request, const WeightStore& store,
                                        const ServiceLimits& limits);

// Runs the job on `worker` and writes the whole response (cleared first).
absl::Status RunMatMul(Backend& backend, int worker, const MatMulJob& job,
                       v1::MatMulResponse* response);

}  // namespace qmm

#endif  // QMM_SERVER_MATMUL_RUNNER_H_
