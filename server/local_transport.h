// The local transport (proto/local/local_layout.h): MatMul requests from clients on the
// same host through shared memory, into the same batching queues as gRPC's. It exists for
// the decode path's latency: a gRPC round trip on loopback costs 65-80 us before the
// server does anything (docs/PERFORMANCE.md), several times an M = 1 kernel.
//
// An acceptor thread takes connections on the Unix socket and answers each Hello (a
// client that has not sent its 24 bytes within a second is dropped, so one slow client
// holds the next ones back at most that long). Poller threads, each with the sessions
// given to it in turn, poll the sessions' slots for new requests: after one, for
// `spin`, they keep polling; then they sleep until a doorbell, a new session or a closed
// one. A request's message is copied out, parsed and checked on the poller (the same
// PrepareMatMul as gRPC's MatMul, metrics method "LocalMatMul"), then queued; its answer
// is written into the session's segment by the thread that finishes it. fp16 rows beside
// the message stay where the client wrote them, and their results go straight into the
// answer's area: on a backend that registers host memory (the GPU's), each session's
// segment is registered when it opens (within `pinned_bytes`), and launches of such
// requests run through Backend::MatMulBlocks, the device reading and writing the segments.
//
// Threads: Start and Shutdown from the server's controlling thread.
#ifndef QMM_SERVER_LOCAL_TRANSPORT_H_
#define QMM_SERVER_LOCAL_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/local/local_ipc.h"
#include "server/service_context.h"

namespace qmm {

struct LocalTransportOptions {
  std::string path;  // the Unix socket, created here (a stale socket file is replaced)
  // How long a poller keeps polling after its last request before it sleeps.
  absl::Duration spin = absl::Microseconds(100);
  int threads = 2;  // pollers
  int max_sessions = 1024;
  // Most bytes of session segments registered with the backend at once (RegisterHost), so
  // that its device reads fp16 rows and writes results in the segment itself; a session
  // beyond it is served with host copies. Registered memory is page-locked: this bounds
  // what clients can lock.
  int64_t pinned_bytes = int64_t{1} << 30;
};

// INVALID_ARGUMENT naming the option when one is out of range.
absl::Status CheckLocalTransportOptions(const LocalTransportOptions& options);

// Why a session with this Hello is refused (the Welcome's code and message), or OK.
absl::Status CheckHello(const local::Hello& hello, int64_t max_message_bytes);

class LocalTransport {
 public:
  // Listens at options.path; what CheckUnixSocketFree refuses is refused the same way.
  // `context` (its batcher, store and metrics) must outlive the transport.
  static absl::StatusOr<std::unique_ptr<LocalTransport>> Start(const LocalTransportOptions& options,
                                                               const ServiceContext& context);
  // Shuts down.
  ~LocalTransport();

  LocalTransport(const LocalTransport&) = delete;
  LocalTransport& operator=(const LocalTransport&) = delete;

  // Takes no more sessions or requests, lets the requests already taken finish and be
  // answered, then ends every session and removes the socket file. Idempotent.
  void Shutdown();

  int sessions() const { return sessions_.load(std::memory_order_relaxed); }

  struct Session;
  class Poller;

 private:
  LocalTransport(const LocalTransportOptions& options, const ServiceContext& context,
                 local::Fd listener);

  void AcceptLoop();
  // Answers one connection's Hello; on success the session goes to a poller.
  void Handshake(local::Fd socket);
  class Pinned;
  // The segment registered with the backend within options_.pinned_bytes, or null.
  std::unique_ptr<Pinned> Pin(const local::Segment& segment);
  // Called once per request taken, and once more when it has been answered.
  void RequestStarted();
  void RequestFinished();

  const LocalTransportOptions options_;
  const ServiceContext context_;
  local::Fd listener_;
  std::atomic<uint64_t> pinned_bytes_{0};  // of the sessions' registrations (Pinned)
  std::vector<std::unique_ptr<Poller>> pollers_;
  std::atomic<int> sessions_{0};
  std::atomic<bool> stopping_{false};  // set by Shutdown, read by the acceptor
  int next_poller_ = 0;                // acceptor thread only

  absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ = false;  // controlling thread only

  std::thread acceptor_;
};

}  // namespace qmm

#endif  // QMM_SERVER_LOCAL_TRANSPORT_H_
