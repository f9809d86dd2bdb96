#include "tests/e2e/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace qmm::e2e {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string UniquePath(const std::string& dir, std::string_view stem) {
  static std::atomic<int> counter{0};
  return absl::StrCat(dir, "/", std::string(stem), ".", getpid(), ".", counter++, ".log");
}

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

// posix_spawn `binary` with stdout to `out_path` and stderr to `err_path` (the same
// file when equal).
absl::StatusOr<pid_t> Spawn(const std::string& binary, const std::vector<std::string>& args,
                            const std::string& out_path, const std::string& err_path) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err_path == out_path) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = -1;
  const int error = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", binary, ": ", std::strerror(error)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<RunResult> RunProcess(const std::string& binary,
                                     const std::vector<std::string>& args,
                                     const std::string& scratch_dir) {
  const std::string out_path = UniquePath(scratch_dir, "run");
  absl::StatusOr<pid_t> pid = Spawn(binary, args, out_path, out_path);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid failed");
  }
  RunResult result{ExitCode(status), ReadAll(out_path)};
  unlink(out_path.c_str());
  return result;
}

absl::StatusOr<ServerProcess> ServerProcess::Start(const std::string& binary,
                                                   const std::vector<std::string>& args,
                                                   const std::string& scratch_dir,
                                                   absl::Duration timeout) {
  const std::string out_path = UniquePath(scratch_dir, "server-stdout");
  const std::string err_path = UniquePath(scratch_dir, "server-stderr");
  absl::StatusOr<pid_t> pid = Spawn(binary, args, out_path, err_path);
  if (!pid.ok()) return pid.status();
  ServerProcess server(*pid, out_path, err_path);

  static const std::regex kLine(
      R"((?:qmm-server|qmm-echo-server) listening on (\S+:\d+) backend=(\S+))");
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string out = ReadAll(out_path);
    std::smatch match;
    const size_t line_end = out.find('\n');
    if (line_end != std::string::npos) {
      const std::string line = out.substr(0, line_end);
      if (!std::regex_search(line, match, kLine)) {
        return absl::InternalError(absl::StrCat("unexpected first line: ", line));
      }
      server.address_ = match[1];
      server.backend_ = match[2];
      return server;
    }
    int status = 0;
    if (waitpid(server.pid_, &status, WNOHANG) == server.pid_) {
      server.pid_ = -1;
      return absl::InternalError(absl::StrCat("qmm-server exited with code ", ExitCode(status),
                                              " before listening: ", ReadAll(err_path)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("qmm-server printed no listening line within ",
                                                  absl::FormatDuration(timeout), ": ",
                                                  ReadAll(err_path)));
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdout_path_(std::move(other.stdout_path_)),
      stderr_path_(std::move(other.stderr_path_)),
      address_(std::move(other.address_)),
      backend_(std::move(other.backend_)) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!stdout_path_.empty()) unlink(stdout_path_.c_str());
  if (!stderr_path_.empty()) unlink(stderr_path_.c_str());
}

absl::StatusOr<int> ServerProcess::Stop(int signal, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("the server is not running");
  kill(pid_, signal);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return ExitCode(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return absl::DeadlineExceededError(
      absl::StrCat("qmm-server did not exit within ", absl::FormatDuration(timeout)));
}

std::string ServerProcess::Log() const { return ReadAll(stderr_path_); }

}  // namespace qmm::e2e
