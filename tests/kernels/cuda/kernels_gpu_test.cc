// Every CUDA kernel in the registry against the CPU kernels (CpuMatMul) on fresh random
// data, plus the conversion and activation-quantization kernels against their host
// twins. Outputs (and workspaces) are poisoned with NaN bytes before every launch.
//
// Tolerance of a matmul result element (the CPU gets the same 16-bit-rounded
// activations, so what remains is summation order and a kernel's own weight rounding):
//   |y - y_cpu| <= c * rms(y_cpu) + u * |y_cpu|
// with c = 2e-3 for fp16 activations and 1.5e-2 for bf16, and u the unit roundoff of the
// output dtype (0 for fp32, 2^-11 for fp16, 2^-8 for bf16). NaN or Inf never passes.
// bf16's c covers kernels that hold the scaled weights in bf16 (the W4A16 wgmma kernel,
// as a bf16 checkpoint holds them): each product is then off by up to 2^-9 of itself,
// and over 10^5 outputs of a short K (384) the worst measured 1.02e-2 of the rms on the
// H200; a wrong chunk or token is off by tens of percent.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/layers.h"
#include "kernels/cuda/w2a8.h"
#include "kernels/cuda/w2a8_layout.h"
#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w8a16.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/layers_reference.h"
#include "kernels/quantize.h"
#include "tests/test_seed.h"

namespace qmm::cuda {
namespace {

constexpr int64_t kMs[] = {1, 2, 3, 7, 16, 33, 64, 65, 256};

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }
  // 0xFF bytes: NaN in fp32, fp16 and bf16 alike.
  cudaError_t Poison() { return bytes_ == 0 ? cudaSuccess : cudaMemset(ptr_, 0xFF, bytes_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// GemmArgs::sync words for one stream, zeroed as a server worker's are.
class SyncWords {
 public:
  SyncWords() { ok_ = buffer_.ok() && cudaMemset(buffer_.get(), 0, kSyncBytes) == cudaSuccess; }
  bool ok() const { return ok_; }
  void* get() const { return buffer_.get(); }
  // Whether the launches since (synchronized) left them zero, as the next launch needs.
  ::testing::AssertionResult LeftZero() const {
    std::vector<uint8_t> bytes(kSyncBytes, 1);
    if (cudaMemcpy(bytes.data(), buffer_.get(), bytes.size(), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return ::testing::AssertionFailure() << "sync words not read back";
    }
    const auto nonzero =
        std::count_if(bytes.begin(), bytes.end(), [](uint8_t b) { return b != 0; });
    if (nonzero == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << nonzero << " sync bytes left nonzero";
  }

 private:
  DeviceBuffer buffer_{kSyncBytes};
  bool ok_ = false;
};

// A test with its own seed (in the trace of every failure; QMM_TEST_SEED=<n> repeats one)
// and generator.
template <typename Base = ::testing::Test>
class Seeded : public Base {
 protected:
  const uint64_t seed_ = TestSeed();
  const ::testing::ScopedTrace trace_{__FILE__, __LINE__, ::testing::Message() << "seed " << seed_};
  std::mt19937_64 rng_{seed_};
};

// A seeded test with a stream of its own.
class SeededStreamTest : public Seeded<> {
 protected:
  void SetUp() override { ASSERT_CUDA(cudaStreamCreate(&stream_)); }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

std::vector<float> RandomNormal(std::mt19937_64& rng, size_t count, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

// fp32 values rounded to `dtype` and back, and the raw `dtype` bytes.
struct Rounded {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
};
Rounded RoundTo(DType dtype, const std::vector<float>& v) {
  Rounded r;
  r.bytes.resize(v.size() * DTypeSize(dtype));
  FromFloat(dtype, v.data(), v.size(), r.bytes.data());
  r.values.resize(v.size());
  ToFloat(dtype, r.bytes.data(), v.size(), r.values.data());
  return r;
}

struct Weight {
  Scheme scheme;
  WeightShape shape;
  std::vector<uint8_t> packed_bytes;
  PackedWeight packed() const { return PackedWeight{scheme, shape, packed_bytes}; }
};

// `w` ([n, k] fp32) quantized to `scheme` as an upload would.
Weight QuantizedWeight(Scheme scheme, const WeightShape& shape, const std::vector<float>& w) {
  absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(
      scheme, shape, DType::kF32,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4));
  EXPECT_TRUE(packed.ok()) << packed.status();
  return Weight{scheme, shape, packed.ok() ? *std::move(packed) : std::vector<uint8_t>{}};
}

Weight RandomWeight(Scheme scheme, const WeightShape& shape, std::mt19937_64& rng,
                    float sigma = 0.05f) {
  return QuantizedWeight(scheme, shape, RandomNormal(rng, shape.n * shape.k, sigma));
}

// A canonical W4A16 weight whose codes span all of [-8, 7] and whose fp16 scales take
// either sign. The upload's quantizer never writes -8 (it clamps to [-7, 7]); GPTQ and
// compressed-tensors checkpoints do (kernels/int4_checkpoint.h), and it is u = 0 in the
// kernels' layouts, which the other tests' quantized weights never hold. With
// shape.zero_points, zero points over all of [-8, 8] (the quantizer writes [-8, 7]).
Weight FullRangeInt4Weight(Scheme scheme, const WeightShape& shape, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(PackedBytes(scheme, shape));
  const int64_t code_bytes = shape.n * shape.k / 2;
  for (int64_t i = 0; i < code_bytes; ++i) bytes[i] = static_cast<uint8_t>(rng());
  bytes[0] = 0x88;  // -8 at the first two k of the first row
  std::uniform_real_distribution<float> magnitude(0.01f, 0.1f);
  for (int64_t i = 0; i < shape.n * shape.GroupsPerRow(); ++i) {
    const uint16_t s = FloatToHalf((rng() % 2 ? -1.0f : 1.0f) * magnitude(rng));
    std::memcpy(bytes.data() + code_bytes + 2 * i, &s, 2);
    if (shape.zero_points) {
      bytes[code_bytes + 2 * shape.n * shape.GroupsPerRow() + i] =
          static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(rng() % 17) - 8));
    }
  }
  if (shape.act_order) {
    std::vector<int32_t> order(shape.k);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::memcpy(bytes.data() + bytes.size() - 4 * shape.k, order.data(), 4 * shape.k);
  }
  return Weight{scheme, shape, std::move(bytes)};
}

// Each row's 2-norm, from its codes, scales and zero points as the canonical form holds
// them.
std::vector<double> RowNorms(const Weight& weight) {
  const WeightShape& shape = weight.shape;
  const PackedWeight packed = weight.packed();
  std::vector<double> row_norms(shape.n);
  const uint8_t* codes = packed.values();
  const uint8_t* scales = packed.scales();
  for (int64_t n = 0; n < shape.n; ++n) {
    double sq = 0.0;
    for (int64_t k = 0; k < shape.k; ++k) {
      const int nibble = (codes[(n * shape.k + k) / 2] >> (4 * (k % 2))) & 15;
      const int64_t g = n * shape.GroupsPerRow() + k / shape.GroupLength();
      const int z = packed.zero_points() == nullptr ? 0 : packed.zero_points()[g];
      const double w = HalfToFloat(static_cast<uint16_t>(scales[2 * g] | scales[2 * g + 1] << 8)) *
                       ((nibble >= 8 ? nibble - 16 : nibble) - z);
      sq += w * w;
    }
    row_norms[n] = std::sqrt(sq);
  }
  return row_norms;
}

double OutputRoundoff(DType y_dtype) {
  switch (y_dtype) {
    case DType::kF32:
      return 0.0;
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
  }
  return 0.0;
}

// `w` in the kernel's device layout, uploaded (nullptr on failure).
std::unique_ptr<DeviceBuffer> UploadLayout(const KernelOps& ops, const Weight& w) {
  const std::vector<uint8_t> layout = ops.repack(w.packed());
  auto buffer = std::make_unique<DeviceBuffer>(layout.size());
  if (!buffer->ok() || cudaMemcpy(buffer->get(), layout.data(), layout.size(),
                                  cudaMemcpyHostToDevice) != cudaSuccess) {
    return nullptr;
  }
  return buffer;
}

// The `count` values of `dtype` in `buffer`, as floats (NaN where the copy fails).
std::vector<float> Download(const DeviceBuffer& buffer, DType dtype, size_t count) {
  std::vector<uint8_t> bytes(count * DTypeSize(dtype));
  std::vector<float> values(count, NAN);
  if (cudaMemcpy(bytes.data(), buffer.get(), bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess) {
    ToFloat(dtype, bytes.data(), count, values.data());
  }
  return values;
}

// The arguments of one launch: m rows of x through `weight` (of `shape`) into y, with
// `workspace` on `stream`; no residual, DyT or cuBLAS handle.
GemmArgs LaunchArgs(const void* weight, const WeightShape& shape, DType x_dtype, const void* x,
                    int64_t m, DType y_dtype, void* y, void* workspace, cudaStream_t stream) {
  GemmArgs args;
  args.weight = weight;
  args.shape = shape;
  args.x_dtype = x_dtype;
  args.x = x;
  args.m = m;
  args.y_dtype = y_dtype;
  args.y = y;
  args.workspace = workspace;
  args.stream = stream;
  return args;
}

// Expects every value of `got` (a [rows, n] result) finite and within tol(i, want(i)) of
// want(i); reports the first five misses and the worst error over its tolerance.
template <typename Want, typename Tol>
void ExpectWithin(const std::vector<float>& got, int64_t n, Want want, Tol tol) {
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(i);
    const double t = tol(i, w);
    const double err = std::fabs(static_cast<double>(got[i]) - w);
    worst = std::max(worst, std::isfinite(got[i]) ? err / t : INFINITY);
    if (!std::isfinite(got[i]) || err > t) {
      if (++bad <= 5) {
        ADD_FAILURE() << "y[" << i / n << "][" << i % n << "] = " << got[i] << ", reference " << w
                      << ", tolerance " << t;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << got.size() << " elements; worst error / tolerance = " << worst;
}

// A device copy of one weight in its kernel's layout, a cuBLAS handle for dense ones, and
// the zeroed GemmArgs::sync words of its stream.
class GpuWeight {
 public:
  GpuWeight(const KernelOps& ops, const Weight& w) : ops_(ops), weight_(w) {
    const std::vector<uint8_t> layout = ops.repack(w.packed());
    buffer_ = std::make_unique<DeviceBuffer>(layout.size());
    if (buffer_->ok() && sync_.ok()) {
      ok_ = cudaMemcpy(buffer_->get(), layout.data(), layout.size(), cudaMemcpyHostToDevice) ==
            cudaSuccess;
    }
    ok_ = ok_ && cudaStreamCreate(&stream_) == cudaSuccess &&
          cublasCreate(&cublas_) == CUBLAS_STATUS_SUCCESS &&
          cublasSetStream(cublas_, stream_) == CUBLAS_STATUS_SUCCESS;
  }
  ~GpuWeight() {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  bool ok() const { return ok_; }

  // Runs the kernel on x (already in x_dtype) and checks it against CpuMatMul on the
  // same rounded values. `launch` overrides the registry's launcher (tuning variants).
  // With `residual`, GemmArgs::residual in that dtype (random, sigma 2) is added: the
  // expectation is the product plus the residual, which stays exact until y's rounding.
  // The tolerance scales with the output's rms, or, given `row_norms` (each weight row's
  // 2-norm), with each output's own expected size, that norm times the rms of x (and at
  // least a twentieth of the rms): where rows differ in magnitude, the rounding of a row's
  // dequantized weights is relative to that row, not to the whole output.
  void Check(DType x_dtype, DType y_dtype, int64_t m, std::mt19937_64& rng,
             cudaError_t (*launch)(const GemmArgs&) = nullptr,
             std::optional<DType> residual = std::nullopt,
             const std::vector<double>* row_norms = nullptr) {
    const WeightShape& shape = weight_.shape;
    SCOPED_TRACE(::testing::Message()
                 << SchemeName(weight_.scheme) << " n=" << shape.n << " k=" << shape.k
                 << " g=" << shape.group_size << (shape.zero_points ? " zp" : "") << " m=" << m
                 << " x=" << DTypeName(x_dtype) << " y=" << DTypeName(y_dtype)
                 << " residual=" << (residual ? DTypeName(*residual) : "none"));
    const Rounded x = RoundTo(x_dtype, RandomNormal(rng, m * shape.k, 1.0f));
    std::vector<float> expected(m * shape.n);
    CpuMatMul(weight_.packed(), x.values.data(), m, expected.data(), 0);
    double sum_sq = 0.0;
    for (float v : expected) sum_sq += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum_sq / expected.size());
    ASSERT_GT(rms, 0.0) << "random data must not give an all-zero product";
    const Rounded res =
        residual ? RoundTo(*residual, RandomNormal(rng, m * shape.n, 2.0f)) : Rounded{};

    DeviceBuffer dx(x.bytes.size());
    DeviceBuffer dr(res.bytes.size());
    DeviceBuffer dy(m * shape.n * DTypeSize(y_dtype));
    DeviceBuffer dws(ops_.workspace_bytes(shape, m));
    ASSERT_TRUE(dx.ok() && dr.ok() && dy.ok() && dws.ok());
    ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
    if (residual) {
      ASSERT_CUDA(cudaMemcpy(dr.get(), res.bytes.data(), res.bytes.size(), cudaMemcpyHostToDevice));
    }
    ASSERT_CUDA(dy.Poison());
    ASSERT_CUDA(dws.Poison());

    GemmArgs args = LaunchArgs(buffer_->get(), shape, x_dtype, dx.get(), m, y_dtype, dy.get(),
                               dws.get(), stream_);
    if (residual) {
      args.residual = dr.get();
      args.residual_dtype = *residual;
    }
    args.cublas = cublas_;
    args.sync = sync_.get();
    ASSERT_CUDA((launch != nullptr ? launch : ops_.launch)(args));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    const std::vector<float> got = Download(dy, y_dtype, m * shape.n);
    // The next launch on the stream finds them zero again.
    EXPECT_TRUE(sync_.LeftZero());

    const double c = x_dtype == DType::kF16 ? 2e-3 : 1.5e-2;
    double x_sq = 0.0;
    for (float v : x.values) x_sq += static_cast<double>(v) * v;
    const double x_rms = std::sqrt(x_sq / x.values.size());
    ExpectWithin(
        got, shape.n,
        [&](size_t i) {
          return static_cast<double>(expected[i]) + (residual ? res.values[i] : 0.0f);
        },
        [&](size_t i, double want) {
          // At least a twentieth of the rms: a row of zeros has norm 0.
          const double scale =
              row_norms != nullptr ? std::max((*row_norms)[i % shape.n] * x_rms, 0.05 * rms) : rms;
          return c * scale + OutputRoundoff(y_dtype) * std::fabs(want);
        });
  }

 private:
  const KernelOps& ops_;
  const Weight& weight_;
  std::unique_ptr<DeviceBuffer> buffer_;
  SyncWords sync_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  bool ok_ = false;
};

// Activation dtypes a scheme's kernel takes: dense cuBLAS needs the weight's own; W2A8
// quantizes fp32 activations as they are.
std::vector<DType> XDtypes(Scheme scheme) {
  if (scheme == Scheme::kFp16) return {DType::kF16};
  if (scheme == Scheme::kBf16) return {DType::kBF16};
  if (scheme == Scheme::kW2A8) return {DType::kF16, DType::kBF16, DType::kF32};
  return {DType::kF16, DType::kBF16};
}

// Smallest legal, non-power-of-two N (odd chunk counts; N = 1002 also leaves the last
// four rows partial and every other token's row off the alignment of a store of four,
// which the split-K epilogue then stores value by value), and a 4096-class layer.
std::vector<WeightShape> TestShapes(Scheme scheme) {
  const int64_t a = KAlignment(scheme);
  std::vector<int32_t> groups = {0};
  if (scheme == Scheme::kW4A16) groups = {kW4GroupSize, 0};
  std::vector<WeightShape> shapes;
  for (int32_t g : groups) {
    shapes.push_back({1, a, g});
    shapes.push_back({200, 3 * std::max<int64_t>(a, 128), g});
    shapes.push_back({1002, 1024, g});
    shapes.push_back({4096, 4096, g});
  }
  // Quantized with zero points (over each group's range).
  if (scheme == Scheme::kW4A16) {
    shapes.push_back({1002, 1024, kW4GroupSize, true});
    shapes.push_back({200, 384, 0, true});
  }
  return shapes;
}

class RegistryTest : public Seeded<::testing::TestWithParam<Scheme>> {};

TEST_P(RegistryTest, MatchesCpuKernel) {
  const Scheme scheme = GetParam();
  const KernelOps* ops = FindKernel(scheme);
  if (ops == nullptr) GTEST_SKIP() << SchemeName(scheme) << " has no CUDA kernel yet";
  for (const WeightShape& shape : TestShapes(scheme)) {
    ASSERT_TRUE(ValidateShape(scheme, shape).ok());
    const Weight w = RandomWeight(scheme, shape, rng_);
    GpuWeight gpu(*ops, w);
    ASSERT_TRUE(gpu.ok());
    for (DType x_dtype : XDtypes(scheme)) {
      for (int64_t m : kMs) {
        gpu.Check(x_dtype, DType::kF32, m, rng_);
        if (m == 3 || m == 65) {
          gpu.Check(x_dtype, DType::kF16, m, rng_);
          gpu.Check(x_dtype, DType::kBF16, m, rng_);
        }
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The launchers pick different kernels for large weights (the decode paths switch on
// whether the rows fit one wave), which the small shapes above never reach: one
// Llama-70B-class MLP layer at the decode row counts.
TEST_P(RegistryTest, LargeLayerMatchesCpuKernel) {
  const Scheme scheme = GetParam();
  const KernelOps* ops = FindKernel(scheme);
  if (ops == nullptr) GTEST_SKIP() << SchemeName(scheme) << " has no CUDA kernel yet";
  const int32_t group = scheme == Scheme::kW4A16 ? kW4GroupSize : 0;
  for (const WeightShape& shape :
       {WeightShape{28672, 8192, group}, WeightShape{8192, 28672, group}}) {
    const Weight w = RandomWeight(scheme, shape, rng_);
    GpuWeight gpu(*ops, w);
    ASSERT_TRUE(gpu.ok());
    for (int64_t m : {1, 4, 16, 64}) {
      gpu.Check(XDtypes(scheme).front(), DType::kF32, m, rng_);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, RegistryTest, ::testing::ValuesIn(kAllSchemes),
                         [](const ::testing::TestParamInfo<Scheme>& info) {
                           return std::string(SchemeName(info.param));
                         });

TEST(RegistryEntriesTest, CoversDenseAndW8A16) {
  EXPECT_NE(FindKernel(Scheme::kFp16), nullptr);
  EXPECT_NE(FindKernel(Scheme::kBf16), nullptr);
  EXPECT_NE(FindKernel(Scheme::kW8A16), nullptr);
}

using Launch = cudaError_t (*)(const GemmArgs&);

// A launcher with a forced split count (0: its own choice of kernel and split).
template <typename Options, cudaError_t (*kLaunch)(const GemmArgs&, const Options&), int kSplits>
cudaError_t LaunchWithSplits(const GemmArgs& args) {
  Options options;
  options.splits = kSplits;
  return kLaunch(args, options);
}

// A launch with one option forced: options.*kField = kValue (0: the launch's choice).
template <typename Options, cudaError_t (*kLaunch)(const GemmArgs&, const Options&), auto kField,
          int kValue>
cudaError_t LaunchWith(const GemmArgs& args) {
  Options options;
  options.*kField = kValue;
  return kLaunch(args, options);
}

using Variants = std::vector<std::pair<std::string, Launch>>;

// Every split count the device runs (more than 1 needs clusters), labelled by count.
template <typename Options, cudaError_t (*kLaunch)(const GemmArgs&, const Options&)>
Variants SplitVariants(const DeviceInfo& device) {
  Variants variants = {{"splits 1", &LaunchWithSplits<Options, kLaunch, 1>}};
  if (device.clusters()) {
    variants.push_back({"splits 2", &LaunchWithSplits<Options, kLaunch, 2>});
    variants.push_back({"splits 4", &LaunchWithSplits<Options, kLaunch, 4>});
    variants.push_back({"splits 8", &LaunchWithSplits<Options, kLaunch, 8>});
  }
  return variants;
}

// The W4A16 wgmma kernel at every M with G groups per CTA, a forced split and token
// tile (64 up to 64 tokens, 128 or 256 beyond 128; 0: the launch's choice); where it
// cannot run, the launch falls back to the other kernels.
template <int kGroups, int kSplits, int kTokens = 0>
cudaError_t LaunchW4A16Wgmma(const GemmArgs& args) {
  W4A16Options options;
  options.wgmma_groups = kGroups;
  options.splits = kSplits;
  options.wgmma_tokens = kTokens;
  return LaunchW4A16(args, options);
}

// The W4A16 decode kernel up to 8 tokens with kStrips strips per warp forced (the default
// launch takes two only where N leaves a row set for every SM).
template <int kStrips>
cudaError_t LaunchW4A16DecodeStrips(const GemmArgs& args) {
  W4A16Options options;
  options.decode_strips = kStrips;
  return LaunchW4A16(args, options);
}

// The W4A16 decode kernel's wide CTAs (16 warps) on the stream-K grid, both forced.
cudaError_t LaunchW4A16WideStream(const GemmArgs& args) {
  W4A16Options options;
  options.decode_warps = 16;
  options.decode_stream = 2;
  return LaunchW4A16(args, options);
}

// Each launch variant against the CPU on fresh random weights of each shape, at each M,
// for fp16 and bf16 activations.
void CheckVariants(Scheme scheme, const std::vector<WeightShape>& shapes,
                   const std::vector<int64_t>& ms, const Variants& variants, std::mt19937_64& rng) {
  const KernelOps* ops = FindKernel(scheme);
  ASSERT_NE(ops, nullptr);
  for (const WeightShape& shape : shapes) {
    const Weight w = RandomWeight(scheme, shape, rng);
    GpuWeight gpu(*ops, w);
    ASSERT_TRUE(gpu.ok());
    for (const auto& [label, launch] : variants) {
      SCOPED_TRACE(label);
      for (int64_t m : ms) {
        for (DType x_dtype : {DType::kF16, DType::kBF16}) {
          gpu.Check(x_dtype, DType::kF32, m, rng, launch);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// Each launch variant against the CPU on `weight`, with Check's per-row tolerance (its
// `row_norms`), at each of `ms` (by default the token counts that pick each W4A16
// kernel), for fp16 and bf16 activations.
void CheckVariantsPerRow(const Weight& weight, const Variants& variants, std::mt19937_64& rng,
                         std::initializer_list<int64_t> ms = {1, 5, 16, 17, 40, 64, 129, 256}) {
  const std::vector<double> row_norms = RowNorms(weight);
  GpuWeight gpu(*FindKernel(weight.scheme), weight);
  ASSERT_TRUE(gpu.ok());
  for (const auto& [label, launch] : variants) {
    SCOPED_TRACE(label);
    for (int64_t m : ms) {
      for (DType x_dtype : {DType::kF16, DType::kBF16}) {
        gpu.Check(x_dtype, DType::kF32, m, rng, launch, std::nullopt, &row_norms);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

class W8A16Test : public SeededStreamTest {};
class W4A16Test : public SeededStreamTest {
 protected:
  // Each weight of `shapes` through every launch path (row by row, then at 3 fp16 and 70
  // bf16 rows), then `large` through the default launch at `large_rows`.
  void CheckEveryPath(std::initializer_list<WeightShape> shapes, const WeightShape& large,
                      std::initializer_list<int64_t> large_rows);
};
class W2A8Test : public SeededStreamTest {
 protected:
  // The weight the input-transform tests (DyT, RMSNorm) launch on: random, 300 x 2560, in
  // its device layout, with the zeroed words its stream-K grid takes (GemmArgs::sync).
  struct Launchable {
    explicit Launchable(std::mt19937_64& rng)
        : weight(RandomWeight(Scheme::kW2A8, shape, rng)), layout(UploadLayout(ops, weight)) {}
    bool ok() const { return layout != nullptr && sync.ok(); }
    const KernelOps& ops = *FindKernel(Scheme::kW2A8);
    const WeightShape shape = {300, 2560, 0};
    const Weight weight;
    const std::unique_ptr<DeviceBuffer> layout;
    SyncWords sync;
  };
};
using DependentLaunchTest = SeededStreamTest;

// The W8A16 wgmma GEMM at every M with G groups per CTA and a forced split (0: the
// launch's choice); where it cannot run (not sm_90a, K % 128 != 0) the launch falls
// back to the other kernels.
template <int kGroups, int kSplits>
cudaError_t LaunchW8A16Wgmma(const GemmArgs& args) {
  W8A16Options options;
  options.wgmma_groups = kGroups;
  options.splits = kSplits;
  return LaunchW8A16(args, options);
}

// The W8A16 decode kernel up to 8 tokens with kRows row tiles per warp forced (the
// default launch takes two only where N leaves a row set for every SM).
template <int kRows>
cudaError_t LaunchW8A16DecodeRows(const GemmArgs& args) {
  W8A16Options options;
  options.decode_rows = kRows;
  return LaunchW8A16(args, options);
}

// The W8A16 split-K tile kernel up to 16 tokens with the launch's split, where the launch
// would take the decode kernel.
cudaError_t LaunchW8A16Tile(const GemmArgs& args) {
  W8A16Options options;
  options.tile = true;
  return LaunchW8A16(args, options);
}

// Every split count of W8A16, not only the ones the heuristic picks, and the wgmma GEMM
// with each row-group count, alone and split 4 ways (one group also 8, the largest
// cluster, and 7; two groups 3, whose slices of the tile are uneven), also at the M the
// default launch gives the other kernels (K = 1088 is not a multiple of 128: the
// fallback).
TEST_F(W8A16Test, EverySplitMatchesCpu) {
  DeviceInfo device;
  ASSERT_CUDA(CurrentDeviceInfo(&device));
  Variants variants = SplitVariants<W8A16Options, &LaunchW8A16>(device);
  variants.insert(variants.begin(), {"default", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 0>});
  variants.push_back({"wgmma 1 group", &LaunchW8A16Wgmma<1, 0>});
  variants.push_back({"wgmma 2 groups", &LaunchW8A16Wgmma<2, 0>});
  if (device.clusters()) {
    variants.push_back({"wgmma 1 group, splits 4", &LaunchW8A16Wgmma<1, 4>});
    variants.push_back({"wgmma 2 groups, splits 4", &LaunchW8A16Wgmma<2, 4>});
    variants.push_back({"wgmma 1 group, splits 8", &LaunchW8A16Wgmma<1, 8>});
    variants.push_back({"wgmma 2 groups, splits 3", &LaunchW8A16Wgmma<2, 3>});
    variants.push_back({"wgmma 1 group, splits 7", &LaunchW8A16Wgmma<1, 7>});
  }
  variants.push_back({"decode 1 row tile", &LaunchW8A16DecodeRows<1>});
  variants.push_back({"decode 2 row tiles", &LaunchW8A16DecodeRows<2>});
  variants.push_back({"tile", &LaunchW8A16Tile});
  if (device.clusters()) {
    variants.push_back({"splits 3", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 3>});
    variants.push_back({"splits 6", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 6>});
  }
  CheckVariants(Scheme::kW8A16, {{1000, 4096, 0}, {300, 1088, 0}, {200, 1152, 0}},
                {1, 5, 9, 17, 40, 65, 100, 129, 300}, variants, rng_);
}

// A W2A8 launch with the wgmma GEMM forced (kGroups 1 or 2, its K split kWgmmaSplits, its
// token tile kWgmmaTokens: 64, 128 or 256), or with a forced k split (the mma.sync
// kernels the default launch leaves on sm_90a beyond 16 tokens), or with the decode
// kernel's units a slot, row groups a set or stream-K grid forced.
template <int kGroups, int kSplits, int kDecodeUnits = 0, int kDecodeGroups = 0,
          int kDecodeStream = 0, int kWgmmaSplits = 0, int kWgmmaTokens = 0>
cudaError_t LaunchW2A8With(const GemmArgs& args) {
  W2A8Options options;
  options.wgmma_groups = kGroups;
  options.wgmma_splits = kWgmmaSplits;
  options.wgmma_tokens = kWgmmaTokens;
  options.k_splits = kSplits;
  options.decode_units = kDecodeUnits;
  options.decode_groups = kDecodeGroups;
  options.decode_stream = kDecodeStream;
  return LaunchW2A8(args, options);
}

// Every W2A8 path: the default launch, the decode kernel's slots of one and two units
// (K = 1152: an odd count of k blocks, so the last two-unit slot is half empty) and its
// row sets of one and two row groups (N = 300: 10 groups, the last partial), the mma.sync
// GEMM at every M, and the wgmma GEMM, also at the M the default gives the others, also
// split along K (one group, 4 and 7 ways: K = 1152's 9 chunks leave a CTA an odd count,
// the whole-chunk loop's tail; two groups 8 ways, the largest cluster, and 5), also on
// 256-token tiles beyond 128 tokens (split 4 and 8 ways).
TEST_F(W2A8Test, EveryPathMatchesCpu) {
  CheckVariants(Scheme::kW2A8, {{1000, 2048, 0}, {300, 1152, 0}},
                {1, 5, 8, 9, 16, 17, 40, 64, 100, 129, 300},
                {{"default", &LaunchW2A8With<0, 0>},
                 {"decode 1 unit", &LaunchW2A8With<0, 0, 1>},
                 {"decode 2 units", &LaunchW2A8With<0, 0, 2>},
                 {"decode 1 group", &LaunchW2A8With<0, 0, 0, 1>},
                 {"decode 2 groups", &LaunchW2A8With<0, 0, 0, 2>},
                 {"k splits 2", &LaunchW2A8With<0, 2>},
                 {"wgmma 1 group", &LaunchW2A8With<1, 0>},
                 {"wgmma 2 groups", &LaunchW2A8With<2, 0>},
                 {"wgmma 1 group, splits 4", &LaunchW2A8With<1, 0, 0, 0, 0, 4>},
                 {"wgmma 2 groups, splits 2", &LaunchW2A8With<2, 0, 0, 0, 0, 2>},
                 {"wgmma 2 groups, splits 8", &LaunchW2A8With<2, 0, 0, 0, 0, 8>},
                 {"wgmma 2 groups, splits 5", &LaunchW2A8With<2, 0, 0, 0, 0, 5>},
                 {"wgmma 1 group, splits 7", &LaunchW2A8With<1, 0, 0, 0, 0, 7>},
                 {"wgmma 64-token tiles", &LaunchW2A8With<1, 0, 0, 0, 0, 0, 64>},
                 {"wgmma 256-token tiles", &LaunchW2A8With<1, 0, 0, 0, 0, 0, 256>},
                 {"wgmma 256-token tiles, splits 4", &LaunchW2A8With<1, 0, 0, 0, 0, 4, 256>},
                 {"wgmma 256-token tiles, splits 8", &LaunchW2A8With<1, 0, 0, 0, 0, 8, 256>}},
                rng_);
}

// The decode kernel's persistent grid over several turns (N = 20000: 625 row groups, more
// than twice the CTAs that fit at once on a GPU of up to 150 SMs, so one group a set takes
// two units a slot; an odd count, so the last set of two groups has one) and a K whose 2049
// k blocks need two warps per row set to keep the int32 sums in range.
TEST_F(W2A8Test, DecodeGridsMatchCpu) {
  CheckVariants(Scheme::kW2A8, {{20000, 2048, 0}, {40, 2049 * 128, 0}}, {1, 3, 8, 16},
                {{"default", &LaunchW2A8With<0, 0>},
                 {"decode 1 unit", &LaunchW2A8With<0, 0, 1>},
                 {"decode 2 units", &LaunchW2A8With<0, 0, 2>},
                 {"decode 1 group", &LaunchW2A8With<0, 0, 0, 1>},
                 {"decode 2 groups", &LaunchW2A8With<0, 0, 0, 2>}},
                rng_);
}

// Every W4A16 path beyond the main sweep: token counts around the kernels' tile sizes
// through the default launch, the cluster kernels through every forced split count
// (which the default launch never picks for some M on an H200; 3 and 6 as well), and the
// wgmma kernel with each row-group count, alone and split 4 ways (two groups also 6, one
// 3 on 256-token tiles), also at the M the default launch gives the decode kernels;
// beyond 128 tokens with each token tile (the shapes' few row groups would take 128).
TEST_F(W4A16Test, EveryPathMatchesCpu) {
  DeviceInfo device;
  ASSERT_CUDA(CurrentDeviceInfo(&device));
  Variants variants = SplitVariants<W4A16Options, &LaunchW4A16>(device);
  variants.insert(variants.begin(), {"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>});
  variants.push_back({"wgmma 1 group", &LaunchW4A16Wgmma<1, 0>});
  variants.push_back({"wgmma 2 groups", &LaunchW4A16Wgmma<2, 0>});
  variants.push_back({"wgmma 1 group, 64-token tiles", &LaunchW4A16Wgmma<1, 0, 64>});
  variants.push_back({"wgmma 1 group, 256-token tiles", &LaunchW4A16Wgmma<1, 0, 256>});
  if (device.clusters()) {
    variants.push_back({"wgmma 1 group, splits 4", &LaunchW4A16Wgmma<1, 4>});
    variants.push_back({"wgmma 2 groups, splits 4", &LaunchW4A16Wgmma<2, 4>});
    variants.push_back({"wgmma 1 group, splits 4, 256-token tiles", &LaunchW4A16Wgmma<1, 4, 256>});
    variants.push_back({"wgmma 2 groups, splits 6", &LaunchW4A16Wgmma<2, 6>});
    variants.push_back({"splits 3", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 3>});
    variants.push_back({"splits 6", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 6>});
    variants.push_back({"wgmma 1 group, splits 3, 256-token tiles", &LaunchW4A16Wgmma<1, 3, 256>});
  }
  variants.push_back({"decode 1 strip", &LaunchW4A16DecodeStrips<1>});
  variants.push_back({"decode 2 strips", &LaunchW4A16DecodeStrips<2>});
  CheckVariants(Scheme::kW4A16, {{1000, 2048, kW4GroupSize}, {300, 1152, 0}},
                {1, 5, 17, 24, 32, 40, 100, 128, 129, 300}, variants, rng_);
}

// Codes of -8 and scales of either sign (FullRangeInt4Weight) through the default launch
// at the token counts that pick each of its kernels and through the decode and wgmma
// kernels forced. The tolerance follows each output's row (Check's `row_norms`): the
// rows' scales span 10x, and the kernels that hold the scaled weights in 16 bits round
// each row relative to itself (against the whole output's rms, the largest rows' bf16
// roundings reached 1.06 of the tolerance in one output of 4800 on an H100, decode 1
// strip at 16 tokens; a float model of that rounding put them at up to 1.0 of it, and at
// 0.69 against each row's norm).
TEST_F(W4A16Test, FullCodeRangeMatchesCpu) {
  const Variants variants = {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>},
                             {"wgmma 1 group", &LaunchW4A16Wgmma<1, 0>},
                             {"wgmma 2 groups", &LaunchW4A16Wgmma<2, 0>},
                             {"wgmma 1 group, 256-token tiles", &LaunchW4A16Wgmma<1, 0, 256>},
                             {"decode 1 strip", &LaunchW4A16DecodeStrips<1>},
                             {"decode 2 strips", &LaunchW4A16DecodeStrips<2>}};
  for (const WeightShape& shape :
       {WeightShape{1000, 2048, kW4GroupSize}, WeightShape{300, 1152, 0}}) {
    CheckVariantsPerRow(FullRangeInt4Weight(Scheme::kW4A16, shape, rng_), variants, rng_);
    if (HasFatalFailure()) return;
  }
}

void W4A16Test::CheckEveryPath(std::initializer_list<WeightShape> shapes, const WeightShape& large,
                               std::initializer_list<int64_t> large_rows) {
  DeviceInfo device;
  ASSERT_CUDA(CurrentDeviceInfo(&device));
  Variants variants = {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>},
                       {"wgmma 1 group", &LaunchW4A16Wgmma<1, 0>},
                       {"wgmma 2 groups, 256-token tiles", &LaunchW4A16Wgmma<2, 0, 256>},
                       {"decode 1 strip", &LaunchW4A16DecodeStrips<1>},
                       {"decode 2 strips", &LaunchW4A16DecodeStrips<2>}};
  if (device.clusters())
    variants.push_back({"splits 2", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 2>});
  for (const WeightShape& shape : shapes) {
    const Weight weight = FullRangeInt4Weight(Scheme::kW4A16, shape, rng_);
    CheckVariantsPerRow(weight, variants, rng_);
    if (HasFatalFailure()) return;
    const std::vector<double> row_norms = RowNorms(weight);
    GpuWeight gpu(*FindKernel(Scheme::kW4A16), weight);
    ASSERT_TRUE(gpu.ok());
    for (const auto& [label, launch] : variants) {
      SCOPED_TRACE(label);
      gpu.Check(DType::kF16, DType::kF16, 3, rng_, launch, DType::kBF16, &row_norms);
      gpu.Check(DType::kBF16, DType::kBF16, 70, rng_, launch, DType::kF32, &row_norms);
      if (HasFatalFailure()) return;
    }
  }
  const Weight weight = FullRangeInt4Weight(Scheme::kW4A16, large, rng_);
  const std::vector<double> row_norms = RowNorms(weight);
  GpuWeight gpu(*FindKernel(Scheme::kW4A16), weight);
  ASSERT_TRUE(gpu.ok());
  for (int64_t m : large_rows) {
    gpu.Check(DType::kF16, DType::kF16, m, rng_, nullptr, std::nullopt, &row_norms);
    if (HasFatalFailure()) return;
  }
}

// Zero points (WeightShape::zero_points: their term, w4a16_zero_points.h, computed ahead
// of every kernel as its residual) over all of [-8, 8] with codes over all of [-8, 7],
// through each kernel the launch picks or is forced to, with and without a residual of
// the caller's (which the term adds), and on a 4096-class layer at the decode sizes.
TEST_F(W4A16Test, ZeroPointsMatchCpu) {
  CheckEveryPath({WeightShape{1000, 2048, kW4GroupSize, true}, WeightShape{300, 1152, 0, true}},
                 {4096, 4096, kW4GroupSize, true}, {1, 4, 16});
}

// Zero points in the decode kernels' dequantization (their zero biases, w4a16_layout.h),
// over all of [-8, 8], in every grid and tile of the decode kernels: the two-strip tiles
// forced on and off the stream-K grid and in clusters of 2 and 4, one strip (one turn,
// and the deep tile where the sets leave SMs idle), the wide 16-warp CTAs on whole sets
// and stream-K, and four token tiles at 17-32 tokens (or the wgmma GEMM, which takes
// them too, where the launch gives it those tokens: N = 9000); on 563 strips of K = 1024
// (several turns), 250 of K = 1152 with per-row scales and zero points, 63 of K = 4224 (33
// chunks: the early-activation stream-K tile) and 19 of K = 8192 (clusters by default).
TEST_F(W4A16Test, ZeroPointsInEveryDecodeGrid) {
  DeviceInfo device;
  ASSERT_CUDA(CurrentDeviceInfo(&device));
  constexpr auto kStream = &W4A16Options::decode_stream;
  constexpr auto kWarps = &W4A16Options::decode_warps;
  Variants variants = {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>},
                       {"stream", &LaunchWith<W4A16Options, &LaunchW4A16, kStream, 2>},
                       {"no stream", &LaunchWith<W4A16Options, &LaunchW4A16, kStream, 1>},
                       {"decode 1 strip", &LaunchW4A16DecodeStrips<1>},
                       {"decode 2 strips", &LaunchW4A16DecodeStrips<2>},
                       {"16 warps", &LaunchWith<W4A16Options, &LaunchW4A16, kWarps, 16>},
                       {"16 warps, stream", &LaunchW4A16WideStream}};
  if (device.clusters()) {
    constexpr auto kCluster = &W4A16Options::decode_cluster;
    variants.push_back({"cluster 2", &LaunchWith<W4A16Options, &LaunchW4A16, kCluster, 2>});
    variants.push_back({"cluster 4", &LaunchWith<W4A16Options, &LaunchW4A16, kCluster, 4>});
  }
  for (const WeightShape& shape :
       {WeightShape{9000, 1024, kW4GroupSize, true}, WeightShape{4000, 1152, 0, true},
        WeightShape{1000, 4224, kW4GroupSize, true}, WeightShape{300, 8192, kW4GroupSize, true}}) {
    SCOPED_TRACE(shape.n);
    CheckVariantsPerRow(FullRangeInt4Weight(Scheme::kW4A16, shape, rng_), variants, rng_,
                        {1, 5, 8, 9, 16, 17, 32});
    if (HasFatalFailure()) return;
  }
}

// Weights in activation order (WeightShape::act_order: their inputs gathered ahead of the
// matmul, w4a16_act_order.h), with and without zero points, through every path against the
// CPU kernel, whose reference gathers the same way (kernels/reference.cc checks the meaning).
TEST_F(W4A16Test, ActOrderMatchesCpu) {
  CheckEveryPath({WeightShape{1000, 2048, kW4GroupSize, false, true},
                  WeightShape{300, 1152, kW4GroupSize, true, true}},
                 {4096, 4096, kW4GroupSize, false, true}, {1, 4, 16, 256});
}

// Narrow weights of long K, which the default launch gives the wgmma GEMM on two groups a
// CTA at 17-32 tokens rather than the decode kernel (W4A16GemmBeatsDecode), around that
// range.
TEST_F(W4A16Test, NarrowLongWeightsMatchCpuAt17To32Tokens) {
  CheckVariants(Scheme::kW4A16, {{264, 8192, kW4GroupSize}}, {16, 17, 24, 32, 33},
                {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>}}, rng_);
}

// The wgmma GEMM's fp16 dequantization on its gemm scales (w4a16_layout.h: each row's
// scales times a power of two of its own, its sums times the inverse) where the scales
// span 2^15 within every row (the smallest far below the 2^-8 of the row's largest under
// which the scaled bias rounds), rows of three magnitudes (three exponents), a row of
// zeros and a row whose last group alone is large (the others' scales subnormal fp16),
// 8 rows of padding; through the default launch and the wgmma kernel, against the CPU.
// fp16 activations only: bf16 dequantizes on the scales themselves (EveryPathMatchesCpu),
// and its weights rounded to 8 bits put one output in 10^5 of this mix of row magnitudes
// at 1.0001 of its tolerance on the H200 (session 50).
TEST_F(W4A16Test, WideScaleRangesMatchCpu) {
  const WeightShape shape{520, 2048, kW4GroupSize};
  std::vector<float> w = RandomNormal(rng_, shape.n * shape.k, 1.0f);
  for (int64_t n = 0; n < shape.n; ++n) {
    for (int64_t k = 0; k < shape.k; ++k) {
      const int group = static_cast<int>(k / kW4GroupSize);
      float& v = w[n * shape.k + k];
      if (n == 7) {
        v = 0.0f;
      } else if (n == 9) {
        v *= group == 15 ? 1.0f : 0x1p-14f;
      } else {
        v *= std::ldexp(1.0f, static_cast<int>(n % 3) - 1 - group);
      }
    }
  }
  const Weight weight = QuantizedWeight(Scheme::kW4A16, shape, w);
  GpuWeight gpu(*FindKernel(Scheme::kW4A16), weight);
  ASSERT_TRUE(gpu.ok());
  // Rows of 2^-1 to 2^1 (and one near 2^-14): each output's tolerance follows its row's
  // size. Against the whole output's rms, the largest rows' fp16 rounding reached 1.0007
  // of the tolerance in one output of 133120 on the H200 (session 61, wgmma 256-token
  // tiles at M = 256): those rows' outputs are 1.5 times the rms in size, and so are
  // their errors.
  std::vector<double> row_norms(shape.n);
  for (int64_t n = 0; n < shape.n; ++n) {
    double sq = 0.0;
    for (int64_t k = 0; k < shape.k; ++k) sq += double{w[n * shape.k + k]} * w[n * shape.k + k];
    row_norms[n] = std::sqrt(sq);
  }
  const Variants variants = {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>},
                             {"wgmma 1 group", &LaunchW4A16Wgmma<1, 0>},
                             {"wgmma 2 groups", &LaunchW4A16Wgmma<2, 0>},
                             {"wgmma 1 group, 256-token tiles", &LaunchW4A16Wgmma<1, 0, 256>}};
  for (const auto& [label, launch] : variants) {
    SCOPED_TRACE(label);
    for (int64_t m : {1, 17, 64, 256}) {
      gpu.Check(DType::kF16, DType::kF32, m, rng_, launch, std::nullopt, &row_norms);
      gpu.Check(DType::kF16, DType::kF16, m, rng_, launch, std::nullopt, &row_norms);
      if (HasFatalFailure()) return;
    }
  }
}

// The two-strip decode kernel's persistent grid over more than one turn (282 row sets
// of two strips with 8 warps each: more CTAs than fit at once on a GPU of up to 140 SMs),
// where each CTA's late refills cross from one row set to the next, with one token tile
// and with two (DecodeTile::kTurns).
TEST_F(W4A16Test, DecodeTurnsMatchCpu) {
  CheckVariants(Scheme::kW4A16, {{9000, 1024, kW4GroupSize}, {9000, 1024, 0}}, {1, 5, 9, 16},
                {{"default", &LaunchWithSplits<W4A16Options, &LaunchW4A16, 0>},
                 {"decode 1 strip", &LaunchW4A16DecodeStrips<1>},
                 {"decode 2 strips", &LaunchW4A16DecodeStrips<2>}},
                rng_);
}

// The default launch, and the decode kernels' stream-K grid (decode_stream.cuh) forced on
// (decode_stream 2) and off (1).
template <typename Options, cudaError_t (*kLaunch)(const GemmArgs&, const Options&)>
Variants StreamVariants() {
  constexpr auto kStream = &Options::decode_stream;
  return {{"default", &LaunchWith<Options, kLaunch, kStream, 0>},
          {"stream", &LaunchWith<Options, kLaunch, kStream, 2>},
          {"no stream", &LaunchWith<Options, kLaunch, kStream, 1>}};
}

// The W4A16 decode kernel on its wide CTAs (w4a16_decode.cuh kWideWarps: one strip a set,
// 16 warps on it, the chunk's scale applied in 16 bits) over both token tiles, on the
// grid of whole sets and on the stream-K grid, against 8 warps forced: 563 strips (the
// last partial; more than one turn of CTAs on a GPU of up to 140 SMs) with K = 1024 (8
// chunks: half of the warps have none); 250 strips of K = 14336 (112 chunks, 7 a warp)
// with per-row scales; 63 strips of K = 384 (3 chunks: most warps have none).
TEST_F(W4A16Test, WideDecodeMatchesCpu) {
  constexpr auto kWarps = &W4A16Options::decode_warps;
  const Variants variants = {{"8 warps", &LaunchWith<W4A16Options, &LaunchW4A16, kWarps, 8>},
                             {"16 warps", &LaunchWith<W4A16Options, &LaunchW4A16, kWarps, 16>},
                             {"16 warps, stream", &LaunchW4A16WideStream}};
  CheckVariants(Scheme::kW4A16,
                {{9000, 1024, kW4GroupSize}, {4000, 14336, 0}, {1000, 384, kW4GroupSize}},
                {1, 5, 8, 9, 16}, variants, rng_);
}

// The decode kernel's stream-K grid, forced on and off, and as the default launch takes
// it on a GPU of up to 140 SMs: where the row sets outnumber the two-strip CTAs that fit
// (282 sets for N = 9000, the last one partial; 625 for N = 20000, two to three a CTA)
// and, at M <= 8, where each CTA has one (157 for N = 5000) or where clusters of two
// would give each warp less than 12 KB (63 sets of K = 6912, 6.75 KB; "no stream" takes
// the clusters there; W4A16StreamBeatsClusters). K = 1024 splits a set
// between two CTAs at any chunk; K = 384 and 256 leave most warps of a CTA's part of a set
// one chunk or none (a CTA's range is a little over one set); K = 4224 (33 chunks, more
// than two rounds a warp) takes the two-token-tile instance that loads the activations
// early (DecodeTile::kEarlyX), forced on 32 sets. Every launch must also leave
// GemmArgs::sync zero (GpuWeight::Check).
TEST_F(W4A16Test, DecodeStreamMatchesCpu) {
  CheckVariants(Scheme::kW4A16,
                {{9000, 1024, kW4GroupSize},
                 {9000, 384, 0},
                 {8704, 256, kW4GroupSize},
                 {20000, 640, kW4GroupSize},
                 {5000, 1152, kW4GroupSize},
                 {1000, 4224, kW4GroupSize},
                 {2000, 6912, kW4GroupSize}},
                {1, 5, 8, 9, 16}, StreamVariants<W4A16Options, &LaunchW4A16>(), rng_);
}

// The same for W2A8 (282, 625 and 157 row groups; 625 take two units a slot at M <= 8,
// K = 640 an odd count of blocks), also with row sets of two groups (up to 8 tokens; 625
// and 157 leave the last set one group). The default launch takes it on the first four at
// 9-16 tokens (their K is too short for it at M <= 8).
TEST_F(W2A8Test, DecodeStreamMatchesCpu) {
  Variants variants = StreamVariants<W2A8Options, &LaunchW2A8>();
  variants.push_back({"2 groups, stream", &LaunchW2A8With<0, 0, 0, 2, 2>});
  variants.push_back({"2 groups, no stream", &LaunchW2A8With<0, 0, 0, 2, 1>});
  CheckVariants(Scheme::kW2A8,
                {{9000, 1024, 0}, {9000, 384, 0}, {8704, 256, 0}, {20000, 640, 0}, {5000, 1152, 0}},
                {1, 5, 8, 9, 16}, variants, rng_);
}

// The same for W8A16's stream-K grid of 16-warp CTAs (two row tiles a warp, both token
// tiles): 282, 272 and 625 row-tile pairs, which the default launch takes it on where they
// outnumber the 16-warp CTAs that fit (264 on the H200's 132 SMs; from 9 tokens only up to
// twice as many, so not 625), and 157, one set a CTA, forced. K = 1024 splits a set
// between two CTAs at granules of 16 chunks; K = 384, 640 and 1152 cut in granules of 4;
// K = 384 and 256 leave most of a part's 16 warps one chunk or none.
TEST_F(W8A16Test, DecodeStreamMatchesCpu) {
  CheckVariants(Scheme::kW8A16,
                {{9000, 1024, 0}, {9000, 384, 0}, {8704, 256, 0}, {20000, 640, 0}, {5000, 1152, 0}},
                {1, 5, 8, 9, 16}, StreamVariants<W8A16Options, &LaunchW8A16>(), rng_);
}

// The default launch and, where the device has clusters, clusters of 2 and 4 CTAs forced
// to share each row set of the decode kernels (decode_split.cuh).
template <typename Options, cudaError_t (*kLaunch)(const GemmArgs&, const Options&)>
Variants ClusterVariants() {
  DeviceInfo device;
  EXPECT_EQ(CurrentDeviceInfo(&device), cudaSuccess);
  constexpr auto kCluster = &Options::decode_cluster;
  Variants variants = {{"default", &LaunchWith<Options, kLaunch, kCluster, 0>}};
  if (device.clusters()) {
    variants.push_back({"cluster 2", &LaunchWith<Options, kLaunch, kCluster, 2>});
    variants.push_back({"cluster 4", &LaunchWith<Options, kLaunch, kCluster, 4>});
  }
  return variants;
}

// The decode kernels with clusters sharing the row sets, over both token tiles: a narrow
// N with a long K, where the default launch takes clusters (32 two-strip W4A16 sets, from
// 9 tokens: up to 8 the stream-K grid, as a cluster's warps would have 8 KB each; 32
// W2A8 row groups of K = 16384; 32 W8A16 pairs whose K of 16384 only a cluster brings
// within the decode kernel's reach, which the default launch gives the tile kernel); few chunks a
// CTA (K = 1152 / 1088: most warps of a cluster of 4 have one chunk or none, and the last set is
// partial); and forced clusters on grids of several turns (N = 9000, 4000 and, from 9 tokens,
// 20000), whose clusters pass the reduction's barriers once per row set.
TEST_F(W4A16Test, DecodeClustersMatchCpu) {
  CheckVariants(Scheme::kW4A16,
                {{1000, 8192, kW4GroupSize}, {300, 1152, 0}, {9000, 1024, kW4GroupSize}},
                {1, 5, 9, 16}, ClusterVariants<W4A16Options, &LaunchW4A16>(), rng_);
}

// The default launch up to 16 tokens where the row sets fit the 16-warp CTAs but their K
// (16512) is longer than one CTA takes: the stream-K grid (W8A16StreamPays' long_k), 135
// sets, the last one of a single row tile, over both token tiles.
TEST_F(W8A16Test, DecodeStreamForLongKMatchesCpu) {
  CheckVariants(Scheme::kW8A16, {{4300, 16512, 0}}, {1, 8, 9, 16},
                {{"default", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 0>}}, rng_);
}

// The default launch up to 16 tokens where the tile kernel takes over from the decode kernel
// (TileBeatsDecode: K of 8192, 94 row sets), over both token tiles.
TEST_F(W8A16Test, TileOverDecodeMatchesCpu) {
  CheckVariants(Scheme::kW8A16, {{3000, 8192, 0}}, {1, 3, 8, 9, 16},
                {{"default", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 0>}}, rng_);
}

// The default launch at 9-16 tokens on the widths where the wgmma GEMM takes over from the
// decode kernels (W8A16GemmBeatsDecode: more two-row-tile sets than 16-warp CTAs, and 128-row
// groups filling 3/4 of the SMs or more, one a CTA, or with K >= 8192 two a CTA up to 4/3 of
// the SMs): 12600 (99 groups on the H200's 132 SMs, the last one partial) and 16896 (132),
// the one-group range's ends; 17000 (133: the last CTA one partial group) and 22500 (176,
// the last partial) with K = 8192, the two-group range's; 17000 with K = 1024, which keeps
// the decode kernels, as does K = 576, which the GEMM cannot take (K % 128). 8 and 17
// tokens: the neighbours.
TEST_F(W8A16Test, GemmOverDecodeMatchesCpu) {
  const Variants variants = {{"default", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 0>}};
  CheckVariants(Scheme::kW8A16,
                {{12600, 1024, 0}, {16896, 256, 0}, {17000, 1024, 0}, {12600, 576, 0}},
                {8, 9, 13, 16, 17}, variants, rng_);
  CheckVariants(Scheme::kW8A16, {{17000, 8192, 0}, {22500, 8192, 0}}, {9, 16}, variants, rng_);
}

// The W8A16 decode kernel with its warps a CTA forced (8, or 16 for the wide CTAs; 0: the
// launch's choice), and its row tiles a warp up to 8 tokens (1 or 2; 0: the launch's).
template <int kWarps, int kRows = 0>
cudaError_t LaunchW8A16DecodeWarps(const GemmArgs& args) {
  W8A16Options options;
  options.decode_warps = kWarps;
  options.decode_rows = kRows;
  return LaunchW8A16(args, options);
}

// The decode kernel's two-row-tile tiles with all their warps on one row set (kWideWarps:
// 16; at most two CTAs an SM, one set a CTA), by default and forced, and with 8 forced,
// over both token tiles: 256 and 188 sets (the last of N = 6000's 375 row tiles alone in
// its set), K = 2048 (64 chunks: 4 a warp) and K = 1088 (34 chunks: 3 a warp, so the last
// 4 warps have none).
TEST_F(W8A16Test, WideDecodeMatchesCpu) {
  CheckVariants(Scheme::kW8A16, {{8192, 2048, 0}, {6000, 1088, 0}}, {1, 3, 8, 9, 16},
                {{"default", &LaunchW8A16DecodeWarps<0>},
                 {"8 warps", &LaunchW8A16DecodeWarps<8>},
                 {"16 warps", &LaunchW8A16DecodeWarps<16>}},
                rng_);
}

// The 16-warp CTAs where the two-row-tile sets of one token tile would need clusters of
// two: 250 row tiles for N = 3990 (the last one partial) with K = 14336, taken by default,
// as one-row-tile sets (28 chunks a warp) or two-row-tile sets in clusters of two 16-warp
// CTAs (14 chunks a warp), against 8 warps forced (clusters of two 8-warp CTAs); and 63
// row tiles with K = 1088 (no clusters: 34 chunks, 3 a warp, the last 4 warps none).
TEST_F(W8A16Test, WideDecodeForClustersMatchesCpu) {
  const Variants variants = {{"default", &LaunchW8A16DecodeWarps<0>},
                             {"8 warps", &LaunchW8A16DecodeWarps<8>},
                             {"1 row tile, 16 warps", &LaunchW8A16DecodeWarps<16, 1>},
                             {"2 row tiles, 16 warps", &LaunchW8A16DecodeWarps<16, 2>}};
  CheckVariants(Scheme::kW8A16, {{3990, 14336, 0}}, {1, 8}, variants, rng_);
  CheckVariants(Scheme::kW8A16, {{1000, 1088, 0}}, {1, 3, 8, 9}, variants, rng_);
}

TEST_F(W8A16Test, DecodeClustersMatchCpu) {
  CheckVariants(Scheme::kW8A16, {{1000, 16384, 0}, {300, 1088, 0}, {4000, 1024, 0}}, {1, 5, 9, 16},
                ClusterVariants<W8A16Options, &LaunchW8A16>(), rng_);
}

// W2A8's decode clusters as W4A16's above, and K = 10240 (80 KB of codes a row group), which
// the default launch shares between a cluster of two at kW2A8MinClusterWarpBytes a warp.
TEST_F(W2A8Test, DecodeClustersMatchCpu) {
  CheckVariants(Scheme::kW2A8,
                {{1000, 16384, 0}, {1000, 10240, 0}, {300, 1152, 0}, {20000, 1024, 0}},
                {1, 5, 9, 16}, ClusterVariants<W2A8Options, &LaunchW2A8>(), rng_);
}

// The largest |act'(v)| over |v - g| <= e: SiLU's slope stays within 1.1, GELU's (tanh)
// within 1.13, ReLU's 1; squared ReLU's is 2 max(v, 0).
double ActivationSlope(Activation act, double g, double e) {
  switch (act) {
    case Activation::kSilu:
      return 1.1;
    case Activation::kGeluTanh:
      return 1.13;
    case Activation::kRelu:
      return 1.0;
    case Activation::kReluSquared:
      return 2.0 * std::max(g + e, 0.0);
    default:
      return 1.0;
  }
}

// A gated launch (KernelOps::launch_glu: gate, up and act(gate) * up at once) of `scheme`
// against CpuMatMul of each weight and the product in double, for every activation. Each
// matmul carries the tolerance of GpuWeight::Check (c * its rms, e_g and e_u); through
// act(g) * u that is slope * e_g * |u| + |act(g)| * e_u + slope * e_g * e_u (slope:
// ActivationSlope over g +- e_g), plus the output dtype's rounding. `weight` makes each
// gate and up weight of a shape; M takes every value of `ms`.
template <typename MakeWeight>
void CheckGluMatchesCpu(Scheme scheme, const std::vector<WeightShape>& shapes,
                        std::initializer_list<int64_t> ms, MakeWeight weight, std::mt19937_64& rng,
                        cudaStream_t stream) {
  const KernelOps& ops = *FindKernel(scheme);
  ASSERT_NE(ops.launch_glu, nullptr);
  for (const WeightShape& shape : shapes) {
    const Weight gate = weight(shape);
    const Weight up = weight(shape);
    const std::unique_ptr<DeviceBuffer> dgate = UploadLayout(ops, gate);
    const std::unique_ptr<DeviceBuffer> dup = UploadLayout(ops, up);
    ASSERT_TRUE(dgate != nullptr && dup != nullptr);
    for (int64_t m : ms) {
      ASSERT_LE(m, ops.glu_max_m);
      for (DType x_dtype : {DType::kF16, DType::kBF16}) {
        const Rounded x = RoundTo(x_dtype, RandomNormal(rng, m * shape.k, 1.0f));
        std::vector<float> g(m * shape.n), u(m * shape.n);
        CpuMatMul(gate.packed(), x.values.data(), m, g.data(), 0);
        CpuMatMul(up.packed(), x.values.data(), m, u.data(), 0);
        double g2 = 0.0, u2 = 0.0;
        for (size_t i = 0; i < g.size(); ++i) {
          g2 += static_cast<double>(g[i]) * g[i];
          u2 += static_cast<double>(u[i]) * u[i];
        }
        const double c = x_dtype == DType::kF16 ? 2e-3 : 1.5e-2;
        const double e_g = c * std::sqrt(g2 / g.size());
        const double e_u = c * std::sqrt(u2 / u.size());
        ASSERT_GT(e_g * e_u, 0.0);
        DeviceBuffer dx(x.bytes.size());
        ASSERT_TRUE(dx.ok());
        ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
        for (DType y_dtype : {x_dtype, DType::kF32}) {
          for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu,
                                 Activation::kReluSquared}) {
            SCOPED_TRACE(::testing::Message()
                         << SchemeName(scheme) << " n=" << shape.n << " k=" << shape.k
                         << " g=" << shape.group_size << (shape.zero_points ? " zero points" : "")
                         << " m=" << m << " x=" << DTypeName(x_dtype) << " y=" << DTypeName(y_dtype)
                         << " act=" << ActivationName(act));
            DeviceBuffer dy(m * shape.n * DTypeSize(y_dtype));
            ASSERT_TRUE(dy.ok());
            ASSERT_CUDA(dy.Poison());
            const GemmArgs args = LaunchArgs(dgate->get(), shape, x_dtype, dx.get(), m, y_dtype,
                                             dy.get(), nullptr, stream);
            ASSERT_CUDA(ops.launch_glu(args, dup->get(), act));
            ASSERT_CUDA(cudaStreamSynchronize(stream));
            std::vector<float> got = Download(dy, y_dtype, m * shape.n);
            auto want = [&](size_t i) { return ReferenceActivation(act, g[i]) * u[i]; };
            auto tol = [&](size_t i, double w) {
              const double slope = ActivationSlope(act, std::fabs(g[i]), e_g);
              return slope * e_g * (std::fabs(u[i]) + e_u) +
                     std::fabs(ReferenceActivation(act, g[i])) * e_u +
                     OutputRoundoff(y_dtype) * std::fabs(w) + 1e-30;
            };
            // Squared ReLU's products can pass fp16's range: where the tolerance band
            // reaches 65520 (from which fp16 rounds to infinity), infinity of the
            // product's sign counts as a match (beyond the band's reach it fails, and a
            // band wholly past 65520 leaves no finite fp16 within it).
            for (size_t i = 0; i < got.size(); ++i) {
              const double w = want(i);
              if (y_dtype == DType::kF16 && std::fabs(w) + tol(i, w) >= 65520.0 &&
                  std::isinf(got[i]) && (got[i] > 0) == (w > 0)) {
                got[i] = static_cast<float>(w);
              }
            }
            ExpectWithin(got, shape.n, want, tol);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }

  // Beyond the decode sizes, an up weight the kernel cannot read, a residual: refused,
  // nothing launched.
  GemmArgs args;
  args.shape = {128, 128, scheme == Scheme::kW4A16 ? kW4GroupSize : 0};
  args.m = ops.glu_max_m + 1;
  alignas(16) int dummy[8] = {};
  args.weight = args.x = args.y = dummy;
  EXPECT_EQ(ops.launch_glu(args, dummy, Activation::kSilu), cudaErrorInvalidValue);
  args.m = 1;
  EXPECT_EQ(ops.launch_glu(args, nullptr, Activation::kSilu), cudaErrorInvalidValue);
  EXPECT_EQ(ops.launch_glu(args, reinterpret_cast<const char*>(dummy) + 4, Activation::kSilu),
            cudaErrorInvalidValue);
  args.residual = dummy;
  EXPECT_EQ(ops.launch_glu(args, dummy, Activation::kSilu), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// W4A16's gated launch. Shapes: a single row, a partial strip and group (N = 200),
// per-row scales, a 4096-class layer, a grid of several turns (N = 9000); with zero points
// over all of [-8, 8] (FullRangeInt4Weight), per group and per row; M over both token
// tiles of the decode kernel.
TEST_F(W4A16Test, GluMatchesCpu) {
  CheckGluMatchesCpu(
      Scheme::kW4A16,
      {{1, 128, kW4GroupSize},
       {200, 384, kW4GroupSize},
       {1000, 1024, 0},
       {4096, 4096, 128},
       {9000, 1024, 128},
       {200, 384, kW4GroupSize, true},
       {1000, 1024, 0, true},
       {9000, 1024, 128, true}},
      {1, 2, 3, 7, 8, 9, 16},
      [&](const WeightShape& shape) {
        return shape.zero_points ? FullRangeInt4Weight(Scheme::kW4A16, shape, rng_)
                                 : RandomWeight(Scheme::kW4A16, shape, rng_);
      },
      rng_, stream_);
}

// W8A16's gated launch: a single row, a partial row tile (N = 200), an odd tile count
// (N = 1000: 63 tiles), a 4096-class layer, a grid of several turns (N = 9000) and K =
// 8192 (256 chunks a set); M over one token tile and two (a set each).
TEST_F(W8A16Test, GluMatchesCpu) {
  CheckGluMatchesCpu(
      Scheme::kW8A16,
      {{1, 64, 0},
       {200, 384, 0},
       {1000, 1024, 0},
       {4096, 4096, 0},
       {9000, 1024, 0},
       {512, 8192, 0}},
      {1, 2, 3, 7, 8, 9, 13, 16},
      [&](const WeightShape& shape) { return RandomWeight(Scheme::kW8A16, shape, rng_); }, rng_,
      stream_);
}

// GemmArgs::residual in each dtype through `scheme`'s launch for each weight of `shapes`, at
// M = 1, 5, 12, 40 and 300: the default launch, then each of `forced(m)` (launchers that
// force a path at that M). Tolerance: GpuWeight::Check's, the residual exact until y's
// rounding.
void CheckAddsTheResidual(Scheme scheme, const std::vector<WeightShape>& shapes,
                          const std::function<Variants(int64_t)>& forced, std::mt19937_64& rng) {
  const KernelOps& ops = *FindKernel(scheme);
  ASSERT_TRUE(ops.takes_residual);
  for (const WeightShape& shape : shapes) {
    const Weight w = RandomWeight(scheme, shape, rng);
    GpuWeight gpu(ops, w);
    ASSERT_TRUE(gpu.ok());
    for (int64_t m : {1, 5, 12, 40, 300}) {
      const Variants variants = forced(m);
      for (DType r_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const DType x_dtype = r_dtype == DType::kBF16 ? DType::kBF16 : DType::kF16;
        const DType y_dtype = r_dtype == DType::kF32 ? DType::kF16 : DType::kF32;
        gpu.Check(x_dtype, y_dtype, m, rng, nullptr, r_dtype);
        for (const auto& [name, launch] : variants) {
          SCOPED_TRACE(name);
          gpu.Check(x_dtype, y_dtype, m, rng, launch, r_dtype);
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// W4A16 adds the residual in fp32 before rounding y, on every path: M = 1 and 5 (decode),
// 12 (decode, two token tiles), 40 and 300 (wgmma; 128-token tiles at 300), on rows that
// the epilogue stores four at a time (N = 200) and value by value (N = 1002's odd tokens
// and last rows).
TEST_F(W4A16Test, AddsTheResidual) {
  CheckAddsTheResidual(
      Scheme::kW4A16, {{200, 384, kW4GroupSize}, {1002, 1024, 0}},
      [](int64_t) { return Variants{}; }, rng_);
}

// W8A16 adds the residual on every path: the decode kernel (M = 1, 5, 12) on its 8-warp
// and 16-warp CTAs, in clusters and on its stream-K grid (forced); the tile kernel alone
// and with a K split over a cluster (M = 5, 40); the wgmma GEMM (M = 40, 300) and, where K
// % 128 != 0 (K = 1088), the tile kernel beyond 16 rows.
TEST_F(W8A16Test, AddsTheResidual) {
  DeviceInfo device;
  ASSERT_CUDA(CurrentDeviceInfo(&device));
  const bool clusters = device.clusters();
  CheckAddsTheResidual(
      Scheme::kW8A16, {{200, 384, 0}, {1002, 1024, 0}, {300, 1088, 0}},
      [clusters](int64_t m) {
        Variants v;
        if (m <= 12) {
          v.push_back({"8 warps", &LaunchW8A16DecodeWarps<8>});
          v.push_back({"16 warps", &LaunchW8A16DecodeWarps<16>});
          v.push_back({"stream-K",
                       &LaunchWith<W8A16Options, &LaunchW8A16, &W8A16Options::decode_stream, 2>});
          if (clusters) {
            v.push_back(
                {"clusters of 2",
                 &LaunchWith<W8A16Options, &LaunchW8A16, &W8A16Options::decode_cluster, 2>});
          }
        }
        if (m == 5 || m == 40) {
          v.push_back({"tile", &LaunchW8A16Tile});
          if (clusters) {
            v.push_back({"tile, splits 2", &LaunchWithSplits<W8A16Options, &LaunchW8A16, 2>});
          }
        }
        return v;
      },
      rng_);
}

// W2A8 adds the residual on every path: the decode kernel (M = 1, 5, 12; its stream-K grid
// forced too), the wgmma GEMM (M = 40, 300) and the mma.sync GEMM with a forced K split (M
// = 5, 40: its atomics and last-block store).
TEST_F(W2A8Test, AddsTheResidual) {
  CheckAddsTheResidual(
      Scheme::kW2A8, {{300, 2560, 0}, {1002, 1152, 0}},
      [](int64_t m) {
        Variants v;
        if (m <= 12) v.push_back({"stream-K", &LaunchW2A8With<0, 0, 0, 0, 2>});
        if (m == 5 || m == 40) v.push_back({"k split 3", &LaunchW2A8With<0, 3>});
        return v;
      },
      rng_);
}

// LaunchW2A8Glu (gate and up in one launch, act(gate) * up stored) against the two
// matmuls launched apart (the same int8 activations and int32 sums, so the same fp32 gate
// and up values) and act(gate) * up on the host: within y's rounding and, for the
// device's expf and tanhf, 1e-6 of each value and 1e-5 of the output's rms. Every activation, 1-16
// rows (one token tile, and two: a set each), each input dtype, fp16 and fp32 y, with and without
// an RMSNorm on x; N = 300 (a partial last row group) and BitNet b1.58 2B4T's 6912 x 2560; and the
// arguments it refuses.
TEST_F(W2A8Test, GluMatchesTheTwoMatmuls) {
  const KernelOps& ops = *FindKernel(Scheme::kW2A8);
  ASSERT_EQ(ops.launch_glu, &LaunchW2A8Glu);
  SyncWords sync;
  ASSERT_TRUE(sync.ok());
  for (const WeightShape& shape : std::vector<WeightShape>{{300, 2560, 0}, {6912, 2560, 0}}) {
    const Weight gate = RandomWeight(Scheme::kW2A8, shape, rng_);
    const Weight up = RandomWeight(Scheme::kW2A8, shape, rng_);
    const std::unique_ptr<DeviceBuffer> dg = UploadLayout(ops, gate);
    const std::unique_ptr<DeviceBuffer> du = UploadLayout(ops, up);
    ASSERT_TRUE(dg != nullptr && du != nullptr);
    const std::vector<float> norm = RandomNormal(rng_, shape.k, 1.0f);
    DeviceBuffer dnorm(shape.k * 4);
    ASSERT_TRUE(dnorm.ok());
    ASSERT_CUDA(cudaMemcpy(dnorm.get(), norm.data(), shape.k * 4, cudaMemcpyHostToDevice));
    for (int64_t m : {1, 3, 8, 9, 13, 16}) {
      for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (Activation act : {Activation::kReluSquared, Activation::kSilu, Activation::kGeluTanh,
                               Activation::kRelu}) {
          for (bool with_norm : {false, true}) {
            const DType y_dtype = act == Activation::kSilu ? DType::kF32 : DType::kF16;
            SCOPED_TRACE(::testing::Message()
                         << "n=" << shape.n << " m=" << m << " x=" << DTypeName(x_dtype)
                         << " act=" << ActivationName(act) << " norm=" << with_norm);
            const Rounded x = RoundTo(x_dtype, RandomNormal(rng_, m * shape.k, 1.5f));
            DeviceBuffer dx(x.bytes.size()), dy(m * shape.n * DTypeSize(y_dtype));
            DeviceBuffer dgate(m * shape.n * 4), dup(m * shape.n * 4);
            DeviceBuffer dws(ops.workspace_bytes(shape, m));
            ASSERT_TRUE(dx.ok() && dy.ok() && dgate.ok() && dup.ok() && dws.ok());
            ASSERT_CUDA(
                cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
            ASSERT_CUDA(dy.Poison());
            GemmArgs args = LaunchArgs(dg->get(), shape, x_dtype, dx.get(), m, y_dtype, dy.get(),
                                       dws.get(), stream_);
            args.sync = sync.get();
            if (with_norm) args.rms_norm = {static_cast<const float*>(dnorm.get()), 1e-5f};
            ASSERT_CUDA(LaunchW2A8Glu(args, du->get(), act));
            ASSERT_CUDA(cudaStreamSynchronize(stream_));
            const std::vector<float> got = Download(dy, y_dtype, m * shape.n);
            GemmArgs apart = args;
            apart.y_dtype = DType::kF32;
            apart.y = dgate.get();
            ASSERT_CUDA(ops.launch(apart));
            apart.weight = du->get();
            apart.y = dup.get();
            ASSERT_CUDA(ops.launch(apart));
            ASSERT_CUDA(cudaStreamSynchronize(stream_));
            EXPECT_TRUE(sync.LeftZero());
            const std::vector<float> g = Download(dgate, DType::kF32, m * shape.n);
            const std::vector<float> u = Download(dup, DType::kF32, m * shape.n);
            std::vector<double> want(g.size());
            double sum_sq = 0.0;
            for (size_t i = 0; i < g.size(); ++i) {
              want[i] = ReferenceActivation(act, g[i]) * u[i];
              sum_sq += want[i] * want[i];
            }
            const double rms = std::sqrt(sum_sq / static_cast<double>(want.size()));
            ASSERT_GT(rms, 0.0);
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
              ASSERT_NEAR(got[i], want[i],
                          (OutputRoundoff(y_dtype) + 1e-6) * std::fabs(want[i]) + 1e-5 * rms)
                  << "element " << i;
            }
          }
        }
      }
    }
    // Refused: more rows than two token tiles, no or a misaligned up weight, a residual.
    DeviceBuffer dx(17 * shape.k * 2), dy(17 * shape.n * 4), dws(ops.workspace_bytes(shape, 17));
    ASSERT_TRUE(dx.ok() && dy.ok() && dws.ok());
    GemmArgs args = LaunchArgs(dg->get(), shape, DType::kF16, dx.get(), 17, DType::kF32, dy.get(),
                               dws.get(), stream_);
    EXPECT_EQ(LaunchW2A8Glu(args, du->get(), Activation::kSilu), cudaErrorInvalidValue);
    args.m = 1;
    EXPECT_EQ(LaunchW2A8Glu(args, nullptr, Activation::kSilu), cudaErrorInvalidValue);
    EXPECT_EQ(LaunchW2A8Glu(args, static_cast<const char*>(du->get()) + 4, Activation::kSilu),
              cudaErrorInvalidValue);
    args.residual = dx.get();
    EXPECT_EQ(LaunchW2A8Glu(args, du->get(), Activation::kSilu), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// W2A8 with a DyT on its input (GemmArgs::dyt) gives exactly the bytes of the DyT kernel's
// fp32 output fed to W2A8: the prologue computes the same fp32 DyT values, so it quantizes
// them to the same int8 values, and the integer matmul is exact. Decode (stream-K: the
// launches have GemmArgs::sync) and row-group paths, every input dtype, with and without
// beta; and a DyT that is all zeros (gamma = 0, no beta) quantizes to zero rows: y = 0.
TEST_F(W2A8Test, DyTInputIsBitIdenticalToDyTThenMatMul) {
  Launchable w(rng_);
  ASSERT_TRUE(w.ok());
  const KernelOps& ops = w.ops;
  const WeightShape& shape = w.shape;
  ASSERT_TRUE(ops.takes_dyt);
  for (int64_t m : {1, 9, 40}) {
    for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int variant = 0; variant < 3; ++variant) {  // beta, no beta, gamma = 0 and no beta
        SCOPED_TRACE(::testing::Message()
                     << "m=" << m << " x=" << DTypeName(x_dtype) << " variant " << variant);
        const Rounded x = RoundTo(x_dtype, RandomNormal(rng_, m * shape.k, 1.5f));
        std::vector<float> gamma = RandomNormal(rng_, shape.k, 1.0f);
        if (variant == 2) std::fill(gamma.begin(), gamma.end(), 0.0f);
        const std::vector<float> beta = RandomNormal(rng_, shape.k, 0.1f);
        DeviceBuffer dx(x.bytes.size()), dg(shape.k * 4), db(shape.k * 4), dd(m * shape.k * 4);
        DeviceBuffer dy(m * shape.n * 4), dy2(m * shape.n * 4);
        DeviceBuffer dws(ops.workspace_bytes(shape, m));
        ASSERT_TRUE(dx.ok() && dg.ok() && db.ok() && dd.ok() && dy.ok() && dy2.ok() && dws.ok());
        ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
        ASSERT_CUDA(cudaMemcpy(dg.get(), gamma.data(), shape.k * 4, cudaMemcpyHostToDevice));
        ASSERT_CUDA(cudaMemcpy(db.get(), beta.data(), shape.k * 4, cudaMemcpyHostToDevice));
        ASSERT_CUDA(dy.Poison());
        ASSERT_CUDA(dy2.Poison());
        const float alpha = 0.8f;
        const float* d_beta = variant == 0 ? static_cast<const float*>(db.get()) : nullptr;
        const auto* d_gamma = static_cast<const float*>(dg.get());

        GemmArgs args = LaunchArgs(w.layout->get(), shape, x_dtype, dx.get(), m, DType::kF32,
                                   dy.get(), dws.get(), stream_);
        args.sync = w.sync.get();
        args.dyt = {alpha, d_gamma, d_beta};
        ASSERT_CUDA(ops.launch(args));
        ASSERT_CUDA(LaunchDyT(x_dtype, dx.get(), m, shape.k, alpha, d_gamma, d_beta, DType::kF32,
                              dd.get(), stream_));
        args.x_dtype = DType::kF32;
        args.x = dd.get();
        args.y = dy2.get();
        args.dyt = {};
        ASSERT_CUDA(ops.launch(args));
        ASSERT_CUDA(cudaStreamSynchronize(stream_));
        EXPECT_TRUE(w.sync.LeftZero());
        const std::vector<float> fused = Download(dy, DType::kF32, m * shape.n);
        const std::vector<float> unfused = Download(dy2, DType::kF32, m * shape.n);
        ASSERT_EQ(0, std::memcmp(fused.data(), unfused.data(), fused.size() * 4));
        for (float v : fused) {
          ASSERT_TRUE(std::isfinite(v));
          if (variant == 2) {
            ASSERT_EQ(v, 0.0f);
          }
        }
        if (variant != 2) {
          ASSERT_TRUE(std::any_of(fused.begin(), fused.end(), [](float v) { return v != 0.0f; }));
        }
      }
    }
  }
}

// W2A8 with an RMSNorm on its input (GemmArgs::rms_norm) quantizes weight * x and
// multiplies each row's activation scale by its norm scale 1 / sqrt(mean(x^2) + eps): so
// its result is that scale times W2A8 of the fp32 values weight * x (the same int8 rows;
// the two differ by the rounding of the products of scales, and of the norm scale summed
// in fp32 against float64 here: 1e-5 of the row's largest output). Decode (M <= 16,
// stream-K with GemmArgs::sync) and wgmma (M = 40) paths, every input dtype, a row of
// zeros (its output 0), and the arguments a launch refuses.
TEST_F(W2A8Test, RmsNormInputScalesTheRowsOfWeightTimesX) {
  Launchable w(rng_);
  ASSERT_TRUE(w.ok());
  const KernelOps& ops = w.ops;
  const WeightShape& shape = w.shape;
  ASSERT_TRUE(ops.takes_rms_norm);
  const float epsilon = 1e-5f;
  for (int64_t m : {1, 9, 40}) {
    for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m << " x=" << DTypeName(x_dtype));
      std::vector<float> values = RandomNormal(rng_, m * shape.k, 1.5f);
      if (m > 1) std::fill(values.begin() + shape.k, values.begin() + 2 * shape.k, 0.0f);
      const Rounded x = RoundTo(x_dtype, values);
      const std::vector<float> weight = RandomNormal(rng_, shape.k, 1.0f);
      std::vector<float> scaled(m * shape.k);  // weight * x in fp32, as the prologue has it
      std::vector<double> norm(m);
      for (int64_t i = 0; i < m; ++i) {
        double squares = 0.0;
        for (int64_t k = 0; k < shape.k; ++k) {
          const float v = x.values[i * shape.k + k];
          scaled[i * shape.k + k] = weight[k] * v;
          squares += double{v} * v;
        }
        norm[i] = 1.0 / std::sqrt(squares / static_cast<double>(shape.k) + epsilon);
      }
      DeviceBuffer dx(x.bytes.size()), dg(shape.k * 4), ds(scaled.size() * 4);
      DeviceBuffer dy(m * shape.n * 4), dy2(m * shape.n * 4);
      DeviceBuffer dws(ops.workspace_bytes(shape, m));
      ASSERT_TRUE(dx.ok() && dg.ok() && ds.ok() && dy.ok() && dy2.ok() && dws.ok());
      ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemcpy(dg.get(), weight.data(), shape.k * 4, cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemcpy(ds.get(), scaled.data(), scaled.size() * 4, cudaMemcpyHostToDevice));
      ASSERT_CUDA(dy.Poison());
      ASSERT_CUDA(dy2.Poison());

      GemmArgs args = LaunchArgs(w.layout->get(), shape, x_dtype, dx.get(), m, DType::kF32,
                                 dy.get(), dws.get(), stream_);
      args.sync = w.sync.get();
      args.rms_norm = {static_cast<const float*>(dg.get()), epsilon};
      ASSERT_CUDA(ops.launch(args));
      GemmArgs plain = args;
      plain.x_dtype = DType::kF32;
      plain.x = ds.get();
      plain.y = dy2.get();
      plain.rms_norm = {};
      ASSERT_CUDA(ops.launch(plain));
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      EXPECT_TRUE(w.sync.LeftZero());
      const std::vector<float> fused = Download(dy, DType::kF32, m * shape.n);
      const std::vector<float> unfused = Download(dy2, DType::kF32, m * shape.n);
      for (int64_t i = 0; i < m; ++i) {
        double row_max = 0.0;
        for (int64_t n = 0; n < shape.n; ++n) {
          row_max = std::max(row_max, std::fabs(norm[i] * unfused[i * shape.n + n]));
        }
        if (i == 1) {
          ASSERT_EQ(row_max, 0.0);
        } else {
          ASSERT_GT(row_max, 0.0);
        }
        for (int64_t n = 0; n < shape.n; ++n) {
          const float got = fused[i * shape.n + n];
          ASSERT_TRUE(std::isfinite(got)) << "row " << i << " column " << n;
          ASSERT_NEAR(got, norm[i] * unfused[i * shape.n + n], 1e-5 * row_max)
              << "row " << i << " column " << n;
        }
      }

      // Refused: a DyT beside it, an epsilon that is not positive, a weight off 16 bytes.
      GemmArgs both = args;
      both.dyt = {1.0f, static_cast<const float*>(dg.get()), nullptr};
      EXPECT_EQ(ops.launch(both), cudaErrorInvalidValue);
      GemmArgs no_epsilon = args;
      no_epsilon.rms_norm.epsilon = 0.0f;
      EXPECT_EQ(ops.launch(no_epsilon), cudaErrorInvalidValue);
      GemmArgs misaligned = args;
      misaligned.rms_norm.weight = static_cast<const float*>(dg.get()) + 1;
      EXPECT_EQ(ops.launch(misaligned), cudaErrorInvalidValue);
    }
  }
}

// The W2A8 prologue's int8 rows, scales and row sums (read back from the launch's
// workspace, w2a8_layout.h) are QuantizeRowsInt8's bit for bit: for random rows, for rows
// whose quotients x / s lie on or an ulp beside half-integers (where the prologue's
// multiply by 1 / s defers to the division), for a row of subnormals (an infinite 1 / s)
// and a zero row; fp32 input as it is, fp16 and bf16 after rounding.
TEST_F(W2A8Test, PrologueQuantizesBitForBitLikeTheCpu) {
  const KernelOps& ops = *FindKernel(Scheme::kW2A8);
  const WeightShape shape = {64, 1024, 0};
  const int64_t k = shape.k;
  const std::unique_ptr<DeviceBuffer> dw =
      UploadLayout(ops, RandomWeight(Scheme::kW2A8, shape, rng_));
  ASSERT_TRUE(dw != nullptr);
  std::vector<float> values = RandomNormal(rng_, 2 * k, 1.5f);
  std::uniform_int_distribution<int> half(-127, 126);
  for (float max_abs : {127.0f, 1.0f, 3.7f, 1e-3f}) {
    const float s = max_abs / 127.0f;
    for (int64_t c = 0; c < k; ++c) {
      const float t = (static_cast<float>(half(rng_)) + 0.5f) * s;
      const int64_t nudge = c % 3;  // on the rounded product, one ulp above, one below
      values.push_back(nudge == 0 ? t : std::nextafter(t, nudge == 1 ? INFINITY : -INFINITY));
    }
    values[values.size() - k] = max_abs;  // the row's maximum, so that its scale is s
  }
  for (int64_t c = 0; c < k; ++c) {
    values.push_back(std::ldexp(static_cast<float>(c % 2 == 0 ? 1 + c % 97 : -1 - c % 89), -140));
  }
  values.insert(values.end(), k, 0.0f);
  const int64_t m = static_cast<int64_t>(values.size()) / k;
  const w2a8::Workspace layout(w2a8::Geometry(shape.n, shape.k), m);
  for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(x_dtype));
    const Rounded x = RoundTo(x_dtype, values);
    std::vector<int8_t> want_q(m * k);
    std::vector<float> want_s(m);
    QuantizeRowsInt8(x.values.data(), m, k, want_q.data(), want_s.data());
    DeviceBuffer dx(x.bytes.size()), dy(m * shape.n * 4), dws(ops.workspace_bytes(shape, m));
    ASSERT_TRUE(dx.ok() && dy.ok() && dws.ok());
    ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
    ASSERT_CUDA(dws.Poison());
    ASSERT_CUDA(ops.launch(LaunchArgs(dw->get(), shape, x_dtype, dx.get(), m, DType::kF32, dy.get(),
                                      dws.get(), stream_)));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<int8_t> got_q(m * k);
    std::vector<float> got_s(m);
    std::vector<int32_t> got_sum(m), want_sum(m, 0);
    const auto* base = static_cast<const uint8_t*>(dws.get());
    ASSERT_CUDA(cudaMemcpy(got_q.data(), base + layout.xq, got_q.size(), cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got_s.data(), base + layout.x_scale, m * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got_sum.data(), base + layout.x_sum, m * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < m * k; ++i) want_sum[i / k] += want_q[i];
    EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), m * 4), 0);
    EXPECT_EQ(got_q, want_q);
    EXPECT_EQ(got_sum, want_sum);
    if (x_dtype == DType::kF32) {  // the subnormal row's scale: not zero, 1 / s infinite
      EXPECT_GT(want_s[m - 2], 0.0f);
      EXPECT_TRUE(std::isinf(1.0f / want_s[m - 2]));
    }
  }
}

// Dependent launches (dependent_launch.h) let each kernel start while the one before it
// runs. A chain of matmuls in which each reads the previous one's output and overwrites
// what the one before it read, two W2A8 launches in a row sharing one workspace, and a
// residual epilogue between them, must give, launched back to back, exactly the bytes it
// gives with a synchronization after every launch (every kernel here is deterministic).
// Shapes and M cover the decode, stream-K, staged, cluster and wgmma paths of each scheme;
// the launches share one GemmArgs::sync, as a server worker's do, and leave it zero.
TEST_F(DependentLaunchTest, BackToBackChainsMatchSerializedRuns) {
  constexpr int64_t kNarrow = 2048;
  constexpr int64_t kWide = 10240;  // more row tiles than the decode kernels cover at once
  constexpr int64_t kMaxM = 64;
  struct Layer {
    const KernelOps* ops;
    WeightShape shape;
    std::unique_ptr<DeviceBuffer> weight;
  };
  // Up (narrow -> wide) and down (wide -> narrow) per scheme, weights of rms 1/sqrt(K) so
  // that a long chain neither overflows nor vanishes in fp16.
  std::vector<Layer> layers;
  size_t workspace_bytes = 0;
  for (Scheme scheme : {Scheme::kW4A16, Scheme::kW8A16, Scheme::kW2A8}) {
    for (bool up : {true, false}) {
      Layer layer{FindKernel(scheme), {up ? kWide : kNarrow, up ? kNarrow : kWide, 0}, nullptr};
      if (scheme == Scheme::kW4A16) layer.shape.group_size = kW4GroupSize;
      ASSERT_NE(layer.ops, nullptr);
      const Weight w = RandomWeight(scheme, layer.shape, rng_,
                                    1.0f / std::sqrt(static_cast<float>(layer.shape.k)));
      const std::vector<uint8_t> bytes = layer.ops->repack(w.packed());
      layer.weight = std::make_unique<DeviceBuffer>(bytes.size());
      ASSERT_TRUE(layer.weight->ok());
      ASSERT_CUDA(
          cudaMemcpy(layer.weight->get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      workspace_bytes = std::max(workspace_bytes, layer.ops->workspace_bytes(layer.shape, kMaxM));
      layers.push_back(std::move(layer));
    }
  }
  DeviceBuffer a(kMaxM * kWide * 2), b(kMaxM * kWide * 2), x0(kMaxM * kNarrow * 2),
      ws(workspace_bytes);
  SyncWords sync_words;  // the stream-K grids'
  ASSERT_TRUE(a.ok() && b.ok() && x0.ok() && ws.ok() && sync_words.ok());

  for (int64_t m : {1, 5, 16, 64}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m);
    const Rounded x = RoundTo(DType::kF16, RandomNormal(rng_, m * kNarrow, 1.0f));
    ASSERT_CUDA(cudaMemcpy(x0.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
    // Up and down through each scheme twice, each down followed by x += (the input of its
    // up); a and b take turns as input and output.
    auto run = [&](bool sync, std::vector<uint8_t>* out) {
      ASSERT_CUDA(cudaMemcpy(a.get(), x0.get(), m * kNarrow * 2, cudaMemcpyDeviceToDevice));
      ASSERT_CUDA(b.Poison());
      for (int step = 0; step < 12; ++step) {
        const Layer& layer = layers[step % 6 / 2 * 2 + step % 2];
        GemmArgs args = LaunchArgs(layer.weight->get(), layer.shape, DType::kF16,
                                   step % 2 == 0 ? a.get() : b.get(), m, DType::kF16,
                                   step % 2 == 0 ? b.get() : a.get(), ws.get(), stream_);
        args.sync = sync_words.get();
        ASSERT_CUDA(layer.ops->launch(args));
        if (step % 2 == 1) {
          EpilogueArgs e;
          e.x_dtype = DType::kF16;
          e.x = a.get();
          e.m = m;
          e.n = kNarrow;
          e.skip_dtype = DType::kF16;
          e.skip = x0.get();
          e.y_dtype = DType::kF16;
          e.y = a.get();
          ASSERT_CUDA(LaunchEpilogue(e, stream_));
        }
        if (sync) {
          ASSERT_CUDA(cudaStreamSynchronize(stream_));
        }
      }
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      EXPECT_TRUE(sync_words.LeftZero());
      out->resize(m * kNarrow * 2);
      ASSERT_CUDA(cudaMemcpy(out->data(), a.get(), out->size(), cudaMemcpyDeviceToHost));
    };
    std::vector<uint8_t> serialized;
    run(true, &serialized);
    if (HasFatalFailure()) break;
    std::vector<float> values(m * kNarrow);
    ToFloat(DType::kF16, serialized.data(), values.size(), values.data());
    double sum_sq = 0.0;
    for (float v : values) {
      ASSERT_TRUE(std::isfinite(v));
      sum_sq += static_cast<double>(v) * v;
    }
    ASSERT_GT(sum_sq, 0.0);
    for (int repeat = 0; repeat < 3; ++repeat) {
      std::vector<uint8_t> back_to_back;
      run(false, &back_to_back);
      if (HasFatalFailure()) break;
      EXPECT_TRUE(back_to_back == serialized) << "repeat " << repeat;
    }
  }
}

TEST_F(W8A16Test, RejectsBadArguments) {
  GemmArgs args;
  args.shape = {16, 64, 0};
  args.m = 1;
  int dummy = 0;
  args.weight = args.x = args.y = &dummy;
  args.x_dtype = DType::kF32;  // the backend converts fp32 first
  EXPECT_EQ(LaunchW8A16(args), cudaErrorInvalidValue);
  args.x_dtype = DType::kF16;
  args.m = 0;
  EXPECT_EQ(LaunchW8A16(args), cudaErrorInvalidValue);
  args.m = 1;
  W8A16Options options;
  options.splits = 9;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options.splits = -1;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_rows = 3;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_cluster = 3;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options.decode_cluster = 8;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_warps = 10;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options.decode_warps = 12;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options.decode_warps = -1;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_stream = 3;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  options.decode_stream = -1;
  EXPECT_EQ(LaunchW8A16(args, options), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Tuning options out of range: refused, nothing launched.
TEST_F(W4A16Test, RejectsBadOptions) {
  GemmArgs args;
  args.shape = {16, 128, kW4GroupSize};
  args.m = 1;
  alignas(16) int dummy[8] = {};
  args.weight = args.x = args.y = dummy;
  W4A16Options options;
  options.splits = 9;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.wgmma_groups = 3;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_strips = 3;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options.decode_strips = -1;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_cluster = 3;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options.decode_cluster = 8;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_stream = 3;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options.decode_stream = -1;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_warps = 12;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options.decode_warps = -1;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options = {};
  options.wgmma_tokens = 32;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  options.wgmma_tokens = 512;
  EXPECT_EQ(LaunchW4A16(args, options), cudaErrorInvalidValue);
  // Zero points need the workspace (their term's scratch, for the kernels that do not take
  // them), as activation order does (the gathered inputs), which has no gated launch.
  args.shape.zero_points = true;
  EXPECT_EQ(LaunchW4A16(args), cudaErrorInvalidValue);
  args.workspace = dummy;
  args.shape.zero_points = false;
  args.shape.act_order = true;
  EXPECT_EQ(LaunchW4A16Glu(args, dummy, Activation::kSilu), cudaErrorInvalidValue);
  args.workspace = nullptr;
  EXPECT_EQ(LaunchW4A16(args), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(W2A8Test, RejectsBadOptions) {
  GemmArgs args;
  args.shape = {32, 128, 0};
  args.m = 1;
  alignas(16) int dummy[8] = {};
  args.weight = args.x = args.y = args.workspace = dummy;
  W2A8Options options;
  options.wgmma_tokens = 32;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.wgmma_tokens = 257;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_units = 3;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_units = -1;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_groups = 3;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_groups = -1;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_groups = 2;  // two groups a set take one-unit slots and no clusters
  options.decode_units = 2;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_units = 0;
  options.decode_cluster = 2;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_cluster = 3;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_cluster = -1;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.wgmma_splits = 9;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.wgmma_splits = 16;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.wgmma_splits = -1;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.decode_stream = 3;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options.decode_stream = -1;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  options = {};
  options.wgmma_groups = 3;
  EXPECT_EQ(LaunchW2A8(args, options), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(DenseTest, RejectsActivationsOfTheOtherDtype) {
  GemmArgs args;
  args.shape = {8, 8, 0};
  args.m = 1;
  args.x_dtype = DType::kBF16;
  EXPECT_EQ(FindKernel(Scheme::kFp16)->launch(args), cudaErrorInvalidValue);
  args.x_dtype = DType::kF16;
  EXPECT_EQ(FindKernel(Scheme::kBf16)->launch(args), cudaErrorInvalidValue);
}

TEST_F(W8A16Test, LayoutSizeIsPaddedToRowTiles) {
  EXPECT_EQ(W8A16DeviceBytes({1, 64, 0}), 16 * 64 + 16 * 4);
  EXPECT_EQ(W8A16DeviceBytes({200, 128, 0}), 208 * 128 + 208 * 4);
}

// Host reference of one conversion element: the rounding of kernels/dtype.h.
std::vector<uint8_t> HostConvert(DType from, const std::vector<uint8_t>& src, DType to,
                                 size_t count, float scale) {
  std::vector<float> f(count);
  ToFloat(from, src.data(), count, f.data());
  for (float& v : f) v *= scale;
  std::vector<uint8_t> out(count * DTypeSize(to));
  FromFloat(to, f.data(), count, out.data());
  return out;
}

TEST(ConvertTest, MatchesHostRoundingBitForBit) {
  std::mt19937_64 rng(TestSeed());
  constexpr size_t kCount = 100003;  // not a multiple of any block size
  std::vector<float> values = RandomNormal(rng, kCount, 3e4f);
  // Edge values: fp16 overflow and max, subnormals, signed zero, Inf, NaN.
  const float edges[] = {65504.0f, 65519.0f, 65520.0f, -1e9f,     6e-8f,
                         1e-40f,   -0.0f,    INFINITY, -INFINITY, NAN};
  std::copy(std::begin(edges), std::end(edges), values.begin());
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  cudaStream_t stream = nullptr;
  for (DType from : dtypes) {
    const Rounded src = RoundTo(from, values);
    DeviceBuffer dsrc(src.bytes.size());
    ASSERT_TRUE(dsrc.ok());
    ASSERT_CUDA(cudaMemcpy(dsrc.get(), src.bytes.data(), src.bytes.size(), cudaMemcpyHostToDevice));
    for (DType to : dtypes) {
      for (float scale : {1.0f, 0.125f, 1024.0f}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(from) << " -> " << DTypeName(to) << " scale " << scale);
        DeviceBuffer ddst(kCount * DTypeSize(to));
        ASSERT_TRUE(ddst.ok());
        ASSERT_CUDA(ddst.Poison());
        ASSERT_CUDA(LaunchConvert(from, dsrc.get(), to, ddst.get(), kCount, scale, stream));
        ASSERT_CUDA(cudaStreamSynchronize(stream));
        std::vector<uint8_t> got(ddst.bytes());
        ASSERT_CUDA(cudaMemcpy(got.data(), ddst.get(), got.size(), cudaMemcpyDeviceToHost));
        const std::vector<uint8_t> want = HostConvert(from, src.bytes, to, kCount, scale);
        const size_t size = DTypeSize(to);
        int bad = 0;
        for (size_t i = 0; i < kCount && bad < 5; ++i) {
          float g = 0.0f, w = 0.0f;
          ToFloat(to, got.data() + i * size, 1, &g);
          ToFloat(to, want.data() + i * size, 1, &w);
          const bool same = std::memcmp(got.data() + i * size, want.data() + i * size, size) == 0 ||
                            (std::isnan(g) && std::isnan(w));
          if (!same) {
            ++bad;
            ADD_FAILURE() << "element " << i << " (" << values[i] << "): got " << g << ", want "
                          << w;
          }
        }
      }
    }
  }
}

TEST(ActQuantTest, MatchesHostRuleBitForBit) {
  std::mt19937_64 rng(TestSeed());
  for (const auto& [m, k] : {std::pair<int64_t, int64_t>{1, 7}, {5, 128}, {33, 4096}, {3, 1000}}) {
    std::vector<float> values = RandomNormal(rng, m * k, 2.0f);
    std::fill(values.begin(), values.begin() + k, 0.0f);  // a zero row: scale 0, q 0
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k << " " << DTypeName(dtype));
      const Rounded x = RoundTo(dtype, values);
      std::vector<int8_t> want_q(m * k);
      std::vector<float> want_s(m);
      QuantizeRowsInt8(x.values.data(), m, k, want_q.data(), want_s.data());

      DeviceBuffer dx(x.bytes.size()), dq(m * k), ds(m * sizeof(float));
      ASSERT_TRUE(dx.ok() && dq.ok() && ds.ok());
      ASSERT_CUDA(cudaMemcpy(dx.get(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
      ASSERT_CUDA(dq.Poison());
      ASSERT_CUDA(ds.Poison());
      ASSERT_CUDA(LaunchQuantizeRowsInt8(dtype, dx.get(), m, k, static_cast<int8_t*>(dq.get()),
                                         static_cast<float*>(ds.get()), nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::vector<int8_t> got_q(m * k);
      std::vector<float> got_s(m);
      ASSERT_CUDA(cudaMemcpy(got_q.data(), dq.get(), got_q.size(), cudaMemcpyDeviceToHost));
      ASSERT_CUDA(cudaMemcpy(got_s.data(), ds.get(), m * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), m * sizeof(float)), 0);
      EXPECT_EQ(got_q, want_q);
      EXPECT_EQ(got_s[0], 0.0f);
    }
  }
}

}  // namespace
}  // namespace qmm::cuda
