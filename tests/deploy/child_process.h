// A background process for the integration tests (qmm-server, prometheus): started with
// its stdout and stderr in one log file, stopped and reaped by the destructor.
#ifndef QMM_TESTS_DEPLOY_CHILD_PROCESS_H_
#define QMM_TESTS_DEPLOY_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace qmm::testing {

class ChildProcess {
 public:
  // Starts `binary` with `args`; its output goes to `log_path` (truncated).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                             const std::vector<std::string>& args,
                                                             const std::string& log_path);

  // SIGTERM, then SIGKILL if it has not exited within 10 s; reaps it either way.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Everything it has written so far.
  std::string Output() const;

  // Waits until the output matches `pattern` (ECMAScript regex) and returns the first
  // capture group (or the whole match without one). DEADLINE_EXCEEDED past `timeout`,
  // FAILED_PRECONDITION if the process exits first; both carry the output.
  absl::StatusOr<std::string> WaitForOutput(absl::string_view pattern, absl::Duration timeout);

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  bool Exited();

  pid_t pid_;
  const std::string log_path_;
};

}  // namespace qmm::testing

#endif  // QMM_TESTS_DEPLOY_CHILD_PROCESS_H_
