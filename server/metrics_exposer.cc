#include "server/metrics_exposer.h"

#include <prometheus/exposer.h>

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/http_address.h"

namespace qmm {
namespace {

constexpr int kHttpThreads = 2;

}  // namespace

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsExposer::~MetricsExposer() = default;

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    absl::string_view address, std::weak_ptr<prometheus::Collectable> collectable) {
  if (absl::Status status = CheckHttpAddress(address, "metrics", "127.0.0.1:9464"); !status.ok()) {
    return status;
  }
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
