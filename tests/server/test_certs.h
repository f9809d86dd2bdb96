// Certificates for the TLS tests, made when a test runs (nothing secret or expiring is
// checked in): a CA, and certificates it signs for 127.0.0.1 and localhost, valid over any
// window (an expired one included), or for a client name; EC P-256 keys, PEM text. And the
// channel a test client opens with them.
#ifndef QMM_TESTS_SERVER_TEST_CERTS_H_
#define QMM_TESTS_SERVER_TEST_CERTS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace qmm::testing {

struct Pem {
  std::string cert;
  std::string key;
};

// A self-signed CA certificate named `name`.
Pem MakeCa(const std::string& name);

// A certificate for `name`, IP 127.0.0.1 and DNS localhost, signed by `ca`, valid from
// now + not_before to now + not_after; usable by servers and clients alike.
Pem MakeCert(const Pem& ca, const std::string& name, absl::Duration not_before = absl::Hours(-1),
             absl::Duration not_after = absl::Hours(24));

// A client certificate whose one subject alternative name is DNS `dns_name`: the
// principal gRPC's authorization policies match (server/authz.h).
Pem MakeClientCert(const Pem& ca, const std::string& dns_name);

// A channel of its own (no connection shared with other channels) to 127.0.0.1:`port`:
// plaintext without `ca`, else TLS trusting `ca`, presenting `identity` if given and
// expecting `server_name` in the server's certificate (empty: the host dialled).
std::shared_ptr<grpc::Channel> TlsChannel(int port, const std::optional<std::string>& ca,
                                          const std::optional<Pem>& identity = std::nullopt,
                                          const std::string& server_name = "");

// Writes `text` to a new file in the test's temporary directory; returns its path.
std::string WriteTempFile(const std::string& name, const std::string& text);

// A certificate and its key written to new files, as the programs take them.
struct PemFiles {
  std::string cert;
  std::string key;
};
PemFiles WriteTempPem(const Pem& pem);

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_TEST_CERTS_H_
