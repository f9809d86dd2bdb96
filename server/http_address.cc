#include "server/http_address.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace qmm {

absl::Status CheckHttpAddress(absl::string_view address, absl::string_view what,
                              absl::string_view example) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " address \"", address, "\" must be HOST:PORT, e.g. ", example, " (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return invalid("no port");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (host.empty()) return invalid("no host");
  if (host.front() == '[') return invalid("IPv6 is not supported");
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-') {
      return invalid("the host must be an IPv4 address or a host name");
    }
  }
  int port_number = 0;
  if (port.empty() || port.size() > 5 || !absl::c_all_of(port, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return invalid("the port must be a number in [0, 65535]");
  }
  return absl::OkStatus();
}

}  // namespace qmm
