// QmmServer as a whole: start on an ephemeral port, health, reflection, option checks and
// a graceful shutdown that lets in-flight calls finish.
#include "server/server.h"

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/cpu_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::MakeMatMulRequest;
using testing::RandomFloats;

std::unique_ptr<Backend> Cpu() {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  return CreateCpuBackend(options);
}

// One request and one response on `method`, serialized by hand (the health and
// reflection protos have no generated C++ in the Debian packages).
absl::StatusOr<std::string> RawCall(const std::shared_ptr<grpc::Channel>& channel,
                                    const std::string& method, const std::string& request) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  void* tag;
  bool ok;
  auto step = [&](int id) { return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(id); };
  call->StartCall(reinterpret_cast<void*>(1));
  if (!step(1) || !ok) return absl::UnavailableError("call did not start");
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  step(2);
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  step(4);
  const bool got_response = ok;
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok())
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (!got_response) return absl::DataLossError("no response");
  std::vector<grpc::Slice> slices;
  (void)in.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// grpc.health.v1 HealthCheckResponse.status: 1 SERVING, 2 NOT_SERVING. The request is
// HealthCheckRequest{service}: field 1, a string ("" for the whole server).
absl::StatusOr<std::string> Health(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::string& service = "") {
  const std::string request =
      service.empty()
          ? ""
          : absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service);
  return RawCall(channel, "/grpc.health.v1.Health/Check", request);
}

TEST(QmmServerTest, StartsOnAnEphemeralPortAndServes) {
  testing::TestServer s = testing::StartTestServer(ServerOptions{});
  ASSERT_NE(s.server, nullptr);
  EXPECT_GT(s.port, 0);
  grpc::ClientContext context;
  v1::ServerInfoResponse info;
  ASSERT_TRUE(s.stub->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), "cpu");
}

TEST(QmmServerTest, TwoServersGetDifferentPorts) {
  testing::TestServer a = testing::StartTestServer(ServerOptions{});
  testing::TestServer b = testing::StartTestServer(ServerOptions{});
  EXPECT_NE(a.port, b.port);
}

TEST(QmmServerTest, HealthIsServingUntilShutdownOrSetServingFalse) {
  testing::TestServer s = testing::StartTestServer(ServerOptions{});
  // The whole server and the service by its own name (what a Kubernetes probe names).
  for (const std::string service : {"", "qmm.v1.Qmm"}) {
    absl::StatusOr<std::string> health = Health(s.channel, service);
    ASSERT_TRUE(health.ok()) << service << ": " << health.status();
    EXPECT_EQ(*health, std::string("\x08\x01", 2)) << service;
  }
  // A name the server does not serve is NOT_FOUND, not SERVING.
  EXPECT_EQ(Health(s.channel, "qmm.v1.Nope").status().code(), absl::StatusCode::kNotFound);
  s.server->SetServing(false);
  for (const std::string service : {"", "qmm.v1.Qmm"}) {
    absl::StatusOr<std::string> health = Health(s.channel, service);
    ASSERT_TRUE(health.ok()) << service << ": " << health.status();
    EXPECT_EQ(*health, std::string("\x08\x02", 2)) << service;
  }
}

TEST(QmmServerTest, ReflectionListsTheService) {
  testing::TestServer s = testing::StartTestServer(ServerOptions{});
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  absl::StatusOr<std::string> reply =
      RawCall(s.channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
              std::string("\x3a\x00", 2));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_NE(reply->find("qmm.v1.Qmm"), std::string::npos);
  EXPECT_NE(reply->find("grpc.health.v1.Health"), std::string::npos);
}

TEST(QmmServerTest, DefaultMemoryLimitIsHalfTheRamForTheCpu) {
  std::unique_ptr<Backend> backend = Cpu();
  const int64_t expected = backend->memory_total_bytes() / 2;
  EXPECT_EQ(DefaultMemoryLimit(*backend), expected);
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  QmmServer server(std::move(backend), options);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.memory_limit_bytes(), expected);
}

TEST(QmmServerTest, BadOptionsAreInvalidArgument) {
  auto start = [](ServerOptions options) {
    options.listen_address = "127.0.0.1:0";
    QmmServer server(Cpu(), options);
    return server.Start().status();
  };
  ServerOptions o;
  o.max_message_bytes = 1 << 20;  // smaller than one upload chunk with framing
  EXPECT_EQ(start(o).code(), absl::StatusCode::kInvalidArgument);
  o = ServerOptions();
  o.max_message_bytes = int64_t{1} << 32;
  EXPECT_EQ(start(o).code(), absl::StatusCode::kInvalidArgument);
  o = ServerOptions();
  o.memory_limit_bytes = -1;
  EXPECT_EQ(start(o).code(), absl::StatusCode::kInvalidArgument);
  o = ServerOptions();
  o.max_rows = 0;
  EXPECT_EQ(start(o).code(), absl::StatusCode::kInvalidArgument);
  o = ServerOptions();
  o.shutdown_grace = absl::Seconds(-1);
  const absl::Status grace = start(o);
  EXPECT_EQ(grace.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(grace.message().find("shutdown_grace = -1s"), std::string::npos) << grace;
}

TEST(QmmServerTest, AddressInUseIsUnavailable) {
  testing::TestServer first = testing::StartTestServer(ServerOptions{});
  ServerOptions options;
  options.listen_address = absl::StrCat("127.0.0.1:", first.port);
  QmmServer second(Cpu(), options);
  const absl::Status status = second.Start().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find(options.listen_address), std::string::npos);
}

TEST(QmmServerTest, ServesOnAUnixSocketAndKeepsItFromASecondServer) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/server_test_", getpid(), ".sock");
  ServerOptions options;
  options.listen_address = "unix:" + path;
  auto first = std::make_unique<QmmServer>(Cpu(), options);
  ASSERT_TRUE(first->Start().ok());
  auto info = [&] {
    std::unique_ptr<v1::Qmm::Stub> stub = v1::Qmm::NewStub(
        grpc::CreateChannel(options.listen_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ServerInfoResponse response;
    return stub->ServerInfo(&context, v1::ServerInfoRequest(), &response).ok() &&
           response.backend() == "cpu";
  };
  EXPECT_TRUE(info());

  // gRPC would unlink the live socket and take the path over; the check refuses instead.
  QmmServer second(Cpu(), options);
  const absl::Status status = second.Start().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find(options.listen_address), std::string::npos) << status;
  EXPECT_TRUE(info());  // the first still gets the clients

  // Once the first is gone, another server may listen there.
  first->Shutdown();
  first.reset();
  QmmServer third(Cpu(), options);
  EXPECT_TRUE(third.Start().ok());
  EXPECT_TRUE(info());
  third.Shutdown();
}

TEST(QmmServerTest, ShutdownLetsAnOpenStreamFinishThenRefusesCalls) {
  testing::TestServer s = testing::StartTestServer(ServerOptions{});
  const std::string payload = testing::ToBytes(DType::kF32, RandomFloats(16 * 128, 1));
  ASSERT_TRUE(
      testing::Upload(*s.stub,
                      testing::MakeHeader("w", v1::SCHEME_W8A16, 16, 128, 0,
                                          v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
                      payload)
          .ok());
  const v1::MatMulRequest request =
      MakeMatMulRequest("w", DType::kF32, 2, 128, RandomFloats(256, 2), v1::DTYPE_FP32);

  grpc::ClientContext context;
  auto stream = s.stub->MatMulStream(&context);
  v1::MatMulResponse response;
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));

  std::thread shutdown([&] { s.server->Shutdown(); });
  // The health service flips to NOT_SERVING as the drain starts; the open stream keeps
  // working through it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.output().shape(0), 2);
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  shutdown.join();

  grpc::ClientContext late;
  late.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ServerInfoResponse info;
  EXPECT_EQ(s.stub->ServerInfo(&late, v1::ServerInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST(QmmServerTest, ShutdownCancelsCallsThatOutlastTheGrace) {
  ServerOptions options;
  options.shutdown_grace = absl::Milliseconds(300);
  testing::TestServer s = testing::StartTestServer(options);
  // An upload that sends its header and then stalls forever.
  const std::string payload(1000 * 2 * 64, '\0');
  grpc::ClientContext context;
  v1::UploadWeightResponse response;
  auto writer = s.stub->UploadWeight(&context, &response);
  v1::UploadWeightRequest header;
  *header.mutable_header() =
      testing::MakeHeader("stalled", v1::SCHEME_FP16, 1000, 64, 0, v1::SOURCE_ENCODING_PACKED,
                          v1::DTYPE_UNSPECIFIED, payload);
  ASSERT_TRUE(writer->Write(header));
  const auto start = std::chrono::steady_clock::now();
  s.server->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(writer->Finish().ok());
}

}  // namespace
}  // namespace qmm
