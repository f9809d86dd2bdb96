// Operators and clients under mutual TLS (server/access.h): with admin names set, only a
// client certificate that carries one (as a SAN or as its common name) may upload, delete,
// and create or delete models; the others are refused with PERMISSION_DENIED and change
// nothing, and may still multiply, forward and read. Without admin names every client may
// do everything; admin names without mutual TLS do not start.
#include "server/access.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "qmm/v1/qmm.grpc.pb.h"
#include "server/cpu_backend.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/test_certs.h"

namespace qmm {
namespace {

using testing::MakeCa;
using testing::MakeCert;
using testing::MakeClientCert;
using testing::Pem;
using testing::WriteTempFile;

constexpr int64_t kN = 16;
constexpr int64_t kK = 128;

class AccessTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> admin_names) {
    server_ca_ = MakeCa("server-ca");
    client_ca_ = MakeCa("client-ca");
    const Pem server = MakeCert(server_ca_, "qmm-server");
    ServerOptions options;
    options.tls.cert_file = WriteTempFile("server.pem", server.cert);
    options.tls.key_file = WriteTempFile("server.key", server.key);
    options.tls.client_ca_file = WriteTempFile("client-ca.pem", client_ca_.cert);
    options.admin_names = std::move(admin_names);
    server_ = testing::StartServer(std::move(options), &port_);
    ASSERT_NE(server_, nullptr);
  }

  std::unique_ptr<v1::Qmm::Stub> Stub(const Pem& identity) {
    return v1::Qmm::NewStub(testing::TlsChannel(port_, server_ca_.cert, identity));
  }

  static grpc::StatusCode UploadW8(v1::Qmm::Stub& stub, const std::string& name) {
    const std::string payload = testing::ToBytes(DType::kF32, testing::RandomFloats(kN * kK, 7));
    return testing::Upload(stub,
                           testing::MakeHeader(name, v1::SCHEME_W8A16, kN, kK, 0,
                                               v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
                           payload)
        .error_code();
  }

  static grpc::StatusCode MatMul(v1::Qmm::Stub& stub, const std::string& weight) {
    grpc::ClientContext context;
    v1::MatMulResponse response;
    const v1::MatMulRequest request = testing::MakeMatMulRequest(
        weight, DType::kF32, 2, kK, testing::RandomFloats(2 * kK, 3), v1::DTYPE_FP32);
    return stub.MatMul(&context, request, &response).error_code();
  }

  static grpc::StatusCode DeleteWeight(v1::Qmm::Stub& stub, const std::string& name) {
    grpc::ClientContext context;
    v1::DeleteWeightRequest request;
    request.set_name(name);
    v1::DeleteWeightResponse response;
    return stub.DeleteWeight(&context, request, &response).error_code();
  }

  static grpc::Status CreateModel(v1::Qmm::Stub& stub, const std::string& name,
                                  const std::string& weight) {
    grpc::ClientContext context;
    v1::CreateModelRequest request;
    request.set_name(name);
    request.add_layers()->mutable_linear()->set_weight(weight);
    v1::ModelInfo info;
    return stub.CreateModel(&context, request, &info);
  }

  static grpc::StatusCode DeleteModel(v1::Qmm::Stub& stub, const std::string& name) {
    grpc::ClientContext context;
    v1::DeleteModelRequest request;
    request.set_name(name);
    v1::DeleteModelResponse response;
    return stub.DeleteModel(&context, request, &response).error_code();
  }

  static std::vector<std::string> WeightNames(v1::Qmm::Stub& stub) {
    grpc::ClientContext context;
    v1::ListWeightsResponse response;
    EXPECT_TRUE(stub.ListWeights(&context, v1::ListWeightsRequest(), &response).ok());
    std::vector<std::string> names;
    for (const v1::WeightInfo& w : response.weights()) names.push_back(w.name());
    return names;
  }

  Pem server_ca_;
  Pem client_ca_;
  std::unique_ptr<QmmServer> server_;
  int port_ = 0;
};

TEST_F(AccessTest, OnlyAdminCertificatesChangeWhatTheServerHolds) {
  Start({"admin.qmm.test", "ops-cn"});
  auto admin = Stub(MakeClientCert(client_ca_, "admin.qmm.test"));
  auto user = Stub(MakeClientCert(client_ca_, "user.qmm.test"));
  // Admin by common name: this certificate's SANs are 127.0.0.1 and localhost.
  auto ops = Stub(MakeCert(client_ca_, "ops-cn"));

  ASSERT_EQ(UploadW8(*admin, "w"), grpc::StatusCode::OK);
  ASSERT_EQ(UploadW8(*ops, "w2"), grpc::StatusCode::OK);
  ASSERT_TRUE(CreateModel(*admin, "m", "w").ok());

  // The client may compute and read...
  EXPECT_EQ(MatMul(*user, "w"), grpc::StatusCode::OK);
  EXPECT_EQ(WeightNames(*user), (std::vector<std::string>{"w", "w2"}));
  // ...but changes nothing.
  EXPECT_EQ(UploadW8(*user, "mine"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(DeleteWeight(*user, "w2"), grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status create = CreateModel(*user, "m2", "w");
  EXPECT_EQ(create.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(create.error_message(),
            "CreateModel is for operators: it needs a client certificate that carries one of "
            "the server's admin names");
  EXPECT_EQ(DeleteModel(*user, "m"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(WeightNames(*admin), (std::vector<std::string>{"w", "w2"}));
  EXPECT_EQ(MatMul(*user, "w2"), grpc::StatusCode::OK);

  // The operators can.
  EXPECT_EQ(DeleteModel(*ops, "m"), grpc::StatusCode::OK);
  EXPECT_EQ(DeleteWeight(*admin, "w2"), grpc::StatusCode::OK);
  EXPECT_EQ(DeleteWeight(*ops, "w"), grpc::StatusCode::OK);
  EXPECT_TRUE(WeightNames(*user).empty());
}

TEST_F(AccessTest, WithoutAdminNamesEveryClientMayChangeThings) {
  Start({});
  auto user = Stub(MakeClientCert(client_ca_, "user.qmm.test"));
  EXPECT_EQ(UploadW8(*user, "w"), grpc::StatusCode::OK);
  EXPECT_EQ(DeleteWeight(*user, "w"), grpc::StatusCode::OK);
}

TEST(AccessOptionsTest, AdminNamesNeedMutualTls) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.admin_names = {"admin.qmm.test"};
  BackendOptions backend;
  backend.kind = BackendOptions::Kind::kCpu;
  QmmServer server(CreateCpuBackend(backend), options);
  const absl::Status status = server.Start().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("admin_names needs tls_client_ca"), std::string::npos) << status;
}

}  // namespace
}  // namespace qmm
