#include "server/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", path, "' cannot be read: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioDeleter>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM file.
absl::StatusOr<std::unique_ptr<X509, X509Deleter>> FirstCertificate(const std::string& option,
                                                                    const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(option, path);
  if (!pem.ok()) return pem.status();
  Bio bio = MemoryBio(*pem);
  std::unique_ptr<X509, X509Deleter> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", path, "' holds no PEM certificate"));
  }
  return cert;
}

// The checks the file watcher would only log, at every handshake, had they failed.
absl::Status CheckFiles(const TlsServerOptions& o) {
  absl::StatusOr<std::unique_ptr<X509, X509Deleter>> cert =
      FirstCertificate("tls_cert", o.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key_pem = ReadFile("tls_key", o.key_file);
  if (!key_pem.ok()) return key_pem.status();
  Bio bio = MemoryBio(*key_pem);
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key '", o.key_file, "' holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key '", o.key_file, "' is not the key of tls_cert '", o.cert_file, "'"));
  }
  if (!o.client_ca_file.empty()) {
    absl::StatusOr<std::unique_ptr<X509, X509Deleter>> ca =
        FirstCertificate("tls_client_ca", o.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerOptions& options) {
  if (options.cert_file.empty() && options.key_file.empty()) {
    if (!options.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca needs tls_cert and tls_key: clients are verified "
          "over TLS only");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key go together");
  }
  if (options.reload_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls reload_interval = ", absl::FormatDuration(options.reload_interval),
                     " must be at least 1s"));
  }
  if (absl::Status status = CheckFiles(options); !status.ok()) return status;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.client_ca_file,
      static_cast<unsigned int>(absl::ToInt64Seconds(options.reload_interval)));
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (!options.client_ca_file.empty()) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

}  // namespace qmm
