// TLS end to end: the real qmm-server with --tls_cert, --tls_key and --tls_client_ca,
// and the real qmmctl with --tls_ca, --tls_cert and --tls_key: verified MatMuls and a
// bench run (its own connections) over mutual TLS, clients without the right certificate
// refused, and bad TLS files stopping either program with the flag's name. Certificates
// are made per test (tests/server/test_certs.h).
#include <signal.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/server_fixture.h"
#include "tests/e2e/subprocess.h"
#include "tests/server/test_certs.h"

namespace qmm::e2e {
namespace {

using qmm::testing::MakeCa;
using qmm::testing::MakeCert;
using qmm::testing::Pem;
using qmm::testing::PemFiles;
using qmm::testing::WriteTempFile;
using qmm::testing::WriteTempPem;
using ::testing::HasSubstr;

constexpr char kServer[] = QMM_SERVER_PATH;

class TlsEndToEndTest : public ServerFixture {
 protected:
  void SetUp() override {
    const Pem server_ca = MakeCa("server-ca");
    client_ca_ = MakeCa("client-ca");
    server_ca_file_ = WriteTempFile("server-ca.pem", server_ca.cert);
    server_ = WriteTempPem(MakeCert(server_ca, "qmm-server"));
    client_ = WriteTempPem(MakeCert(client_ca_, "client"));
    ServerFixture::SetUp();
  }

  std::vector<std::string> ServerFlags() const override {
    return {"--listen=127.0.0.1:0",
            "--metrics_listen=",
            "--backend=cpu",
            "--tls_cert=" + server_.cert,
            "--tls_key=" + server_.key,
            "--tls_client_ca=" + WriteTempFile("client-ca.pem", client_ca_.cert)};
  }

  // The flags of a client that trusts the server's CA and presents `identity`.
  std::vector<std::string> Tls(const PemFiles& identity) const {
    return {"--tls_ca=" + server_ca_file_, "--tls_cert=" + identity.cert,
            "--tls_key=" + identity.key};
  }

  std::vector<std::string> With(std::vector<std::string> flags,
                                const std::vector<std::string>& command) const {
    flags.insert(flags.end(), command.begin(), command.end());
    return flags;
  }

  Pem client_ca_;
  std::string server_ca_file_;
  PemFiles server_;
  PemFiles client_;
};

TEST_F(TlsEndToEndTest, MutualTlsCarriesVerifiedMatMulsAndABench) {
  EXPECT_EQ(Ok(With(Tls(client_), {"health"})), "SERVING\n");
  Ok(With(Tls(client_),
          {"upload", "--name=w", "--scheme=w4a16", "--random", "--n=96", "--k=256", "--seed=3"}));
  EXPECT_THAT(Ok(With(Tls(client_), {"matmul", "--weight=w", "--random", "--m=5", "--dtype=fp16",
                                     "--verify_seed=3"})),
              HasSubstr("PASS"));
  const std::string bench =
      Ok(With(Tls(client_), {"bench", "--weight=w", "--concurrency=4", "--channels=2",
                             "--requests=200", "--verify", "--verify_seed=3", "--dtype=fp16"}));
  EXPECT_THAT(bench, HasSubstr("requests: 200 ok, 0 errors"));
}

TEST_F(TlsEndToEndTest, ClientsWithoutAValidCertificateAreRefused) {
  const PemFiles rogue = WriteTempPem(MakeCert(MakeCa("rogue-ca"), "client"));
  const PemFiles expired =
      WriteTempPem(MakeCert(client_ca_, "client", absl::Hours(-48), absl::Hours(-24)));
  const std::vector<std::vector<std::string>> refused = {
      {"--connect_timeout=2s", "health"},                                 // plaintext
      {"--connect_timeout=2s", "--tls_ca=" + server_ca_file_, "health"},  // no certificate
      With(Tls(rogue), {"--connect_timeout=2s", "health"}),
      With(Tls(expired), {"--connect_timeout=2s", "health"}),
  };
  for (const std::vector<std::string>& flags : refused) {
    const RunResult r = Qmmctl(flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("qmmctl health: UNAVAILABLE: cannot connect"));
  }
  // Refusing them did not hurt the server.
  EXPECT_EQ(Ok(With(Tls(client_), {"health"})), "SERVING\n");
}

TEST_F(TlsEndToEndTest, UnreadableClientFilesNameTheFlag) {
  RunResult r = Qmmctl({"--tls_ca=/nonexistent/ca.pem", "health"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: tls_ca: "));
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/ca.pem"));
  r = Qmmctl({"--tls_ca=" + server_ca_file_, "--tls_cert=" + client_.cert, "health"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: tls_cert and tls_key go together"));
}

TEST(TlsEndToEndNoServerTest, BadServerFilesStopTheStartWithTheFlag) {
  const PemFiles one = WriteTempPem(MakeCert(MakeCa("ca"), "one"));
  const PemFiles two = WriteTempPem(MakeCert(MakeCa("ca"), "two"));
  absl::StatusOr<RunResult> r =
      RunProcess(kServer,
                 {"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                  "--tls_cert=" + one.cert, "--tls_key=" + two.key},
                 ::testing::TempDir());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->output, HasSubstr("INVALID_ARGUMENT: tls_key '" + two.key +
                                   "' is not the key of tls_cert '" + one.cert + "'"));
}

}  // namespace
}  // namespace qmm::e2e
