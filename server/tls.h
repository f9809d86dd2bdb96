// TLS for qmm-server's gRPC port: the server's certificate (TLS), and optionally the CA
// that clients' certificates must chain to (mutual TLS). The files are checked once at
// start, so that a wrong path or a key that does not match its certificate fails the
// start with the option's name, and then watched: a renewed certificate (cert-manager,
// a mounted Secret) is picked up without a restart.
#ifndef QMM_SERVER_TLS_H_
#define QMM_SERVER_TLS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace qmm {

struct TlsServerOptions {
  // PEM files: the certificate chain clients see and its private key. Both empty: the
  // port takes plaintext.
  std::string cert_file;
  std::string key_file;
  // PEM file of the CA certificates clients' certificates must chain to. Set, every
  // client must present a valid certificate (mutual TLS); empty, none is asked for.
  std::string client_ca_file;
  // How often the files are looked at for a renewed certificate or CA.
  absl::Duration reload_interval = absl::Minutes(1);
};

// Plaintext credentials when no file is set, else TLS ones over the files.
// INVALID_ARGUMENT, naming the option as qmm-server's flag (tls_cert, tls_key,
// tls_client_ca) and the file, when only one of cert_file and
// key_file is set, client_ca_file is set without them, a file cannot be read or holds no
// PEM certificate (or key), or the key is not the certificate's.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerOptions& options);

}  // namespace qmm

#endif  // QMM_SERVER_TLS_H_
