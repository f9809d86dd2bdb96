// Helpers for the in-process server tests: a QmmServer with the CPU backend on an
// ephemeral loopback port with a raw generated stub, random tensors, and uploads.
#ifndef QMM_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define QMM_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tests/server/exposition.h"
#include "tests/server/gated_backend.h"

namespace qmm::testing {

struct TestServer {
  std::unique_ptr<QmmServer> server;
  int port = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Qmm::Stub> stub;
};

// Starts a server on 127.0.0.1:0 with a CPU backend of `workers` workers; the test fails
// (and the result has no server) if it cannot start. The channel allows messages up to
// 256 MiB so that the server's own limits are what tests hit.
TestServer StartTestServer(ServerOptions options, int workers = 2);

// The same server without a channel, for tests that open their own (TLS): nullptr, and a
// failed test, if it cannot start; `*port` gets its port.
std::unique_ptr<QmmServer> StartServer(ServerOptions options, int* port, int workers = 2);

// The same over a GatedBackend around the CPU backend, so that a test can hold launches;
// `*gate` gets it (the server owns it).
std::unique_ptr<QmmServer> StartGatedServer(ServerOptions options, int* port, GatedBackend** gate,
                                            int workers = 2);

// `count` values uniform in [-1, 1) with a few larger ones, deterministic in `seed`.
std::vector<float> RandomFloats(int64_t count, uint32_t seed);
// Little-endian bytes of `values` converted to `dtype`, and back.
std::string ToBytes(DType dtype, const std::vector<float>& values);
std::vector<float> FromBytes(DType dtype, absl::string_view bytes);
std::string Sha256Of(absl::string_view bytes);

// A header for `payload` (total_bytes and sha256 taken from it).
v1::WeightHeader MakeHeader(absl::string_view name, v1::Scheme scheme, int64_t n, int64_t k,
                            int32_t group_size, v1::SourceEncoding encoding, v1::DType source_dtype,
                            absl::string_view payload);

// Sends `header` then `payload` in chunks of at most `chunk_bytes`.
grpc::Status Upload(v1::Qmm::Stub& stub, const v1::WeightHeader& header, absl::string_view payload,
                    v1::UploadWeightResponse* response = nullptr,
                    int64_t chunk_bytes = int64_t{1} << 20);
// Sends exactly these messages, then half-closes.
grpc::Status UploadMessages(v1::Qmm::Stub& stub,
                            const std::vector<v1::UploadWeightRequest>& messages);

// A MatMul request with input [m, k] of `dtype` holding `x` (converted).
v1::MatMulRequest MakeMatMulRequest(absl::string_view weight, DType dtype, int64_t m, int64_t k,
                                    const std::vector<float>& x, v1::DType output_dtype);

// Tolerances of results in `dtype` against the float64 reference: the relative error
// ||y - ref|| / ||ref|| of the whole matrix must stay below it (fp32 1e-4, fp16 2e-3,
// bf16 1e-2), and each element must satisfy |y - ref| <= tol * (|ref| + mean|ref|),
// plus, for W2A8, one activation quantization step a[m] * s[n] (float and double may
// round an x / a that lies next to .5 differently).
double Tolerance(DType dtype);
void ExpectMatchesReference(const PackedWeight& w, const std::vector<float>& x, int64_t m,
                            const std::vector<float>& y, DType y_dtype);

// The packed form the server builds from float `values` of `dtype` (test-side copy).
std::vector<uint8_t> PackLocally(Scheme scheme, const WeightShape& shape, DType dtype,
                                 const std::vector<float>& values);

// Weights uploaded from random floats, with the packed form the server built from them
// (PackLocally) kept for the float64 references.
class ReferenceWeights {
 public:
  // Uploads shape.n * shape.k values of RandomFloats(..., seed) as fp32 for `scheme`
  // (quantized by the server); a failed upload fails the test. The result stays valid as
  // long as this object.
  const PackedWeight& Upload(v1::Qmm::Stub& stub, const std::string& name, Scheme scheme,
                             const WeightShape& shape, uint32_t seed);

 private:
  std::deque<std::vector<uint8_t>> packed_;
  std::deque<PackedWeight> views_;
};

// The output bytes of qmm.v1's MatMul of `x` ([m, k], sent as `dtype`, answered in it); an
// error fails the test.
std::string MatMulBytes(v1::Qmm::Stub& stub, absl::string_view weight, DType dtype, int64_t m,
                        int64_t k, const std::vector<float>& x);

// What a scrape of `metrics`' registry would read, parsed (a failure to parse is a test
// failure, with an empty exposition returned).
Exposition Scrape(const Metrics& metrics);

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_SERVER_TEST_UTIL_H_
