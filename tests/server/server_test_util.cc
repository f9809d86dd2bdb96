#include "tests/server/server_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/quantize.h"
#include "kernels/reference.h"
#include "prometheus/text_serializer.h"
#include "server/cpu_backend.h"
#include "server/proto_convert.h"
#include "server/sha256.h"

namespace qmm::testing {

namespace {

std::unique_ptr<Backend> CpuBackend(int workers) {
  BackendOptions backend_options;
  backend_options.kind = BackendOptions::Kind::kCpu;
  backend_options.num_workers = workers;
  return CreateCpuBackend(backend_options);
}

std::unique_ptr<QmmServer> StartOn(std::unique_ptr<Backend> backend, ServerOptions options,
                                   int* port) {
  options.listen_address = "127.0.0.1:0";
  auto server = std::make_unique<QmmServer>(std::move(backend), options);
  absl::StatusOr<int> started = server->Start();
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return nullptr;
  *port = *started;
  return server;
}

}  // namespace

std::unique_ptr<QmmServer> StartServer(ServerOptions options, int* port, int workers) {
  return StartOn(CpuBackend(workers), std::move(options), port);
}

std::unique_ptr<QmmServer> StartGatedServer(ServerOptions options, int* port, GatedBackend** gate,
                                            int workers) {
  auto gated = std::make_unique<GatedBackend>(CpuBackend(workers));
  *gate = gated.get();
  return StartOn(std::move(gated), std::move(options), port);
}

TestServer StartTestServer(ServerOptions options, int workers) {
  TestServer out;
  out.server = StartServer(std::move(options), &out.port, workers);
  if (out.server == nullptr) return out;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  out.channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", out.port),
                                          grpc::InsecureChannelCredentials(), args);
  out.stub = v1::Qmm::NewStub(out.channel);
  return out;
}

std::vector<float> RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = uniform(rng);
  // A few outliers, as real activations and weights have.
  for (int64_t i = 0; i < count; i += 97) out[i] *= 8.0f;
  return out;
}

std::string ToBytes(DType dtype, const std::vector<float>& values) {
  std::string out(values.size() * DTypeSize(dtype), '\0');
  FromFloat(dtype, values.data(), values.size(), out.data());
  return out;
}

std::vector<float> FromBytes(DType dtype, absl::string_view bytes) {
  std::vector<float> out(bytes.size() / DTypeSize(dtype));
  ToFloat(dtype, bytes.data(), out.size(), out.data());
  return out;
}

std::string Sha256Of(absl::string_view bytes) {
  Sha256 sha;
  sha.Update(bytes);
  const Sha256::Digest digest = sha.Finish();
  return std::string(digest.begin(), digest.end());
}

v1::WeightHeader MakeHeader(absl::string_view name, v1::Scheme scheme, int64_t n, int64_t k,
                            int32_t group_size, v1::SourceEncoding encoding, v1::DType source_dtype,
                            absl::string_view payload) {
  v1::WeightHeader header;
  header.set_name(std::string(name));
  header.set_n(n);
  header.set_k(k);
  header.set_scheme(scheme);
  header.set_group_size(group_size);
  header.set_encoding(encoding);
  header.set_source_dtype(source_dtype);
  header.set_total_bytes(static_cast<int64_t>(payload.size()));
  header.set_sha256(Sha256Of(payload));
  return header;
}

grpc::Status Upload(v1::Qmm::Stub& stub, const v1::WeightHeader& header, absl::string_view payload,
                    v1::UploadWeightResponse* response, int64_t chunk_bytes) {
  grpc::ClientContext context;
  v1::UploadWeightResponse ignored;
  std::unique_ptr<grpc::ClientWriter<v1::UploadWeightRequest>> writer =
      stub.UploadWeight(&context, response != nullptr ? response : &ignored);
  v1::UploadWeightRequest request;
  *request.mutable_header() = header;
  bool ok = writer->Write(request);
  for (size_t offset = 0; ok && offset < payload.size(); offset += chunk_bytes) {
    request.set_chunk(std::string(payload.substr(offset, chunk_bytes)));
    ok = writer->Write(request);
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status UploadMessages(v1::Qmm::Stub& stub,
                            const std::vector<v1::UploadWeightRequest>& messages) {
  grpc::ClientContext context;
  v1::UploadWeightResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadWeightRequest>> writer =
      stub.UploadWeight(&context, &response);
  for (const v1::UploadWeightRequest& message : messages) {
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::MatMulRequest MakeMatMulRequest(absl::string_view weight, DType dtype, int64_t m, int64_t k,
                                    const std::vector<float>& x, v1::DType output_dtype) {
  v1::MatMulRequest request;
  request.set_weight(std::string(weight));
  request.mutable_input()->set_dtype(DTypeToProto(dtype));
  request.mutable_input()->add_shape(m);
  request.mutable_input()->add_shape(k);
  request.mutable_input()->set_data(ToBytes(dtype, x));
  request.set_output_dtype(output_dtype);
  return request;
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-4;
    case DType::kF16:
      return 2e-3;
    case DType::kBF16:
      return 1e-2;
  }
  return 0;
}

void ExpectMatchesReference(const PackedWeight& w, const std::vector<float>& x, int64_t m,
                            const std::vector<float>& y, DType y_dtype) {
  const int64_t n = w.shape.n;
  const int64_t k = w.shape.k;
  ASSERT_EQ(static_cast<int64_t>(y.size()), m * n);
  const std::vector<double> ref = ReferenceMatMul(w, x.data(), m);
  double err2 = 0, ref2 = 0, ref_abs = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    err2 += (y[i] - ref[i]) * (y[i] - ref[i]);
    ref2 += ref[i] * ref[i];
    ref_abs += std::abs(ref[i]);
  }
  ASSERT_GT(ref2, 0) << "degenerate test data";
  const double tol = Tolerance(y_dtype);
  EXPECT_LE(std::sqrt(err2 / ref2), tol) << SchemeName(w.scheme) << " -> " << DTypeName(y_dtype);
  const double mean_abs = ref_abs / static_cast<double>(m * n);
  int reported = 0;
  for (int64_t r = 0; r < m; ++r) {
    double step = 0;  // W2A8: one activation quantization step, times s[n] below
    if (w.scheme == Scheme::kW2A8) {
      for (int64_t c = 0; c < k; ++c) step = std::max(step, std::abs(double{x[r * k + c]}));
      step /= 127;
    }
    for (int64_t c = 0; c < n; ++c) {
      double bound = tol * (std::abs(ref[r * n + c]) + mean_abs);
      if (w.scheme == Scheme::kW2A8) {
        float s;
        std::memcpy(&s, w.scales() + 4 * c, 4);
        bound += 2 * step * std::abs(s);
      }
      const double diff = std::abs(y[r * n + c] - ref[r * n + c]);
      if (!(diff <= bound) && reported++ < 5) {
        ADD_FAILURE() << SchemeName(w.scheme) << " -> " << DTypeName(y_dtype) << " y[" << r << "]["
                      << c << "] = " << y[r * n + c] << ", reference " << ref[r * n + c]
                      << ", bound " << bound;
      }
    }
  }
}

std::vector<uint8_t> PackLocally(Scheme scheme, const WeightShape& shape, DType dtype,
                                 const std::vector<float>& values) {
  const std::string bytes = ToBytes(dtype, values);
  absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(
      scheme, shape, dtype,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  EXPECT_TRUE(packed.ok()) << packed.status();
  return packed.ok() ? *std::move(packed) : std::vector<uint8_t>{};
}

const PackedWeight& ReferenceWeights::Upload(v1::Qmm::Stub& stub, const std::string& name,
                                             Scheme scheme, const WeightShape& shape,
                                             uint32_t seed) {
  const std::vector<float> values = RandomFloats(shape.n * shape.k, seed);
  const std::string payload = ToBytes(DType::kF32, values);
  const grpc::Status status =
      testing::Upload(stub,
                      MakeHeader(name, SchemeToProto(scheme), shape.n, shape.k, shape.group_size,
                                 v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
                      payload);
  EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
  packed_.push_back(PackLocally(scheme, shape, DType::kF32, values));
  views_.push_back(PackedWeight{scheme, shape, packed_.back()});
  return views_.back();
}

std::string MatMulBytes(v1::Qmm::Stub& stub, absl::string_view weight, DType dtype, int64_t m,
                        int64_t k, const std::vector<float>& x) {
  grpc::ClientContext context;
  v1::MatMulResponse response;
  const grpc::Status status = stub.MatMul(
      &context, MakeMatMulRequest(weight, dtype, m, k, x, v1::DTYPE_UNSPECIFIED), &response);
  EXPECT_TRUE(status.ok()) << weight << ": " << status.error_message();
  return response.output().data();
}

Exposition Scrape(const Metrics& metrics) {
  absl::StatusOr<Exposition> e =
      ParseExposition(prometheus::TextSerializer().Serialize(metrics.Collect()));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : Exposition();
}

}  // namespace qmm::testing
