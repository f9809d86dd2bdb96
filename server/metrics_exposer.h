// The HTTP endpoint Prometheus scrapes: prometheus-cpp's pull exposer (civetweb) serving
// one Collectable at /metrics. prometheus-cpp reports failures by throwing; this wrapper
// is where they become absl::Status, so nothing above it sees an exception.
//
// Threads: the exposer runs its own HTTP threads, which call the collectable's Collect()
// on every scrape. Create and destroy it from one controlling thread.
#ifndef QMM_SERVER_METRICS_EXPOSER_H_
#define QMM_SERVER_METRICS_EXPOSER_H_

#include <prometheus/collectable.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace prometheus {
class Exposer;
}

namespace qmm {

class MetricsExposer {
 public:
  // Serves `collectable` at http://ADDRESS/metrics, where ADDRESS is HOST:PORT (an IPv4
  // address or a host name; port 0 picks a free one). The exposer holds `collectable`
  // weakly: once it is destroyed, scrapes return only the exposer's own metrics.
  // INVALID_ARGUMENT for a malformed address; UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      absl::string_view address, std::weak_ptr<prometheus::Collectable> collectable);

  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // The bound port (the real one when 0 was asked for).
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace qmm

#endif  // QMM_SERVER_METRICS_EXPOSER_H_
