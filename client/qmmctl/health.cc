// qmmctl health: the server's standard health check, for scripts and container probes
// (Docker's HEALTHCHECK, compose's depends_on, a Kubernetes exec probe).
#include <cstdio>
#include <string>

#include "client/qmmctl/commands.h"

namespace qmm::ctl {

absl::StatusOr<bool> RunHealth(Client& client, const std::string& service) {
  absl::StatusOr<bool> serving = client.Serving(service);
  if (!serving.ok()) return serving.status();
  std::printf("%s%s%s\n", service.empty() ? "" : service.c_str(), service.empty() ? "" : ": ",
              *serving ? "SERVING" : "NOT_SERVING");
  return *serving;
}

}  // namespace qmm::ctl
