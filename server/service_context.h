// What the RPC handlers share: the backend, the weight store, the worker pools, the
// metrics and the limits. Owned by QmmServer, which keeps all of it alive until every RPC has
// finished.
#ifndef QMM_SERVER_SERVICE_CONTEXT_H_
#define QMM_SERVER_SERVICE_CONTEXT_H_

#include "server/access.h"
#include "server/backend.h"
#include "server/compute_pool.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/model_store.h"
#include "server/weight_store.h"

namespace qmm {

class Batcher;  // server/batcher.h, which includes this header indirectly

struct ServiceContext {
  Backend* backend = nullptr;
  WeightStore* store = nullptr;
  // Models over those weights; weights are deleted through it (the in-use rule).
  ModelStore* models = nullptr;
  // MatMul work: per-weight batching queues over one thread per backend worker.
  Batcher* batcher = nullptr;
  // Those workers (Batcher::pool()), for other work that needs a backend worker index.
  ComputePool* compute = nullptr;
  // Upload conversion (quantization) and Backend::Load, kept off the MatMul workers so a
  // large upload does not stall requests.
  ComputePool* loader = nullptr;
  // Every RPC records itself here (see RequestClock and DispatchMatMul).
  Metrics* metrics = nullptr;
  // Which clients may upload and delete (UploadWeight, DeleteWeight, CreateModel,
  // DeleteModel).
  const AccessPolicy* access = nullptr;
  ServiceLimits limits;
};

}  // namespace qmm

#endif  // QMM_SERVER_SERVICE_CONTEXT_H_
