#include "tests/server/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace qmm::testing {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status Wait(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("HTTP request timed out");
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(ms));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
  }
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(int port, absl::string_view target, absl::Duration timeout) {
  return HttpRequest(port, "GET", target, "", "", timeout);
}

absl::StatusOr<HttpResponse> HttpRequest(int port, absl::string_view method,
                                         absl::string_view target, absl::string_view body,
                                         absl::string_view headers, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect to 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat(method, " ", target, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n",
                   body.empty() ? "" : absl::StrCat("Content-Length: ", body.size(), "\r\n"),
                   headers, "\r\n", body);
  for (size_t sent = 0; sent < request.size();) {
    if (absl::Status s = Wait(fd.get(), POLLOUT, deadline); !s.ok()) return s;
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[16384];
  for (;;) {
    if (absl::Status s = Wait(fd.get(), POLLIN, deadline); !s.ok()) return s;
    const ssize_t n = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    if (n > 0) raw.append(buffer, static_cast<size_t>(n));
  }
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || !absl::StartsWith(raw, "HTTP/1.")) {
    return absl::DataLossError(absl::StrCat("not an HTTP response: ", raw.substr(0, 200)));
  }
  HttpResponse response;
  response.headers = raw.substr(0, end);
  response.body = raw.substr(end + 4);
  const size_t space = response.headers.find(' ');
  if (space == std::string::npos ||
      !absl::SimpleAtoi(response.headers.substr(space + 1, 3), &response.status)) {
    return absl::DataLossError(absl::StrCat("bad HTTP status line: ", response.headers));
  }
  return response;
}

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

}  // namespace qmm::testing
