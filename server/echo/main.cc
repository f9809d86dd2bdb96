// qmm-echo-server: the transport by itself, for `qmmctl bench` (server/echo/echo_service.h).
//   qmm-echo-server [--listen=127.0.0.1:0] [--weight=w] [--features=8192]
// prints "qmm-echo-server listening on ADDRESS backend=echo", as qmm-server prints its
// line, and serves until SIGINT or SIGTERM. Plain-text gRPC only: it is a measuring tool
// for loopback, not a service to expose.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/echo/echo_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "address to serve on: HOST:PORT (port 0 picks one) or unix:PATH");
ABSL_FLAG(std::string, weight, "w", "the name of the identity weight");
ABSL_FLAG(int64_t, features, 8192, "its K = N: the values a row carries each way");
ABSL_FLAG(int64_t, max_rows, 65536, "largest M of one request");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20, "largest gRPC message either way");

namespace {

constexpr int64_t kMaxFeatures = int64_t{1} << 20;
constexpr int64_t kMaxRows = int64_t{1} << 31;

int Fail(const std::string& message) {
  std::cerr << "qmm-echo-server: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "answers qmm.v1 MatMul and MatMulStream with each request's own input, to measure "
      "the transport against which qmmctl bench's figures are read");
  absl::ParseCommandLine(argc, argv);
  qmm::echo::EchoOptions options;
  options.weight = absl::GetFlag(FLAGS_weight);
  options.features = absl::GetFlag(FLAGS_features);
  options.max_rows = absl::GetFlag(FLAGS_max_rows);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.weight.empty()) return Fail("--weight is empty");
  if (options.features < 1 || options.features > kMaxFeatures) {
    return Fail(
        absl::StrCat("--features = ", options.features, " must be in [1, ", kMaxFeatures, "]"));
  }
  if (options.max_rows < 1 || options.max_rows > kMaxRows) {
    return Fail(absl::StrCat("--max_rows = ", options.max_rows, " must be in [1, ", kMaxRows, "]"));
  }
  if (options.max_message_bytes < 1 || options.max_message_bytes > INT32_MAX) {
    return Fail(absl::StrCat("--max_message_bytes = ", options.max_message_bytes,
                             " must be in [1, ", INT32_MAX, "]"));
  }

  // SIGINT and SIGTERM are taken with sigwait below; blocked before gRPC starts its
  // threads, so that none of them receives one.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  const std::string listen = absl::GetFlag(FLAGS_listen);
  qmm::echo::EchoService service(options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a taken port is an error
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0)
    return Fail(absl::StrCat("cannot listen on \"", listen, "\""));

  const std::string address = absl::StartsWith(listen, "unix")
                                  ? listen
                                  : absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  std::cout << "qmm-echo-server listening on " << address << " backend=echo" << std::endl;
  int signal = 0;
  sigwait(&stop, &signal);
  server->Shutdown();
  return 0;
}
