// The CUDA layer kernels (kernels/cuda/layers.h) against the CPU layer kernels and the
// float64 references, on random data with NaN-poisoned outputs.
//
// Tolerance of an element: the device's tanhf/expf against the host's differ by a few
// ulp, and a 16-bit input or output is one rounding of that dtype:
//   |y - want| <= 4e-6 * (|want| + gain * |argument|) + u * |want|
// with u the unit roundoff of the output dtype (0 for fp32, 2^-11 fp16, 2^-8 bf16).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/layers.h"
#include "kernels/cuda/layers.h"
#include "kernels/dtype.h"
#include "kernels/layers_reference.h"
#include "kernels/quantize.h"

namespace qmm::cuda {
namespace {

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
    if (ptr_ != nullptr) cudaMemset(ptr_, 0xFF, bytes_);  // NaN in every float dtype
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  cudaError_t Upload(const void* src) {
    return cudaMemcpy(ptr_, src, bytes_, cudaMemcpyHostToDevice);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> v(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(v.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

std::vector<float> RandomNormal(std::mt19937_64& rng, size_t count, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

// `v` rounded to `dtype`: the bytes for the device and the values the host then computes on.
struct Tensor16 {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
Tensor16 RoundTo(DType dtype, const std::vector<float>& v) {
  Tensor16 t;
  t.bytes.resize(v.size() * DTypeSize(dtype));
  FromFloat(dtype, v.data(), v.size(), t.bytes.data());
  t.values.resize(v.size());
  ToFloat(dtype, t.bytes.data(), v.size(), t.values.data());
  return t;
}

std::vector<float> DownloadAsFloat(const DeviceBuffer& buffer, DType dtype, size_t count) {
  const std::vector<uint8_t> bytes = buffer.Download<uint8_t>();
  std::vector<float> v(count);
  ToFloat(dtype, bytes.data(), count, v.data());
  return v;
}

double UnitRoundoff(DType d) {
  return d == DType::kF32 ? 0.0 : d == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

double SubnormalStep(DType d) {
  return d == DType::kF32 ? 1e-30 : d == DType::kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<float>& arg, double gain, DType y_dtype,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    // Relative terms, plus the spacing of the output dtype's subnormals (fp16 results
    // below 2^-14 are rounded to multiples of 2^-24).
    const double tol = 4e-6 * (std::fabs(want[i]) + gain * std::fabs(double{arg[i]})) +
                       UnitRoundoff(y_dtype) * std::fabs(want[i]) + SubnormalStep(y_dtype);
    ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
  }
}

std::string Name(DType a, DType b) {
  return std::string(DTypeName(a)) + "->" + std::string(DTypeName(b));
}

TEST(EmbeddingGpuTest, GathersExactlyAndFlagsBadIds) {
  std::mt19937_64 rng(11);
  for (Scheme scheme : {Scheme::kFp16, Scheme::kBf16}) {
    const DType table_dtype = scheme == Scheme::kFp16 ? DType::kF16 : DType::kBF16;
    const WeightShape shape{.n = 301, .k = 72};
    const std::vector<float> values = RandomNormal(rng, shape.n * shape.k, 1.0f);
    absl::StatusOr<std::vector<uint8_t>> packed =
        QuantizeWeight(scheme, shape, DType::kF32,
                       {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4});
    ASSERT_TRUE(packed.ok()) << packed.status();
    const PackedWeight table{scheme, shape, *packed};
    DeviceBuffer d_table(packed->size());
    ASSERT_CUDA(d_table.Upload(packed->data()));
    for (DType y_dtype : kDTypes) {
      std::vector<int32_t> ids = {300, 0, 7, 7, 150, 299, 1, 42, 3};
      DeviceBuffer d_ids(ids.size() * 4);
      ASSERT_CUDA(d_ids.Upload(ids.data()));
      const int64_t m = static_cast<int64_t>(ids.size());
      DeviceBuffer d_y(m * shape.k * DTypeSize(y_dtype));
      ASSERT_CUDA(LaunchEmbedding(table_dtype, d_table.get(), shape.n, shape.k,
                                  d_ids.get<int32_t>(), m, y_dtype, d_y.get(), nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> got = DownloadAsFloat(d_y, y_dtype, m * shape.k);
      std::vector<float> cpu(m * shape.k);
      CpuEmbedding(table, ids.data(), m, cpu.data());
      for (size_t i = 0; i < got.size(); ++i) {
        // fp16 -> bf16 is the only lossy pair; compare through the output dtype.
        const Tensor16 want = RoundTo(y_dtype, {cpu[i]});
        ASSERT_EQ(got[i], want.values[0]) << Name(table_dtype, y_dtype) << " element " << i;
      }
      // Out-of-range ids give NaN rows and read nothing out of bounds.
      ids = {-1, 301};
      ASSERT_CUDA(d_ids.Upload(ids.data()));
      ASSERT_CUDA(LaunchEmbedding(table_dtype, d_table.get(), shape.n, shape.k,
                                  d_ids.get<int32_t>(), 2, y_dtype, d_y.get(), nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> bad = DownloadAsFloat(d_y, y_dtype, 2 * shape.k);
      for (float v : bad) ASSERT_TRUE(std::isnan(v));
    }
  }
  EXPECT_EQ(LaunchEmbedding(DType::kF32, nullptr, 1, 1, nullptr, 1, DType::kF32, nullptr, nullptr),
            cudaErrorInvalidValue);
}

TEST(DyTGpuTest, MatchesCpuAndReferenceForEveryDTypePair) {
  std::mt19937_64 rng(12);
  for (DType x_dtype : kDTypes) {
    for (DType y_dtype : kDTypes) {
      for (int64_t m : {1, 3, 17}) {
        const int64_t f = m == 3 ? 4096 : 200;
        const Tensor16 x = RoundTo(x_dtype, RandomNormal(rng, m * f, 2.0f));
        const std::vector<float> gamma = RandomNormal(rng, f, 1.0f);
        const std::vector<float> beta = RandomNormal(rng, f, 0.3f);
        const float alpha = 0.8f;
        DeviceBuffer d_x(x.bytes.size()), d_gamma(f * 4), d_beta(f * 4);
        DeviceBuffer d_y(m * f * DTypeSize(y_dtype));
        ASSERT_CUDA(d_x.Upload(x.bytes.data()));
        ASSERT_CUDA(d_gamma.Upload(gamma.data()));
        ASSERT_CUDA(d_beta.Upload(beta.data()));
        const bool with_beta = m != 17;
        ASSERT_CUDA(LaunchDyT(x_dtype, d_x.get(), m, f, alpha, d_gamma.get<float>(),
                              with_beta ? d_beta.get<float>() : nullptr, y_dtype, d_y.get(),
                              nullptr));
        ASSERT_CUDA(cudaDeviceSynchronize());
        const std::vector<float> got = DownloadAsFloat(d_y, y_dtype, m * f);
        const std::vector<double> want =
            ReferenceDyT(std::vector<double>(x.values.begin(), x.values.end()), f, alpha, gamma,
                         with_beta ? std::span<const float>(beta) : std::span<const float>());
        ExpectClose(got, want, x.values, 2.0 * alpha, y_dtype,
                    "DyT " + Name(x_dtype, y_dtype) + " m" + std::to_string(m));
      }
    }
  }
}

// Every operand's dtype and every part, on rows whose runs of 8 values take 16-byte
// accesses (n = 1000) and on the scalar path, which takes a width that is not a multiple
// of 8 (1001) or an x that does not start on 16 bytes (shifted one value).
TEST(EpilogueGpuTest, EveryPartAndDTypeAgainstCpuKernels) {
  std::mt19937_64 rng(14);
  const int64_t m = 5;
  const Activation acts[] = {Activation::kIdentity, Activation::kSilu, Activation::kGeluTanh,
                             Activation::kRelu, Activation::kReluSquared};
  for (int a = 0; a < 5; ++a) {
    const Activation act = acts[a];
    const DType up_dtype = kDTypes[a % 3], skip_dtype = kDTypes[(a + 1) % 3];
    for (auto [n, shift] : {std::pair<int64_t, int>{1000, 0}, {1001, 0}, {1000, 1}}) {
      for (DType x_dtype : kDTypes) {
        for (DType y_dtype : kDTypes) {
          for (int parts = 0; parts < 8; ++parts) {
            const bool with_bias = parts & 1, with_up = parts & 2, with_skip = parts & 4;
            const Tensor16 x = RoundTo(x_dtype, RandomNormal(rng, m * n, 3.0f));
            const Tensor16 up = RoundTo(up_dtype, RandomNormal(rng, m * n, 1.0f));
            const Tensor16 skip = RoundTo(skip_dtype, RandomNormal(rng, m * n, 1.0f));
            const std::vector<float> bias = RandomNormal(rng, n, 0.5f);
            DeviceBuffer d_x(x.bytes.size() + 16), d_up(up.bytes.size());
            DeviceBuffer d_skip(skip.bytes.size()), d_bias(n * 4);
            DeviceBuffer d_y(m * n * DTypeSize(y_dtype));
            void* x_at = d_x.get<uint8_t>() + shift * DTypeSize(x_dtype);
            ASSERT_CUDA(cudaMemcpy(x_at, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
            ASSERT_CUDA(d_up.Upload(up.bytes.data()));
            ASSERT_CUDA(d_skip.Upload(skip.bytes.data()));
            ASSERT_CUDA(d_bias.Upload(bias.data()));
            EpilogueArgs args{.x_dtype = x_dtype,
                              .x = x_at,
                              .m = m,
                              .n = n,
                              .bias = with_bias ? d_bias.get<float>() : nullptr,
                              .act = act,
                              .up_dtype = up_dtype,
                              .up = with_up ? d_up.get() : nullptr,
                              .skip_dtype = skip_dtype,
                              .skip = with_skip ? d_skip.get() : nullptr,
                              .y_dtype = y_dtype,
                              .y = d_y.get()};
            ASSERT_CUDA(LaunchEpilogue(args, nullptr));
            ASSERT_CUDA(cudaDeviceSynchronize());
            const std::vector<float> got = DownloadAsFloat(d_y, y_dtype, m * n);
            // The float64 composition of the same parts.
            std::vector<double> want = ReferenceBiasActivation(
                act, std::vector<double>(x.values.begin(), x.values.end()), n,
                with_bias ? std::span<const float>(bias) : std::span<const float>());
            std::vector<float> arg(m * n);
            for (int64_t i = 0; i < m * n; ++i) {
              arg[i] = std::fabs(x.values[i]) + (with_bias ? std::fabs(bias[i % n]) : 0.0f);
              if (with_up) {
                want[i] *= up.values[i];
                arg[i] *= std::fabs(up.values[i]);
              }
              if (with_skip) want[i] += skip.values[i];
            }
            ExpectClose(got, want, arg, 2.0, y_dtype,
                        std::string(ActivationName(act)) + " " + Name(x_dtype, y_dtype) + " n " +
                            std::to_string(n) + " shift " + std::to_string(shift) + " parts " +
                            std::to_string(parts));
          }
        }
      }
    }
  }
}

TEST(EpilogueGpuTest, SwiGluInPlaceOverTheGate) {
  std::mt19937_64 rng(15);
  const int64_t count = 14336;
  const std::vector<float> gate = RandomNormal(rng, count, 2.0f);
  const std::vector<float> up = RandomNormal(rng, count, 1.0f);
  DeviceBuffer d_gate(count * 4), d_up(count * 4);
  ASSERT_CUDA(d_gate.Upload(gate.data()));
  ASSERT_CUDA(d_up.Upload(up.data()));
  ASSERT_CUDA(LaunchEpilogue({.x_dtype = DType::kF32,
                              .x = d_gate.get(),
                              .m = 1,
                              .n = count,
                              .act = Activation::kSilu,
                              .up_dtype = DType::kF32,
                              .up = d_up.get(),
                              .y_dtype = DType::kF32,
                              .y = d_gate.get()},
                             nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<double> want =
      ReferenceGlu(Activation::kSilu, std::vector<double>(gate.begin(), gate.end()),
                   std::vector<double>(up.begin(), up.end()));
  std::vector<float> arg(count);
  for (int64_t i = 0; i < count; ++i) arg[i] = gate[i] * up[i];
  ExpectClose(d_gate.Download<float>(), want, arg, 2.0, DType::kF32, "SwiGLU in place");
}

// Rows of several widths: 4096 (8 values a thread, in registers), 8192 (all 16 that a
// thread holds), 9001 (809 values past the registers, read twice), more rows than the
// grid's 4096 CTAs; every dtype pair, and in place.
TEST(RmsNormGpuTest, MatchesReferenceForEveryDTypePair) {
  std::mt19937_64 rng(13);
  for (DType x_dtype : kDTypes) {
    for (DType y_dtype : kDTypes) {
      for (const auto& [m, f] : {std::pair<int64_t, int64_t>{1, 4096},
                                 {2, 8192},
                                 {3, 9001},
                                 {3, 200},
                                 {17, 1},
                                 {4100, 8}}) {
        const Tensor16 x = RoundTo(x_dtype, RandomNormal(rng, m * f, 2.0f));
        const std::vector<float> weight = RandomNormal(rng, f, 1.0f);
        DeviceBuffer d_x(x.bytes.size()), d_weight(f * 4), d_y(m * f * DTypeSize(y_dtype));
        ASSERT_CUDA(d_x.Upload(x.bytes.data()));
        ASSERT_CUDA(d_weight.Upload(weight.data()));
        ASSERT_CUDA(LaunchRmsNorm(x_dtype, d_x.get(), m, f, d_weight.get<float>(), 1e-5f, y_dtype,
                                  d_y.get(), nullptr));
        if (x_dtype == y_dtype) {
          ASSERT_CUDA(LaunchRmsNorm(x_dtype, d_x.get(), m, f, d_weight.get<float>(), 1e-5f, x_dtype,
                                    d_x.get(), nullptr));
        }
        ASSERT_CUDA(cudaDeviceSynchronize());
        const std::vector<double> want = ReferenceRmsNorm(
            std::vector<double>(x.values.begin(), x.values.end()), f, weight, 1e-5);
        const std::string what = "RMSNorm " + Name(x_dtype, y_dtype) + " m" + std::to_string(m) +
                                 " f" + std::to_string(f);
        // The squares summed in fp32 over up to 9001 values: a few 1e-7 of the scale.
        ExpectClose(DownloadAsFloat(d_y, y_dtype, m * f), want, x.values, 0.0, y_dtype, what);
        if (x_dtype == y_dtype) {
          EXPECT_EQ(d_x.Download<uint8_t>(), d_y.Download<uint8_t>()) << what << " in place";
        }
      }
    }
  }
}

TEST(LayersGpuTest, BadArgumentsAreRejectedAndNothingRunsForZeroRows) {
  EXPECT_EQ(
      LaunchDyT(DType::kF32, nullptr, 1, 0, 1.0f, nullptr, nullptr, DType::kF32, nullptr, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEpilogue({.n = 0}, nullptr), cudaErrorInvalidValue);
  float weight = 1.0f;
  EXPECT_EQ(LaunchRmsNorm(DType::kF32, &weight, 1, 1, &weight, 0.0f, DType::kF32, &weight, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      LaunchRmsNorm(DType::kF32, &weight, 1, 1, nullptr, 1e-5f, DType::kF32, &weight, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(
      LaunchRmsNorm(DType::kF32, nullptr, 0, 8, &weight, 1e-5f, DType::kF32, nullptr, nullptr),
      cudaSuccess);
  float dummy = 0.0f;
  EXPECT_EQ(LaunchEpilogue({.x = &dummy, .m = 0, .n = 4, .y = &dummy}, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace qmm::cuda
