#include "tests/server/promtool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace qmm::testing {

std::optional<std::string> FindOnPath(absl::string_view name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

absl::Status PromtoolCheckMetrics(absl::string_view exposition) {
  const std::optional<std::string> promtool = FindOnPath("promtool");
  if (!promtool) return absl::FailedPreconditionError("promtool is not installed");
  char input[] = "/tmp/qmm-exposition-XXXXXX";
  const int fd = mkstemp(input);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  std::ofstream(input, std::ios::binary) << exposition;
  const std::string command = absl::StrCat(*promtool, " check metrics < ", input, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    unlink(input);
    return absl::InternalError("popen failed");
  }
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  unlink(input);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && output.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("promtool check metrics (status ", status, "): ", output));
}

}  // namespace qmm::testing
