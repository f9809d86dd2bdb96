// TLS on qmm-server's port (server/tls.h): option and file errors name the flag, a TLS
// server answers only clients that trust its CA, mutual TLS admits only valid certificates
// from the client CA (not a missing, foreign or expired one), and a renewed certificate is
// picked up while the server runs. Certificates are made per test (test_certs.h); the
// clients are plain gRPC channels with SSL credentials.
#include "server/tls.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/cpu_backend.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/test_certs.h"

namespace qmm {
namespace {

using testing::MakeCa;
using testing::MakeCert;
using testing::Pem;
using testing::WriteTempFile;
using testing::WriteTempPem;

TlsServerOptions Tls(std::string cert, std::string key, std::string client_ca = "",
                     absl::Duration reload_interval = absl::Minutes(1)) {
  TlsServerOptions options;
  options.cert_file = std::move(cert);
  options.key_file = std::move(key);
  options.client_ca_file = std::move(client_ca);
  options.reload_interval = reload_interval;
  return options;
}

absl::Status CredentialsStatus(const TlsServerOptions& options) {
  return MakeServerCredentials(options).status();
}

void ExpectInvalid(const TlsServerOptions& options, const std::string& message) {
  const absl::Status status = CredentialsStatus(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(message), std::string::npos) << status;
}

TEST(TlsOptionsTest, NoFilesIsPlaintext) {
  EXPECT_TRUE(CredentialsStatus(TlsServerOptions()).ok());
}

TEST(TlsOptionsTest, ErrorsNameTheFlagAndTheFile) {
  const Pem ca = MakeCa("ca");
  const testing::PemFiles server = WriteTempPem(MakeCert(ca, "server"));
  const testing::PemFiles other = WriteTempPem(MakeCert(ca, "other"));
  const std::string garbage = WriteTempFile("garbage.pem", "not a certificate\n");
  const std::string ca_file = WriteTempFile("ca.pem", ca.cert);

  ExpectInvalid(Tls(server.cert, ""), "tls_cert and tls_key go together");
  ExpectInvalid(Tls("", server.key), "tls_cert and tls_key go together");
  ExpectInvalid(Tls("", "", ca_file), "tls_client_ca needs tls_cert and tls_key");
  ExpectInvalid(Tls("/nonexistent/cert.pem", server.key),
                "tls_cert '/nonexistent/cert.pem' cannot be read: No such file or directory");
  ExpectInvalid(Tls(server.cert, "/nonexistent/key.pem"),
                "tls_key '/nonexistent/key.pem' cannot be read");
  ExpectInvalid(Tls(garbage, server.key),
                absl::StrCat("tls_cert '", garbage, "' holds no PEM certificate"));
  ExpectInvalid(Tls(server.cert, garbage),
                absl::StrCat("tls_key '", garbage, "' holds no unencrypted PEM private key"));
  ExpectInvalid(
      Tls(server.cert, other.key),
      absl::StrCat("tls_key '", other.key, "' is not the key of tls_cert '", server.cert, "'"));
  ExpectInvalid(Tls(server.cert, server.key, garbage),
                absl::StrCat("tls_client_ca '", garbage, "' holds no PEM certificate"));
  ExpectInvalid(Tls(server.cert, server.key, "", absl::Milliseconds(10)),
                "reload_interval = 10ms must be at least 1s");
  // The same files, right, are accepted.
  EXPECT_TRUE(CredentialsStatus(Tls(server.cert, server.key, ca_file)).ok());
}

TEST(TlsOptionsTest, ServerWithBadFilesDoesNotStart) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls = Tls("/nonexistent/cert.pem", "/nonexistent/key.pem");
  BackendOptions backend;
  backend.kind = BackendOptions::Kind::kCpu;
  QmmServer server(CreateCpuBackend(backend), options);
  const absl::Status status = server.Start().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("tls_cert"), std::string::npos) << status;
}

class TlsServerTest : public ::testing::Test {
 protected:
  void Start(TlsServerOptions tls) {
    ServerOptions options;
    options.tls = std::move(tls);
    server_ = testing::StartServer(std::move(options), &port_);
    ASSERT_NE(server_, nullptr);
  }

  // A ServerInfo call over a fresh connection; its gRPC code. The client trusts `ca`
  // (none: plaintext), presents `identity` and expects `server_name` in the server's
  // certificate (empty: the host it dials).
  grpc::StatusCode Call(std::optional<std::string> ca, std::optional<Pem> identity = std::nullopt,
                        const std::string& server_name = "") {
    auto stub = v1::Qmm::NewStub(testing::TlsChannel(port_, ca, identity, server_name));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ServerInfoResponse info;
    const grpc::Status status = stub->ServerInfo(&context, v1::ServerInfoRequest(), &info);
    if (status.ok()) {
      EXPECT_EQ(info.backend(), "cpu");
    }
    return status.error_code();
  }

  std::unique_ptr<QmmServer> server_;
  int port_ = 0;
};

TEST_F(TlsServerTest, AnswersOnlyClientsThatTrustItsCa) {
  const Pem ca = MakeCa("server-ca");
  const testing::PemFiles server = WriteTempPem(MakeCert(ca, "qmm-server"));
  Start(Tls(server.cert, server.key));
  EXPECT_EQ(Call(ca.cert), grpc::StatusCode::OK);
  // The certificate names localhost too.
  EXPECT_EQ(Call(ca.cert, std::nullopt, "localhost"), grpc::StatusCode::OK);
  EXPECT_EQ(Call(ca.cert, std::nullopt, "qmm.example"), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(MakeCa("another-ca").cert), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(std::nullopt), grpc::StatusCode::UNAVAILABLE);  // plaintext
}

TEST_F(TlsServerTest, MutualTlsAdmitsOnlyValidCertificatesOfItsClientCa) {
  const Pem server_ca = MakeCa("server-ca");
  const Pem client_ca = MakeCa("client-ca");
  const testing::PemFiles server = WriteTempPem(MakeCert(server_ca, "qmm-server"));
  Start(Tls(server.cert, server.key, WriteTempFile("client-ca.pem", client_ca.cert)));
  EXPECT_EQ(Call(server_ca.cert, MakeCert(client_ca, "client")), grpc::StatusCode::OK);
  EXPECT_EQ(Call(server_ca.cert), grpc::StatusCode::UNAVAILABLE);  // no certificate
  EXPECT_EQ(Call(server_ca.cert, MakeCert(MakeCa("rogue-ca"), "client")),
            grpc::StatusCode::UNAVAILABLE);
  const Pem expired = MakeCert(client_ca, "client", absl::Hours(-48), absl::Hours(-24));
  EXPECT_EQ(Call(server_ca.cert, expired), grpc::StatusCode::UNAVAILABLE);
  const Pem not_yet = MakeCert(client_ca, "client", absl::Hours(24), absl::Hours(48));
  EXPECT_EQ(Call(server_ca.cert, not_yet), grpc::StatusCode::UNAVAILABLE);
  // The server still serves the good client after the refused ones.
  EXPECT_EQ(Call(server_ca.cert, MakeCert(client_ca, "client")), grpc::StatusCode::OK);
}

TEST_F(TlsServerTest, RenewedCertificateIsServedWithoutARestart) {
  const Pem old_ca = MakeCa("old-ca");
  const Pem new_ca = MakeCa("new-ca");
  const testing::PemFiles files = WriteTempPem(MakeCert(old_ca, "qmm-server"));
  Start(Tls(files.cert, files.key, "", absl::Seconds(1)));
  ASSERT_EQ(Call(old_ca.cert), grpc::StatusCode::OK);
  ASSERT_EQ(Call(new_ca.cert), grpc::StatusCode::UNAVAILABLE);

  // As a Secret's update lands: the new pair replaces the files' contents.
  const Pem renewed = MakeCert(new_ca, "qmm-server");
  std::ofstream(files.key, std::ios::trunc) << renewed.key;
  std::ofstream(files.cert, std::ios::trunc) << renewed.cert;
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  for (int i = 0; i < 50 && code != grpc::StatusCode::OK; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    code = Call(new_ca.cert);
  }
  EXPECT_EQ(code, grpc::StatusCode::OK) << "the renewed certificate was not picked up in 10 s";
  EXPECT_EQ(Call(old_ca.cert), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace qmm
