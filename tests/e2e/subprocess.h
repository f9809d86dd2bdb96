// Starting and stopping the real binaries for the end-to-end tests.
#ifndef QMM_TESTS_E2E_SUBPROCESS_H_
#define QMM_TESTS_E2E_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace qmm::e2e {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs `binary` with `args` to completion, its output captured through a file in
// `scratch_dir`.
absl::StatusOr<RunResult> RunProcess(const std::string& binary,
                                     const std::vector<std::string>& args,
                                     const std::string& scratch_dir);

// A running qmm-server (or qmm-echo-server).
class ServerProcess {
 public:
  // Starts `binary` with `args` (which should listen on port 0) and waits up to `timeout`
  // for its "qmm-server listening on HOST:PORT backend=NAME ..." line (qmm-echo-server's
  // says "qmm-echo-server").
  static absl::StatusOr<ServerProcess> Start(const std::string& binary,
                                             const std::vector<std::string>& args,
                                             const std::string& scratch_dir,
                                             absl::Duration timeout);

  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&&) = delete;
  // Kills the process if Stop() was not called.
  ~ServerProcess();

  const std::string& address() const { return address_; }  // HOST:PORT
  const std::string& backend() const { return backend_; }

  // Sends `signal` and waits up to `timeout` for the exit; returns the exit code (128 +
  // signal when killed by one). DEADLINE_EXCEEDED (and a SIGKILL) when it hangs.
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout);

  // Everything the server wrote on stderr so far, for failure messages.
  std::string Log() const;

 private:
  ServerProcess(pid_t pid, std::string stdout_path, std::string stderr_path)
      : pid_(pid), stdout_path_(std::move(stdout_path)), stderr_path_(std::move(stderr_path)) {}

  pid_t pid_ = -1;
  std::string stdout_path_;
  std::string stderr_path_;
  std::string address_;
  std::string backend_;
};

}  // namespace qmm::e2e

#endif  // QMM_TESTS_E2E_SUBPROCESS_H_
