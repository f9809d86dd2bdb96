// The HOST:PORT addresses of the server's HTTP endpoints (metrics, the Open Inference
// Protocol's REST API), both served by civetweb.
#ifndef QMM_SERVER_HTTP_ADDRESS_H_
#define QMM_SERVER_HTTP_ADDRESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace qmm {

// civetweb reads the address as a `listening_ports` option, where a comma adds a second
// listener and a trailing 's' or 'r' asks for TLS or a redirect: only a plain HOST:PORT
// (an IPv4 address or a host name; port 0 picks a free one) gets through, so that what
// listens is what the operator wrote. INVALID_ARGUMENT naming the endpoint (`what`, e.g.
// "metrics") and giving `example` otherwise.
absl::Status CheckHttpAddress(absl::string_view address, absl::string_view what,
                              absl::string_view example);

}  // namespace qmm

#endif  // QMM_SERVER_HTTP_ADDRESS_H_
