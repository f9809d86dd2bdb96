// Process lifecycle for qmm-server: wait for SIGINT/SIGTERM without a signal handler
// (the signals are blocked and taken with sigtimedwait, so nothing runs in signal
// context), drain on a signal, and exit non-zero when the backend stops being healthy.
#ifndef QMM_SERVER_LIFECYCLE_H_
#define QMM_SERVER_LIFECYCLE_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/server.h"

namespace qmm {

// Blocks SIGINT and SIGTERM in the calling thread and in every thread it starts later.
// Call first in main, before any thread (gRPC's included) exists.
absl::Status BlockTerminationSignals();

// Serves until SIGINT/SIGTERM arrives (then shuts the server down gracefully and returns
// 0) or the backend reports unhealthy (then sets health NOT_SERVING, shuts down and
// returns 1). Polls health every `poll`.
int ServeUntilSignal(QmmServer& server, absl::Duration poll = absl::Seconds(1));

}  // namespace qmm

#endif  // QMM_SERVER_LIFECYCLE_H_
