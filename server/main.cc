// qmm-server: parses flags into option structs and runs QmmServer until SIGINT/SIGTERM.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend.h"
#include "server/lifecycle.h"
#include "server/server.h"
#include "server/unix_socket.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port to listen on (port 0 picks one), or unix:PATH, a Unix domain socket for "
          "clients on the same host");
ABSL_FLAG(std::string, backend, "auto", "auto (CUDA when a GPU is present, else CPU), cpu or cuda");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(int, workers, 2, "MatMul calls that run at once (CUDA: one stream each)");
ABSL_FLAG(int, cpu_threads, 0, "CPU backend: kernel threads per call; 0 = all cores");
ABSL_FLAG(int64_t, memory_limit_bytes, 0,
          "weight memory budget; 0 = half the RAM (CPU) or 90% of free device memory (CUDA)");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20, "largest gRPC message either way");
ABSL_FLAG(int64_t, max_rows, 65536, "largest M of one MatMul request");
ABSL_FLAG(int64_t, max_batch_rows, 64,
          "most activation rows one launch carries (requests of one weight are batched); "
          "1 turns batching off");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "how long an idle weight's first request waits for more before launching (us)");
ABSL_FLAG(int64_t, max_queue_rows, 65536,
          "most rows waiting per weight before MatMul gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_queued_requests, 4096,
          "most MatMul requests waiting, all weights together, before RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, worker_spin_us, -1,
          "how long an idle batch worker polls for the next launch before sleeping (us); "
          "-1 = 50 on hosts with 8 or more hardware threads, else 0");
ABSL_FLAG(int, completion_threads, -1,
          "threads that hand the results of multi-request launches to gRPC; 0 = none (the "
          "batch worker does it); -1 = half the hardware threads, at most 8 (0 below 4)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for TLS on --listen (with --tls_key); reloaded when it changes");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates that clients' certificates must chain to: mutual TLS, every "
          "client must present one");
ABSL_FLAG(std::vector<std::string>, admin_names, {},
          "with --tls_client_ca: the client certificate names (SAN or CN), comma-separated, "
          "that may upload and delete weights and models; others may only read and compute");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "host:port of the Prometheus endpoint (/metrics); port 0 picks one; empty turns it off");
ABSL_FLAG(std::string, http_listen, "",
          "host:port of the Open Inference Protocol's HTTP/REST endpoint (KServe v2: /v2/...); "
          "plain HTTP, refused with --tls_cert; port 0 picks one; empty (the default) turns it "
          "off");
ABSL_FLAG(std::string, local_listen, "",
          "PATH of a Unix socket where clients on this host open shared-memory sessions for "
          "MatMul (the local transport: no gRPC round trip); empty (the default) turns it off; "
          "refused with --tls_cert; access is the socket file's permissions");
ABSL_FLAG(int64_t, local_spin_us, 100,
          "how long a local transport poller keeps polling after a request before it sleeps (us)");
ABSL_FLAG(int, local_threads, -1,
          "local transport pollers (sessions are spread over them); -1 = a quarter of the "
          "hardware threads, 1 to 4");
ABSL_FLAG(int64_t, local_pinned_bytes, int64_t{1} << 30,
          "most bytes of local sessions' shared memory a GPU backend may page-lock so that the "
          "device reads rows and writes results there itself (sessions beyond it are served "
          "with host copies; 0: none)");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(20),
          "on SIGTERM/SIGINT, how long in-flight calls may run before they are cancelled; keep "
          "it below the orchestrator's kill timeout (Kubernetes: terminationGracePeriodSeconds)");
ABSL_FLAG(bool, metrics_per_weight, false,
          "export per-weight metrics labelled with weight names (one series set per weight)");

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "qmm-server: " << status << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves quantized matmuls over gRPC (qmm.v1.Qmm and the Open Inference Protocol).");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with deadlock detection on, which records every Mutex
  // acquisition in a global graph: a measurable share of each request's host time.
  // The tests keep it on; the server does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread exists, so that every thread inherits the blocked mask.
  if (absl::Status status = qmm::BlockTerminationSignals(); !status.ok()) return Fail(status);

  qmm::BackendOptions backend_options;
  const std::string backend_flag = absl::GetFlag(FLAGS_backend);
  if (backend_flag == "auto") {
    backend_options.kind = qmm::BackendOptions::Kind::kAuto;
  } else if (backend_flag == "cpu") {
    backend_options.kind = qmm::BackendOptions::Kind::kCpu;
  } else if (backend_flag == "cuda") {
    backend_options.kind = qmm::BackendOptions::Kind::kCuda;
  } else {
    return Fail(absl::InvalidArgumentError("--backend must be auto, cpu or cuda, not \"" +
                                           backend_flag + "\""));
  }
  backend_options.device = absl::GetFlag(FLAGS_device);
  backend_options.num_workers = absl::GetFlag(FLAGS_workers);
  backend_options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  absl::StatusOr<std::unique_ptr<qmm::Backend>> backend = qmm::CreateBackend(backend_options);
  if (!backend.ok()) return Fail(backend.status());

  qmm::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.admin_names = absl::GetFlag(FLAGS_admin_names);
  options.memory_limit_bytes = absl::GetFlag(FLAGS_memory_limit_bytes);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_rows = absl::GetFlag(FLAGS_max_rows);
  options.max_batch_rows = absl::GetFlag(FLAGS_max_batch_rows);
  options.max_queue_delay = absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  options.max_queue_rows = absl::GetFlag(FLAGS_max_queue_rows);
  options.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  // Spinning pays off only where an idle core is there to spin on.
  const int hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  const int64_t spin_us = absl::GetFlag(FLAGS_worker_spin_us);
  options.worker_spin = absl::Microseconds(spin_us >= 0 ? spin_us : hardware_threads >= 8 ? 50 : 0);
  const int completion_threads = absl::GetFlag(FLAGS_completion_threads);
  options.completion_threads = completion_threads >= 0 ? completion_threads
                               : hardware_threads >= 4 ? std::clamp(hardware_threads / 2, 1, 8)
                                                       : 0;  // no core to spread them over
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.metrics_per_weight = absl::GetFlag(FLAGS_metrics_per_weight);
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.local_listen = absl::GetFlag(FLAGS_local_listen);
  options.local_spin = absl::Microseconds(absl::GetFlag(FLAGS_local_spin_us));
  options.local_pinned_bytes = absl::GetFlag(FLAGS_local_pinned_bytes);
  // Each poller keeps a core busy while requests come: 256 callers on a GPU machine's 16
  // cores were served 4-7% faster by 4 pollers than by 2, on 2 cores 1 served the most.
  const int local_threads = absl::GetFlag(FLAGS_local_threads);
  options.local_threads =
      local_threads >= 0 ? local_threads : std::clamp(hardware_threads / 4, 1, 4);
  qmm::QmmServer server(*std::move(backend), options);
  absl::StatusOr<int> port = server.Start();
  if (!port.ok()) return Fail(port.status());

  // The one line scripts wait for; with --listen=HOST:0 it carries the real port. A
  // Unix socket's address is what clients dial as it was given.
  const std::string address =
      qmm::UnixSocketPath(options.listen_address) ||
              absl::StartsWith(options.listen_address, "unix-abstract:")
          ? options.listen_address
          : absl::StrCat(options.listen_address.substr(0, options.listen_address.rfind(':')), ":",
                         *port);
  std::cout << "qmm-server listening on " << address << " backend=" << server.backend().name()
            << " device=\"" << absl::StrReplaceAll(server.backend().device_name(), {{"\"", "'"}})
            << "\""
            << " tls="
            << (options.tls.cert_file.empty()        ? "off"
                : options.tls.client_ca_file.empty() ? "on"
                                                     : "mutual")
            << std::endl;
  // After the line above, which scripts read first.
  if (server.metrics_port() != 0) {
    const std::string metrics_host =
        options.metrics_listen.substr(0, options.metrics_listen.rfind(':'));
    std::cout << "qmm-server metrics on http://" << metrics_host << ":" << server.metrics_port()
              << "/metrics" << std::endl;
  }
  if (!options.local_listen.empty()) {
    std::cout << "qmm-server local sessions on unix:" << options.local_listen << std::endl;
  }
  if (server.http_port() != 0) {
    const std::string http_host = options.http_listen.substr(0, options.http_listen.rfind(':'));
    std::cout << "qmm-server HTTP on http://" << http_host << ":" << server.http_port() << "/v2"
              << std::endl;
  }
  return qmm::ServeUntilSignal(server);
}
