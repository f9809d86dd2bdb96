// CudaBackend on a real device: every wire dtype in and out against the CPU kernel, the
// fp16 range scaling of fp32 activations, memory accounting, allocation failure of one
// upload, concurrent workers and the argument errors. Skips (exit 77) without a device.
#include "server/cuda_backend.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/w8a16.h"
#include "kernels/dtype.h"
#include "kernels/quantize.h"

namespace qmm {
namespace {

std::unique_ptr<Backend> MakeBackend(int workers = 2) {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCuda;
  options.num_workers = workers;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

std::vector<float> RandomNormal(std::mt19937_64& rng, size_t count, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

struct Packed {
  Scheme scheme;
  WeightShape shape;
  std::vector<uint8_t> bytes;
  PackedWeight view() const { return PackedWeight{scheme, shape, bytes}; }
};

Packed RandomPacked(Scheme scheme, const WeightShape& shape, std::mt19937_64& rng) {
  const std::vector<float> w = RandomNormal(rng, shape.n * shape.k, 0.05f);
  absl::StatusOr<std::vector<uint8_t>> bytes = QuantizeWeight(
      scheme, shape, DType::kF32,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return Packed{scheme, shape, bytes.ok() ? *std::move(bytes) : std::vector<uint8_t>{}};
}

// Runs one MatMul with x given as fp32 `x` converted to `x_dtype` on the wire and checks
// y (in `y_dtype`) against CpuMatMul on the wire values: |y - ref| <= c * rms(ref) +
// u * |ref|, c covering the kernel's 16-bit activations.
void CheckMatMul(Backend& backend, int worker, const BackendWeight& weight, const Packed& packed,
                 const std::vector<float>& x, int64_t m, DType x_dtype, DType y_dtype) {
  SCOPED_TRACE(::testing::Message() << SchemeName(packed.scheme) << " m=" << m
                                    << " x=" << DTypeName(x_dtype) << " y=" << DTypeName(y_dtype));
  const WeightShape& shape = packed.shape;
  std::vector<uint8_t> wire(x.size() * DTypeSize(x_dtype));
  FromFloat(x_dtype, x.data(), x.size(), wire.data());
  std::vector<float> wire_values(x.size());
  ToFloat(x_dtype, wire.data(), x.size(), wire_values.data());
  std::vector<float> expected(m * shape.n);
  CpuMatMul(packed.view(), wire_values.data(), m, expected.data(), 0);

  std::vector<uint8_t> y(m * shape.n * DTypeSize(y_dtype), 0xFF);  // NaN everywhere
  MatMulCall call;
  call.weight = &weight;
  call.x_dtype = x_dtype;
  call.x = wire.data();
  call.m = m;
  call.y_dtype = y_dtype;
  call.y = y.data();
  absl::StatusOr<int64_t> ns = backend.MatMul(worker, call);
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_GT(*ns, 0);
  std::vector<float> got(m * shape.n);
  ToFloat(y_dtype, y.data(), got.size(), got.data());

  double sum_sq = 0;
  for (float v : expected) sum_sq += static_cast<double>(v) * v;
  const double rms = std::sqrt(sum_sq / expected.size());
  ASSERT_GT(rms, 0.0);
  const bool bf16_path = x_dtype == DType::kBF16 || packed.scheme == Scheme::kBf16;
  const double c = bf16_path ? 1e-2 : 2e-3;
  const double u = y_dtype == DType::kF32 ? 0 : std::ldexp(1.0, y_dtype == DType::kF16 ? -11 : -8);
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - expected[i]);
    if (!std::isfinite(got[i]) || err > c * rms + u * std::fabs(expected[i])) {
      ++bad;
      ADD_FAILURE() << "y[" << i << "] = " << got[i] << ", CPU " << expected[i];
    }
  }
}

TEST(CudaBackendTest, DescribesTheDevice) {
  std::unique_ptr<Backend> backend = MakeBackend(3);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cuda");
  EXPECT_FALSE(backend->device_name().empty());
  EXPECT_EQ(backend->num_workers(), 3);
  EXPECT_GT(backend->memory_total_bytes(), 0);
  EXPECT_GT(backend->memory_free_bytes(), 0);
  EXPECT_LE(backend->memory_free_bytes(), backend->memory_total_bytes());
  EXPECT_TRUE(backend->healthy());
}

TEST(CudaBackendTest, RejectsAMissingDevice) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  BackendOptions options;
  options.device = count;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CudaBackendTest, SchemesWithoutAKernelAreUnimplemented) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  for (Scheme s : kAllSchemes) {
    const WeightShape shape{16, KAlignment(s), s == Scheme::kW4A16 ? kW4GroupSize : 0};
    const absl::Status status = backend->CheckShape(s, shape);
    if (cuda::FindKernel(s) == nullptr) {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << SchemeName(s);
      EXPECT_NE(status.message().find(std::string(SchemeName(s))), std::string::npos);
    } else {
      EXPECT_TRUE(status.ok()) << status;
    }
  }
}

TEST(CudaBackendTest, EveryWireDtypeMatchesTheCpuKernel) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  for (Scheme scheme : kAllSchemes) {
    if (cuda::FindKernel(scheme) == nullptr) continue;
    const WeightShape shape{300, 512, scheme == Scheme::kW4A16 ? kW4GroupSize : 0};
    const Packed packed = RandomPacked(scheme, shape, rng);
    absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(packed.view());
    ASSERT_TRUE(weight.ok()) << weight.status();
    EXPECT_EQ((*weight)->scheme(), scheme);
    EXPECT_EQ((*weight)->shape().n, shape.n);
    if (scheme == Scheme::kW8A16) {
      EXPECT_EQ((*weight)->device_bytes(), cuda::W8A16DeviceBytes(shape));
    }
    for (int64_t m : {1, 5, 70}) {
      const std::vector<float> x = RandomNormal(rng, m * shape.k, 1.0f);
      for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (DType y_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
          CheckMatMul(*backend, static_cast<int>(m % 2), **weight, packed, x, m, x_dtype, y_dtype);
        }
      }
    }
  }
}

TEST(CudaBackendTest, Fp32ActivationsBeyondFp16RangeAreScaled) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  for (Scheme scheme : {Scheme::kW8A16, Scheme::kFp16}) {
    const Packed packed = RandomPacked(scheme, {64, 256, 0}, rng);
    absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(packed.view());
    ASSERT_TRUE(weight.ok()) << weight.status();
    std::vector<float> x = RandomNormal(rng, 3 * 256, 3e5f);  // far past 65504
    x[17] = 2e9f;
    CheckMatMul(*backend, 0, **weight, packed, x, 3, DType::kF32, DType::kF32);
    CheckMatMul(*backend, 1, **weight, packed, x, 3, DType::kBF16, DType::kF32);
  }
}

TEST(CudaBackendTest, ConcurrentWorkersGetTheirOwnResults) {
  std::unique_ptr<Backend> backend = MakeBackend(4);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const Packed packed = RandomPacked(Scheme::kW8A16, {1024, 2048, 0}, rng);
  absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(packed.view());
  ASSERT_TRUE(weight.ok()) << weight.status();
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(RandomNormal(rng, (i + 1) * 2048, 1.0f));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round) {
        CheckMatMul(*backend, i, **weight, packed, xs[i], i + 1, DType::kF32, DType::kF32);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(CudaBackendTest, AnUploadThatDoesNotFitFailsAloneWithResourceExhausted) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const Packed small = RandomPacked(Scheme::kW8A16, {64, 128, 0}, rng);
  // Take all but ~64 MiB of the device, then upload a 256 MiB weight.
  std::vector<void*> hog;
  size_t chunk = size_t{1} << 30;
  while (chunk >= (size_t{16} << 20)) {
    void* p = nullptr;
    if (backend->memory_free_bytes() > static_cast<int64_t>(chunk + (size_t{64} << 20)) &&
        cudaMalloc(&p, chunk) == cudaSuccess) {
      hog.push_back(p);
    } else {
      cudaGetLastError();
      chunk /= 2;
    }
  }
  const WeightShape big{8192, 16384, 0};
  std::vector<uint8_t> big_bytes(PackedBytes(Scheme::kFp16, big), 0x3C);  // fp16 1.0
  absl::StatusOr<std::unique_ptr<BackendWeight>> failed =
      backend->Load(PackedWeight{Scheme::kFp16, big, big_bytes});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
  EXPECT_TRUE(backend->healthy());
  for (void* p : hog) cudaFree(p);
  // The backend keeps serving.
  absl::StatusOr<std::unique_ptr<BackendWeight>> ok = backend->Load(small.view());
  ASSERT_TRUE(ok.ok()) << ok.status();
  CheckMatMul(*backend, 0, **ok, small, RandomNormal(rng, 2 * 128, 1.0f), 2, DType::kF32,
              DType::kF16);
}

TEST(CudaBackendTest, AWorkerOutOfRangeIsInternal) {
  std::unique_ptr<Backend> backend = MakeBackend(1);
  ASSERT_NE(backend, nullptr);
  MatMulCall call;
  EXPECT_EQ(backend->MatMul(1, call).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(backend->MatMul(-1, call).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace qmm
