// CudaBackend on a real device: every wire dtype in and out against the CPU kernel, the
// fp16 range scaling of fp32 activations, memory accounting, allocation failure of one
// upload, concurrent workers and the argument errors. Skips (exit 77) without a device.
#include "server/cuda_backend.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/w8a16.h"
#include "kernels/dtype.h"
#include "kernels/quantize.h"
#include "server/cpu_backend.h"
#include "tests/test_seed.h"

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
// u * |ref|, c covering the kernel's 16-bit activations. `staged`: x and y go through the
// backend's own buffers (StageHost), as a batch does.
void CheckMatMul(Backend& backend, int worker, const BackendWeight& weight, const Packed& packed,
                 const std::vector<float>& x, int64_t m, DType x_dtype, DType y_dtype,
                 bool staged = false) {
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
  TransferTimes transfer;
  call.transfer = &transfer;
  HostStaging host;
  if (staged) {
    absl::StatusOr<HostStaging> s = backend.StageHost(worker, wire.size(), y.size());
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NE(s->x, nullptr);
    ASSERT_NE(s->y, nullptr);
    host = *s;
    std::memcpy(host.x, wire.data(), wire.size());
    std::memset(host.y, 0xFF, y.size());
    call.x = host.x;
    call.y = host.y;
  }
  absl::StatusOr<int64_t> ns = backend.MatMul(worker, call);
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_GT(*ns, 0);
  EXPECT_GE(transfer.h2d_ns, 0);  // measured (-1: not)
  EXPECT_GE(transfer.d2h_ns, 0);
  if (staged) std::memcpy(y.data(), host.y, y.size());
  std::vector<float> got(m * shape.n);
  ToFloat(y_dtype, y.data(), got.size(), got.data());

  // Each row is one caller's result: its tolerance scales with that row's rms (a row
  // holding a 2e9 outlier must not lend its scale to, or take it from, the others).
  // bf16: 1.5e-2, as the kernel tests (tests/kernels/cuda/kernels_gpu_test.cc says why:
  // the W4A16 wgmma kernel holds the scaled weights in bf16).
  const bool bf16_path = x_dtype == DType::kBF16 || packed.scheme == Scheme::kBf16;
  const double c = bf16_path ? 1.5e-2 : 2e-3;
  const double u = y_dtype == DType::kF32 ? 0 : std::ldexp(1.0, y_dtype == DType::kF16 ? -11 : -8);
  int bad = 0;
  for (int64_t row = 0; row < m && bad < 5; ++row) {
    double sum_sq = 0;
    for (int64_t j = 0; j < shape.n; ++j) {
      sum_sq += static_cast<double>(expected[row * shape.n + j]) * expected[row * shape.n + j];
    }
    const double rms = std::sqrt(sum_sq / shape.n);
    ASSERT_GT(rms, 0.0) << "row " << row;
    for (int64_t j = 0; j < shape.n && bad < 5; ++j) {
      const size_t i = row * shape.n + j;
      const double err = std::fabs(static_cast<double>(got[i]) - expected[i]);
      if (!std::isfinite(got[i]) || err > c * rms + u * std::fabs(expected[i])) {
        ++bad;
        ADD_FAILURE() << "y[" << row << "][" << j << "] = " << got[i] << ", CPU " << expected[i];
      }
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
  // W4A16 in activation order too (its inputs gathered on the device).
  EXPECT_TRUE(backend->CheckShape(Scheme::kW4A16, {16, 256, kW4GroupSize, true, true}).ok());
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

TEST(CudaBackendTest, InputsGatheredInTheStagingBuffersGiveTheSameResults) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const Packed packed = RandomPacked(Scheme::kW4A16, {256, 512, kW4GroupSize}, rng);
  absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(packed.view());
  ASSERT_TRUE(weight.ok()) << weight.status();
  for (int64_t m : {1, 7, 64, 3}) {  // growing, then smaller again
    const std::vector<float> x = RandomNormal(rng, m * 512, 1.0f);
    for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      CheckMatMul(*backend, static_cast<int>(m % 2), **weight, packed, x, m, x_dtype, DType::kF16,
                  /*staged=*/true);
    }
    // Beyond fp16: the range is measured in the staging buffer itself.
    std::vector<float> big = RandomNormal(rng, m * 512, 3e5f);
    big[m * 512 - 1] = 2e9f;
    CheckMatMul(*backend, 0, **weight, packed, big, m, DType::kF32, DType::kF32, /*staged=*/true);
  }
}

// Shared anonymous memory, as a local session's segment is (mmap of a memfd).
struct SharedMapping {
  explicit SharedMapping(size_t n) : bytes(n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~SharedMapping() {
    if (data != nullptr) munmap(data, bytes);
  }
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

// MatMulBlocks over requests of 1 to 9 rows scattered through registered shared memory
// (from the third on at offsets only 4-byte aligned, which the copy moves bytewise) gives,
// block by block, the bytes MatMul gives for the same rows gathered, which CheckMatMul
// holds to the CPU kernel; every wire dtype, fp32 beyond fp16's range (one scale for the whole
// call) included. The y areas start poisoned and the bytes between blocks stay untouched.
TEST(CudaBackendTest, BlocksInRegisteredMemoryGiveMatMulsResults) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const Packed packed = RandomPacked(Scheme::kW4A16, {384, 512, kW4GroupSize}, rng);
  absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(packed.view());
  ASSERT_TRUE(weight.ok()) << weight.status();
  SharedMapping shared(size_t{8} << 20);
  ASSERT_NE(shared.data, nullptr);
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      backend->RegisterHost(shared.data, shared.bytes);
  ASSERT_TRUE(registration.ok()) << registration.status();
  ASSERT_NE(*registration, nullptr) << "this device cannot address registered host memory";

  const std::vector<int64_t> rows = {1, 3, 1, 9, 2, 1, 1, 5};
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  for (const auto& [x_dtype, y_dtype, sigma] :
       {std::tuple{DType::kF16, DType::kF16, 1.0f}, std::tuple{DType::kBF16, DType::kF32, 1.0f},
        std::tuple{DType::kF32, DType::kBF16, 1.0f}, std::tuple{DType::kF32, DType::kF32, 3e5f}}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(x_dtype) << " -> " << DTypeName(y_dtype));
    std::vector<float> x = RandomNormal(rng, m * 512, sigma);
    if (sigma > 1.0f) x[5 * 512 + 7] = 2e9f;  // in the fourth block
    CheckMatMul(*backend, 0, **weight, packed, x, m, x_dtype, y_dtype);
    std::vector<uint8_t> wire(x.size() * DTypeSize(x_dtype));
    FromFloat(x_dtype, x.data(), x.size(), wire.data());
    std::vector<uint8_t> expected(m * 384 * DTypeSize(y_dtype));
    MatMulCall gathered{.weight = weight->get(),
                        .x_dtype = x_dtype,
                        .x = wire.data(),
                        .m = m,
                        .y_dtype = y_dtype,
                        .y = expected.data()};
    ASSERT_TRUE(backend->MatMul(1, gathered).ok());

    std::memset(shared.data, 0x5A, shared.bytes);
    std::vector<RowBlock> blocks;
    const size_t x_row = 512 * DTypeSize(x_dtype), y_row = 384 * DTypeSize(y_dtype);
    size_t at = 64, row = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      at += i % 3 == 2 ? 4 : 64;  // from the third block on, only 4-byte aligned
      uint8_t* bx = shared.data + at;
      std::memcpy(bx, wire.data() + row * x_row, rows[i] * x_row);
      at += rows[i] * x_row + 64;
      uint8_t* by = shared.data + at;
      std::memset(by, 0xFF, rows[i] * y_row);
      at += rows[i] * y_row;
      blocks.push_back({.x = bx, .y = by, .rows = rows[i]});
      row += rows[i];
    }
    TransferTimes transfer;
    absl::StatusOr<int64_t> ns = backend->MatMulBlocks(0, {.weight = weight->get(),
                                                           .x_dtype = x_dtype,
                                                           .y_dtype = y_dtype,
                                                           .blocks = blocks,
                                                           .transfer = &transfer});
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_GT(*ns, 0);
    EXPECT_GE(transfer.h2d_ns, 0);
    EXPECT_GE(transfer.d2h_ns, 0);
    row = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(std::memcmp(blocks[i].y, expected.data() + row * y_row, rows[i] * y_row), 0)
          << "block " << i;
      // The 64 bytes after each block's results are the next block's gap: untouched.
      const uint8_t* after = static_cast<const uint8_t*>(blocks[i].y) + rows[i] * y_row;
      for (int j = 0; j < 2; ++j) EXPECT_EQ(after[j], 0x5A) << "after block " << i;
      row += rows[i];
    }
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

// Forward: a model on the CUDA backend against the same model on the CPU backend (which
// runs fp32 math: checked against float64 in the CPU tests). Tolerance of an element:
// |y - cpu| <= tol * (|cpu| + rms(cpu)), tol = 1e-2 with fp16 intermediates and 4e-2 with
// bf16 (kernels/cuda/chain.h rounds each matmul input once to that dtype). Repeated runs
// of one shape (eager, then captured, then replayed) must agree bit for bit.
class CudaForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A fresh seed every run, printed so that a failure can be replayed (QMM_TEST_SEED).
    const uint64_t seed = TestSeed();
    rng_.seed(seed);
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    cuda_ = MakeBackend(2);
    ASSERT_NE(cuda_, nullptr);
    BackendOptions options;
    options.kind = BackendOptions::Kind::kCpu;
    cpu_ = CreateCpuBackend(options);
  }

  // Loads `packed` on both backends; returns {cuda, cpu} weights.
  std::pair<const BackendWeight*, const BackendWeight*> Load(Packed packed) {
    packed_.push_back(std::move(packed));
    absl::StatusOr<std::unique_ptr<BackendWeight>> on_cuda = cuda_->Load(packed_.back().view());
    absl::StatusOr<std::unique_ptr<BackendWeight>> on_cpu = cpu_->Load(packed_.back().view());
    EXPECT_TRUE(on_cuda.ok()) << on_cuda.status();
    EXPECT_TRUE(on_cpu.ok()) << on_cpu.status();
    weights_.push_back(*std::move(on_cuda));
    weights_.push_back(*std::move(on_cpu));
    return {weights_[weights_.size() - 2].get(), weights_.back().get()};
  }

  // The layers twice, for each backend's weights.
  struct Twin {
    std::vector<ModelLayer> cuda, cpu;
    void Add(ModelLayer layer, std::pair<const BackendWeight*, const BackendWeight*> w0 = {},
             std::pair<const BackendWeight*, const BackendWeight*> w1 = {},
             std::pair<const BackendWeight*, const BackendWeight*> w2 = {}) {
      ModelLayer a = layer, b = layer;
      a.weights[0] = w0.first, a.weights[1] = w1.first, a.weights[2] = w2.first;
      b.weights[0] = w0.second, b.weights[1] = w1.second, b.weights[2] = w2.second;
      cuda.push_back(a);
      cpu.push_back(b);
    }
  };

  // Runs `calls` Forwards of the same input on the CUDA backend (checking they agree bit for
  // bit) and compares the last with the CPU backend.
  void Check(const BackendModel& on_cuda, const BackendModel& on_cpu, const std::vector<float>& x,
             const std::vector<int32_t>& ids, int64_t m, int64_t out, DType x_dtype, DType y_dtype,
             double tol, int worker = 0, int calls = 3) {
    SCOPED_TRACE(::testing::Message()
                 << "m=" << m << " x=" << DTypeName(x_dtype) << " y=" << DTypeName(y_dtype));
    std::vector<uint8_t> wire(x.size() * DTypeSize(x_dtype));
    FromFloat(x_dtype, x.data(), x.size(), wire.data());
    ForwardCall call{.token_ids = ids.empty() ? nullptr : ids.data(),
                     .x_dtype = x_dtype,
                     .x = x.empty() ? nullptr : wire.data(),
                     .m = m,
                     .y_dtype = y_dtype};
    std::vector<uint8_t> first;
    for (int i = 0; i < calls; ++i) {
      std::vector<uint8_t> y(m * out * DTypeSize(y_dtype), 0xFF);
      call.model = &on_cuda;
      call.y = y.data();
      absl::StatusOr<int64_t> ns = cuda_->Forward(worker, call);
      ASSERT_TRUE(ns.ok()) << ns.status();
      EXPECT_GT(*ns, 0);
      if (i == 0) first = y;
      EXPECT_EQ(y, first) << "run " << i;
    }
    std::vector<float> want(m * out);
    call.model = &on_cpu;
    call.y_dtype = DType::kF32;
    call.y = want.data();
    ASSERT_TRUE(cpu_->Forward(worker, call).ok());
    std::vector<float> got(m * out);
    ToFloat(y_dtype, first.data(), got.size(), got.data());
    double sum2 = 0;
    for (float v : want) sum2 += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum2 / want.size());
    ASSERT_GT(rms, 0.0);
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i) {
      if (!std::isfinite(got[i]) ||
          std::fabs(got[i] - want[i]) > tol * (std::fabs(want[i]) + rms)) {
        ++bad;
        ADD_FAILURE() << "y[" << i << "] = " << got[i] << ", CPU " << want[i];
      }
    }
  }

  std::unique_ptr<Backend> cuda_, cpu_;
  std::deque<Packed> packed_;
  std::vector<std::unique_ptr<BackendWeight>> weights_;
  std::mt19937_64 rng_;
};

TEST_F(CudaForwardTest, MixedModelForEveryDTypeAndBucket) {
  const std::vector<float> gamma = RandomNormal(rng_, 256, 1.0f);
  const std::vector<float> beta = RandomNormal(rng_, 256, 0.2f);
  const std::vector<float> bias = RandomNormal(rng_, 40, 0.5f);
  Twin t;
  t.Add({.kind = LayerKind::kDyT,
         .alpha = 0.8f,
         .gamma = gamma,
         .beta = beta,
         .in_features = 256,
         .out_features = 256});
  t.Add({.kind = LayerKind::kGatedMlp, .in_features = 256, .out_features = 256},
        Load(RandomPacked(Scheme::kW4A16, {512, 256, 128}, rng_)),
        Load(RandomPacked(Scheme::kW4A16, {512, 256, 128}, rng_)),
        Load(RandomPacked(Scheme::kW2A8, {256, 512, 0}, rng_)));
  t.Add({.kind = LayerKind::kResidual, .block_start = 0, .in_features = 256, .out_features = 256});
  t.Add({.kind = LayerKind::kActivation,
         .activation = Activation::kSilu,
         .in_features = 256,
         .out_features = 256});
  t.Add({.kind = LayerKind::kLinear, .bias = bias, .in_features = 256, .out_features = 40},
        Load(RandomPacked(Scheme::kW8A16, {40, 256, 0}, rng_)));
  absl::StatusOr<std::unique_ptr<BackendModel>> on_cuda = cuda_->LoadModel(t.cuda);
  absl::StatusOr<std::unique_ptr<BackendModel>> on_cpu = cpu_->LoadModel(t.cpu);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_GE((*on_cuda)->device_bytes(), (256 + 256 + 40) * 4);
  // 3 and 4 share a bucket, 5 pads to 8, 70 runs at its own size.
  for (int64_t m : {1, 3, 4, 5, 17, 70}) {
    const std::vector<float> x = RandomNormal(rng_, m * 256, 1.0f);
    for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const DType y_dtype = x_dtype == DType::kF32 ? DType::kF16 : x_dtype;
      Check(**on_cuda, **on_cpu, x, {}, m, 40, x_dtype, y_dtype,
            x_dtype == DType::kBF16 ? 4e-2 : 1e-2, static_cast<int>(m % 2));
    }
  }
  // fp32 input beyond the fp16 range runs on bf16 intermediates instead of overflowing.
  std::vector<float> huge = RandomNormal(rng_, 2 * 256, 1.0f);
  huge[3] = 1e6f;
  Check(**on_cuda, **on_cpu, huge, {}, 2, 40, DType::kF32, DType::kF32, 4e-2);
}

TEST_F(CudaForwardTest, EmbeddingModelAndConcurrentWorkers) {
  const std::vector<float> gamma = RandomNormal(rng_, 128, 1.0f);
  Twin t;
  t.Add({.kind = LayerKind::kEmbedding, .out_features = 128},
        Load(RandomPacked(Scheme::kBf16, {1000, 128, 0}, rng_)));
  t.Add({.kind = LayerKind::kDyT,
         .alpha = 1.5f,
         .gamma = gamma,
         .in_features = 128,
         .out_features = 128});
  t.Add({.kind = LayerKind::kLinear, .in_features = 128, .out_features = 64},
        Load(RandomPacked(Scheme::kFp16, {64, 128, 0}, rng_)));
  t.Add({.kind = LayerKind::kActivation,
         .activation = Activation::kRelu,
         .in_features = 64,
         .out_features = 64});
  absl::StatusOr<std::unique_ptr<BackendModel>> on_cuda = cuda_->LoadModel(t.cuda);
  absl::StatusOr<std::unique_ptr<BackendModel>> on_cpu = cpu_->LoadModel(t.cpu);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  std::vector<std::thread> threads;
  for (int worker = 0; worker < 2; ++worker) {
    threads.emplace_back([&, worker] {
      std::mt19937_64 rng(worker);
      for (int64_t m : {1, 2, 6, 9}) {
        std::vector<int32_t> ids;
        std::uniform_int_distribution<int32_t> id(0, 999);
        for (int64_t i = 0; i < m; ++i) ids.push_back(id(rng));
        // bf16 table: bf16 intermediates.
        Check(**on_cuda, **on_cpu, {}, ids, m, 64, DType::kF32, DType::kF32, 4e-2, worker, 4);
      }
    });
  }
  for (std::thread& th : threads) th.join();
}

}  // namespace
}  // namespace qmm
