// What the RPC handlers share: the backend, the weight store, the worker pools and the
// limits. Owned by QmmServer, which keeps all of it alive until every RPC has finished.
#ifndef QMM_SERVER_SERVICE_CONTEXT_H_
#define QMM_SERVER_SERVICE_CONTEXT_H_

#include "server/backend.h"
#include "server/compute_pool.h"
#include "server/limits.h"
#include "server/weight_store.h"

namespace qmm {

struct ServiceContext {
  Backend* backend = nullptr;
  WeightStore* store = nullptr;
  // MatMul work; one thread per backend worker.
  ComputePool* compute = nullptr;
  // Upload conversion (quantization) and Backend::Load, kept off the MatMul workers so a
  // large upload does not stall requests.
  ComputePool* loader = nullptr;
  ServiceLimits limits;
};

}  // namespace qmm

#endif  // QMM_SERVER_SERVICE_CONTEXT_H_
