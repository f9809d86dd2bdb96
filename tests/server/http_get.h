// A minimal blocking HTTP/1.0 client over a loopback TCP socket, for tests that scrape
// /metrics, query Prometheus's HTTP API or call the server's HTTP inference endpoint. No
// keep-alive, no chunked bodies (HTTP/1.0 servers send neither).
#ifndef QMM_TESTS_SERVER_HTTP_GET_H_
#define QMM_TESTS_SERVER_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace qmm::testing {

struct HttpResponse {
  int status = 0;
  std::string headers;  // the header block, status line included
  std::string body;
};

// GETs `target` (path and query, already URL-encoded) from 127.0.0.1:port. UNAVAILABLE
// when the connection fails, DEADLINE_EXCEEDED past `timeout`, DATA_LOSS for a response
// that is not HTTP.
absl::StatusOr<HttpResponse> HttpGet(int port, absl::string_view target,
                                     absl::Duration timeout = absl::Seconds(10));

// Sends `method` (GET, POST, ...) for `target` with `body` (and its Content-Length when not
// empty) and the extra header lines `headers` ("Name: value\r\n" each); errors as HttpGet.
absl::StatusOr<HttpResponse> HttpRequest(int port, absl::string_view method,
                                         absl::string_view target, absl::string_view body,
                                         absl::string_view headers = "",
                                         absl::Duration timeout = absl::Seconds(10));

// Percent-encodes `text` for a query-string value.
std::string UrlEncode(absl::string_view text);

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_HTTP_GET_H_
