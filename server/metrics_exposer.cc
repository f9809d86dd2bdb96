#include "server/metrics_exposer.h"

#include <prometheus/exposer.h>

#include <exception>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

constexpr int kHttpThreads = 2;

// civetweb reads the address as a `listening_ports` option, where a comma adds a second
// listener and a trailing 's' or 'r' asks for TLS or a redirect: only a plain HOST:PORT
// gets through, so that what listens is what the operator wrote.
absl::Status CheckAddress(absl::string_view address) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", address, "\" must be HOST:PORT, e.g. 127.0.0.1:9464 (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return invalid("no port");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (host.empty()) return invalid("no host");
  if (host.front() == '[') return invalid("IPv6 is not supported by the metrics exporter");
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

}  // namespace

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsExposer::~MetricsExposer() = default;

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    absl::string_view address, std::weak_ptr<prometheus::Collectable> collectable) {
  if (absl::Status status = CheckAddress(address); !status.ok()) return status;
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::string(address), kHttpThreads);
    exposer->RegisterCollectable(collectable);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address,
                     " (the port is in use or the host is not a local address): ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.size() != 1) {
    return absl::InternalError(
        absl::StrCat("metrics exporter on ", address, " listens on ", ports.size(), " ports"));
  }
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(std::move(exposer), ports[0]));
}

}  // namespace qmm
