// MakeChannelCredentials: which options turn TLS on, and the errors that name the flag.
// The handshakes themselves are end to end (tests/e2e/tls_e2e_test.cc).
#include "client/credentials.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/credentials_test_" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(CredentialsTest, PlaintextUnlessAskedAndTlsWithSystemRootsWhenOnlyEnabled) {
  grpc::ChannelArguments args;
  EXPECT_TRUE(MakeChannelCredentials(TlsClientOptions(), args).ok());
  TlsClientOptions tls;
  tls.enabled = true;
  EXPECT_TRUE(MakeChannelCredentials(tls, args).ok());
  tls.server_name = "qmm.example";
  EXPECT_TRUE(MakeChannelCredentials(tls, args).ok());
}

TEST(CredentialsTest, UnreadableFilesNameTheFlag) {
  for (auto [field, flag] : {std::pair{&TlsClientOptions::ca_file, "tls_ca"},
                             std::pair{&TlsClientOptions::cert_file, "tls_cert"},
                             std::pair{&TlsClientOptions::key_file, "tls_key"}}) {
    TlsClientOptions tls;
    // Both halves of the pair, so that only the missing file is wrong.
    tls.cert_file = TempFile("cert.pem", "cert");
    tls.key_file = TempFile("key.pem", "key");
    tls.*field = "/nonexistent/file.pem";
    grpc::ChannelArguments args;
    const absl::Status status = MakeChannelCredentials(tls, args).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(status.message(), HasSubstr(std::string(flag) + ": "));
    EXPECT_THAT(status.message(), HasSubstr("/nonexistent/file.pem"));
  }
}

TEST(CredentialsTest, CertificateAndKeyGoTogether) {
  for (bool with_cert : {true, false}) {
    TlsClientOptions tls;
    (with_cert ? tls.cert_file : tls.key_file) = TempFile("half.pem", "x");
    grpc::ChannelArguments args;
    const absl::Status status = MakeChannelCredentials(tls, args).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "tls_cert and tls_key go together");
  }
}

}  // namespace
}  // namespace qmm
