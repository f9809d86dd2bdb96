#include "tests/deploy/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace qmm::testing {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", binary, ": ", std::strerror(error)));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
}

ChildProcess::~ChildProcess() {
  if (Exited()) return;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!Exited() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  if (Exited()) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  if (waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
  pid_ = -1;
  return true;
}

std::string ChildProcess::Output() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> ChildProcess::WaitForOutput(absl::string_view pattern,
                                                        absl::Duration timeout) {
  const std::regex regex{std::string(pattern)};
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const std::string output = Output();
    std::smatch match;
    if (std::regex_search(output, match, regex)) return match.size() > 1 ? match[1] : match[0];
    if (Exited()) {
      return absl::FailedPreconditionError(
          absl::StrCat("exited before printing /", pattern, "/:\n", output));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no /", pattern, "/ within ", absl::FormatDuration(timeout), ":\n", output));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace qmm::testing
