// qmmctl bench: a load generator for one weight or one model. `concurrency` callers, each
// on its own thread, send MatMul (or Forward) requests back to back (unary calls, or over
// one MatMulStream or ForwardStream each, with `inflight` requests sent ahead of their
// answers; with `open_inference`, the Open Inference Protocol's ModelInfer or
// ModelStreamInfer) until `requests` have been sent in all or `duration` has passed, and
// the run is
// summed up: requests/s, rows/s, latency percentiles, errors by status code, and the
// server's batching over the run (bench_report.h).
//
// Activations: `inputs` distinct random [rows, K] sets (bench_inputs.h) drawn before the
// run and taken round robin, so every request of a batch carries other rows and nothing is
// generated while the clock runs. With verify seeds, each set's float64 reference is
// computed once, before the run, from the random weights of those seeds quantized here
// (verify.h, forward_verify.h), and every result is compared with it: a verified run
// costs the server nothing extra.
//
// Callers share `channels` connections (or local sessions) round robin, as the clients of a
// real server would come over many. Each unary call has ClientOptions::call_timeout; a stream is
// replaced before less than half of that is left of its deadline, so every request gets at least
// half of it and the run stays bounded in time.
#ifndef QMM_CLIENT_QMMCTL_BENCH_H_
#define QMM_CLIENT_QMMCTL_BENCH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "kernels/dtype.h"

namespace qmm::ctl {

struct BenchOptions {
  // Exactly one target: a weight (MatMul) or a model (Forward; a token model gets `rows`
  // random token ids a request).
  std::string weight;
  std::string model;
  int concurrency = 1;
  // Exactly one bound: requests in all (warm-up not counted), or a measured time.
  std::optional<int64_t> requests;
  std::optional<absl::Duration> duration;
  int64_t rows = 1;  // M of every request
  bool stream = false;
  // Requests each stream (or local caller) keeps ahead of their answers (1 to 16; above 1
  // only with `stream` or `local`), which the server batches together.
  int inflight = 1;
  // Through inference.GRPCInferenceService (answers in the activations' dtype, without the
  // server's compute time) instead of qmm.v1.Qmm.
  bool open_inference = false;
  // Through the local transport at this Unix socket path (qmm-server --local_listen)
  // instead of gRPC: each caller takes `inflight` slots of one of `channels` sessions.
  // Unary MatMul only; metadata and uploads still go over gRPC.
  std::string local;
  // How long a local caller polls for its answer before sleeping.
  absl::Duration local_spin = absl::ZeroDuration();
  DType dtype = DType::kF32;          // activations on the wire
  std::optional<DType> output_dtype;  // nullopt: the activations'
  int inputs = 64;
  uint64_t seed = 1;  // of the activation sets
  int warmup = 0;     // requests per caller before the clock starts, not counted
  int channels = 0;   // 0: DefaultChannels(concurrency, inflight)
  // The weight was uploaded with --random --seed=S: check every result.
  std::optional<uint64_t> verify_seed;
  // The same for each weight of the model, by name.
  std::map<std::string, uint64_t> verify_seeds;
  double tolerance = 0;   // 0: DefaultTolerance()
  std::string json_path;  // also write the report here as JSON
};

// The connections `concurrency` callers with `inflight` requests each share when
// BenchOptions::channels is 0: one per 16 requests in flight, at most 16 and at most one a
// caller. HTTP/2 writes the frames of all of a connection's streams at once, so a shared
// connection costs fewer system calls and wake-ups a message, up to what the one thread at
// a time that handles a connection's frames can carry. On an H100 machine's 16 cores
// (session 81, docs/PERFORMANCE.md), 256 streams to qmm-server carried 51-55 k requests/s
// over one connection, 113-119 k over 4, 124-132 k over 16, 109-112 k over 64 and 73 k over
// 256; on the 2-core machine, 16 streams of 4 in flight and 4 of 16 each carried 25-57%
// more over 4 connections than over one, and 64 of 4 19-20% more over 16 than over 4.
int DefaultChannels(int concurrency, int inflight);

// INVALID_ARGUMENT naming the option when one is out of range (checked before connecting).
absl::Status CheckBenchOptions(const BenchOptions& options);

// `client` answers the metadata calls; the load goes over `channels` connections of its
// own to connection.server. Prints the report on stdout. OK(false) when a request failed
// or a result mismatched (the report says which).
absl::StatusOr<bool> RunBench(Client& client, const ClientOptions& connection,
                              const BenchOptions& options);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_BENCH_H_
