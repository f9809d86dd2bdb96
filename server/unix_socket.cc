#include "server/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace qmm {

std::optional<std::string> UnixSocketPath(absl::string_view address) {
  if (!absl::ConsumePrefix(&address, "unix:")) return std::nullopt;
  // The URI form: an empty authority, then the absolute path.
  if (absl::ConsumePrefix(&address, "//") && !absl::StartsWith(address, "/")) return "";
  return std::string(address);
}

absl::Status CheckUnixSocketFree(const std::string& path) {
  sockaddr_un socket_address{};
  socket_address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(socket_address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen = \"unix:", path,
                                                   "\": a Unix socket path must have 1 to ",
                                                   sizeof(socket_address.sun_path) - 1, " bytes"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();  // free (or gRPC says why not)
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on \"unix:", path, "\": it exists and is not a socket"));
  }
  std::memcpy(socket_address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();  // cannot probe; gRPC's bind decides
  const bool answered =
      connect(fd, reinterpret_cast<const sockaddr*>(&socket_address), sizeof(socket_address)) == 0;
  close(fd);
  if (answered) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"unix:", path, "\": another server is listening there"));
  }
  return absl::OkStatus();
}

}  // namespace qmm
