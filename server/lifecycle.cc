#include "server/lifecycle.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

absl::Status BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0) {
    return absl::InternalError(absl::StrCat("pthread_sigmask: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

int ServeUntilSignal(QmmServer& server, absl::Duration poll) {
  const sigset_t set = TerminationSignals();
  const timespec timeout = absl::ToTimespec(poll);
  while (true) {
    const int signal = sigtimedwait(&set, nullptr, &timeout);
    if (signal == SIGINT || signal == SIGTERM) {
      std::cerr << "qmm-server: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                << ", draining in-flight calls\n";
      server.Shutdown();
      return 0;
    }
    if (signal < 0 && errno != EAGAIN && errno != EINTR) {
      std::cerr << "qmm-server: sigtimedwait: " << std::strerror(errno) << "\n";
      server.Shutdown();
      return 1;
    }
    if (!server.backend().healthy()) {
      std::cerr << "qmm-server: backend " << server.backend().name()
                << " is no longer usable; reporting NOT_SERVING and exiting\n";
      server.SetServing(false);
      server.Shutdown();
      return 1;
    }
  }
}

}  // namespace qmm
