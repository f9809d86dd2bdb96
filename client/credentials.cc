#include "client/credentials.h"

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/file_io.h"

namespace qmm {
namespace {

// The file's text, or "" for no file.
absl::StatusOr<std::string> ReadPem(const char* option, const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadFile(path);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", bytes.status().message()));
  }
  return std::string(bytes->begin(), bytes->end());
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientOptions& options, grpc::ChannelArguments& args) {
  const bool tls = options.enabled || !options.ca_file.empty() || !options.cert_file.empty() ||
                   !options.key_file.empty() || !options.server_name.empty();
  if (!tls) return grpc::InsecureChannelCredentials();
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key go together");
  }
  grpc::SslCredentialsOptions ssl;
  for (auto [option, path, pem] :
       {std::tuple{"tls_ca", &options.ca_file, &ssl.pem_root_certs},
        std::tuple{"tls_cert", &options.cert_file, &ssl.pem_cert_chain},
        std::tuple{"tls_key", &options.key_file, &ssl.pem_private_key}}) {
    absl::StatusOr<std::string> text = ReadPem(option, *path);
    if (!text.ok()) return text.status();
    *pem = *std::move(text);
  }
  if (!options.server_name.empty()) {
    args.SetSslTargetNameOverride(options.server_name);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace qmm
