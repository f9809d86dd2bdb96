// The unary MatMul RPC on gRPC's async API. Threads of its own each block on a completion
// queue of their own, and an arriving request is validated and queued for its batch on
// the thread that took it from the queue. On the callback API (every other RPC here) gRPC
// 1.51 hands each call on to one of its executor threads first: on the project's 2-core
// build machine an empty unary round trip on loopback took 115-126 us at the median
// through a callback handler and 63-82 us through a thread blocked on the call's
// completion queue (a minimal server, three runs each; docs/PERFORMANCE.md, batching).
//
// Threads: Start and Shutdown from the server's controlling thread; the rest runs on the
// threads it starts and on the batcher's.
#ifndef QMM_SERVER_UNARY_MATMUL_H_
#define QMM_SERVER_UNARY_MATMUL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>
#include <vector>

#include "qmm/v1/qmm.grpc.pb.h"
#include "server/service_context.h"

namespace qmm {

// The service class whose MatMul is asynchronous and every other method a callback: each
// method of qmm.v1.Qmm, in the proto's order. (MatMul cannot be marked asynchronous on top
// of v1::Qmm::CallbackService: gRPC keeps a callback method's handler when it is re-marked,
// and then registers it as a callback.)
using AsyncMatMulService =
    v1::Qmm::WithCallbackMethod_UploadWeight<v1::Qmm::WithCallbackMethod_GetWeight<
        v1::Qmm::WithCallbackMethod_ListWeights<v1::Qmm::WithCallbackMethod_DeleteWeight<
            v1::Qmm::WithCallbackMethod_ServerInfo<v1::Qmm::WithAsyncMethod_MatMul<
                v1::Qmm::WithCallbackMethod_MatMulStream<v1::Qmm::WithCallbackMethod_CreateModel<
                    v1::Qmm::WithCallbackMethod_GetModel<v1::Qmm::WithCallbackMethod_ListModels<
                        v1::Qmm::WithCallbackMethod_DeleteModel<v1::Qmm::WithCallbackMethod_Forward<
                            v1::Qmm::WithCallbackMethod_ForwardStream<v1::Qmm::Service>>>>>>>>>>>>>;

class UnaryMatMul {
 public:
  // Adds `threads` (>= 1) completion queues to `builder` for `service`'s MatMul.
  // `context` and `service` must outlive Shutdown.
  UnaryMatMul(const ServiceContext& context, AsyncMatMulService* service,
              grpc::ServerBuilder& builder, int threads);
  ~UnaryMatMul();

  UnaryMatMul(const UnaryMatMul&) = delete;
  UnaryMatMul& operator=(const UnaryMatMul&) = delete;

  // Once the server is built and started: asks for the first calls and starts the threads.
  void Start();

  // Once the server has shut down (Shutdown and Wait), and while the batcher still runs:
  // answers a call that still arrives UNAVAILABLE rather than queueing it, waits for every
  // other call to end (the batcher answers what it holds), then shuts the queues down and
  // joins the threads. Afterwards no request of this class is left in the batcher.
  // Idempotent; the destructor calls it.
  void Shutdown();

  // What the calls share (unary_matmul.cc).
  struct State;

 private:
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
};

}  // namespace qmm

#endif  // QMM_SERVER_UNARY_MATMUL_H_
