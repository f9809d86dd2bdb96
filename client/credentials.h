// The credentials a qmm client's channel uses: plaintext, TLS (the server's certificate
// checked against a CA), or mutual TLS (a client certificate as well), read from PEM files
// when the channel is made.
#ifndef QMM_CLIENT_CREDENTIALS_H_
#define QMM_CLIENT_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace qmm {

struct TlsClientOptions {
  // TLS on; implied by any of the fields below.
  bool enabled = false;
  // PEM CA certificates the server's certificate must chain to; empty: the system's.
  std::string ca_file;
  // PEM certificate chain and private key presented to a server that asks (mutual TLS).
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry, when it is not the host the client
  // dials (a certificate for the Service's DNS name, dialled by IP, say).
  std::string server_name;
};

// Plaintext credentials, or TLS ones over the files; sets the server-name override in
// `args`. INVALID_ARGUMENT, naming qmmctl's flag (tls_ca, tls_cert, tls_key) and the file,
// when a file cannot be read or only one of cert_file and key_file is set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientOptions& options, grpc::ChannelArguments& args);

}  // namespace qmm

#endif  // QMM_CLIENT_CREDENTIALS_H_
