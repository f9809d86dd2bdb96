// The CPU layer kernels against the float64 references of kernels/layers_reference.h.
#include "kernels/cpu/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/layers_reference.h"
#include "kernels/quantize.h"

namespace qmm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// fp32 math of one element-wise function (tanh, exp) against float64: a few ulp of the
// result, plus a few ulp of the argument carried through the derivative (bounded by 1 for
// every function here, times alpha for DyT).
constexpr double kRelTol = 2e-6;

std::vector<float> Random(int64_t count, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<float>& x, const std::string& what, double arg_gain = 1.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    const double arg = i < x.size() ? std::fabs(double{x[i]}) : 0.0;
    ASSERT_NEAR(got[i], want[i], kRelTol * (std::fabs(want[i]) + arg_gain * arg) + 1e-30)
        << what << " element " << i;
  }
}

TEST(CpuEmbeddingTest, GathersRowsOfFp16AndBf16Tables) {
  std::mt19937 rng(1);
  for (Scheme scheme : {Scheme::kFp16, Scheme::kBf16}) {
    for (int64_t dim : {8, 24, 136}) {
      const WeightShape shape{.n = 37, .k = dim};
      const std::vector<float> values = Random(shape.n * dim, rng, 1.0f);
      absl::StatusOr<std::vector<uint8_t>> packed =
          QuantizeWeight(scheme, shape, DType::kF32,
                         {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4});
      ASSERT_TRUE(packed.ok()) << packed.status();
      absl::StatusOr<PackedWeight> table = ViewPacked(scheme, shape, *packed);
      ASSERT_TRUE(table.ok()) << table.status();
      // First and last rows, a repeat, and an odd count.
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 36, 1};
      std::vector<float> y(ids.size() * dim, kNaN);
      CpuEmbedding(*table, ids.data(), static_cast<int64_t>(ids.size()), y.data());
      const std::vector<double> want = ReferenceEmbedding(*table, ids);
      for (size_t i = 0; i < y.size(); ++i) {
        // A lookup is exact: the table's 16-bit values widen to fp32 without rounding.
        ASSERT_EQ(y[i], want[i]) << SchemeName(scheme) << " dim " << dim << " element " << i;
      }
    }
  }
}

TEST(CpuDyTTest, MatchesReferenceWithAndWithoutBeta) {
  std::mt19937 rng(2);
  for (int64_t m : {1, 3, 8}) {
    for (int64_t f : {1, 7, 256}) {
      for (bool with_beta : {true, false}) {
        const std::vector<float> x = Random(m * f, rng, 3.0f);
        const std::vector<float> gamma = Random(f, rng, 1.0f);
        const std::vector<float> beta = with_beta ? Random(f, rng, 0.5f) : std::vector<float>{};
        const float alpha = 0.7f;
        std::vector<float> y(m * f, kNaN);
        CpuDyT(x.data(), m, f, alpha, gamma.data(), with_beta ? beta.data() : nullptr, y.data());
        const std::vector<double> want = ReferenceDyT(ToDouble(x), f, alpha, gamma, beta);
        ExpectClose(y, want, x, "DyT m" + std::to_string(m) + " f" + std::to_string(f), 4.0);
      }
    }
  }
}

TEST(CpuDyTTest, RunsInPlace) {
  std::mt19937 rng(3);
  std::vector<float> x = Random(4 * 64, rng, 2.0f);
  const std::vector<float> gamma = Random(64, rng, 1.0f);
  const std::vector<double> want = ReferenceDyT(ToDouble(x), 64, 1.5, gamma, {});
  const std::vector<float> x_copy = x;
  CpuDyT(x.data(), 4, 64, 1.5f, gamma.data(), nullptr, x.data());
  ExpectClose(x, want, x_copy, "in-place DyT", 4.0);
}

// Rows of every scale (a row's mean square summed in double: 1e30 squares overflow fp32),
// a zero row (epsilon keeps it finite: zeros out), in place too.
TEST(CpuRmsNormTest, MatchesReference) {
  std::mt19937 rng(4);
  for (int64_t m : {1, 3, 8}) {
    for (int64_t f : {1, 7, 4096}) {
      std::vector<float> x = Random(m * f, rng, 3.0f);
      for (int64_t j = 0; j < f; ++j) x[j] *= 1e30f;                 // row 0
      if (m > 2) std::fill(x.begin() + f, x.begin() + 2 * f, 0.0f);  // row 1
      const std::vector<float> weight = Random(f, rng, 1.0f);
      const float epsilon = 1e-5f;
      std::vector<float> y(m * f, kNaN);
      CpuRmsNorm(x.data(), m, f, weight.data(), epsilon, y.data());
      const std::vector<double> want = ReferenceRmsNorm(ToDouble(x), f, weight, epsilon);
      // Each y is weight * x * (one rounded scale): a few ulp of it, against |want|.
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "m" << m << " f" << f << " element " << i;
        ASSERT_NEAR(y[i], want[i], 4e-7 * std::fabs(want[i]) + 1e-30)
            << "m" << m << " f" << f << " element " << i;
      }
      if (m > 2) {
        EXPECT_EQ(y[f], 0.0f);
      }
      CpuRmsNorm(x.data(), m, f, weight.data(), epsilon, x.data());
      ASSERT_EQ(std::memcmp(x.data(), y.data(), y.size() * 4), 0) << "in place";
    }
  }
}

TEST(CpuBiasActivationTest, EveryActivationWithAndWithoutBias) {
  std::mt19937 rng(4);
  for (Activation act : {Activation::kIdentity, Activation::kSilu, Activation::kGeluTanh,
                         Activation::kRelu, Activation::kReluSquared}) {
    for (bool with_bias : {true, false}) {
      const int64_t m = 5;
      const int64_t n = 33;
      const std::vector<float> x = Random(m * n, rng, 4.0f);
      const std::vector<float> bias = with_bias ? Random(n, rng, 1.0f) : std::vector<float>{};
      std::vector<float> y(m * n, kNaN);
      CpuBiasActivation(act, x.data(), with_bias ? bias.data() : nullptr, m, n, y.data());
      const std::vector<double> want = ReferenceBiasActivation(act, ToDouble(x), n, bias);
      // The argument is x + bias: count the bias into the argument's magnitude.
      std::vector<float> arg = x;
      for (size_t i = 0; i < arg.size(); ++i) arg[i] += with_bias ? std::fabs(bias[i % n]) : 0.0f;
      ExpectClose(y, want, arg, std::string(ActivationName(act)) + (with_bias ? " bias" : ""), 2.0);
    }
  }
}

TEST(CpuBiasActivationTest, ExtremeInputsStayFinite) {
  const std::vector<float> x = {-1e30f, -100.0f, -20.0f, 0.0f, 20.0f, 100.0f, 1e30f};
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu}) {
    std::vector<float> y(x.size(), kNaN);
    CpuBiasActivation(act, x.data(), nullptr, 1, static_cast<int64_t>(x.size()), y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = ReferenceActivation(act, x[i]);
      ASSERT_NEAR(y[i], want, 1e-6 * std::fabs(want) + 1e-30)
          << ActivationName(act) << " of " << x[i];
    }
  }
}

TEST(CpuBiasActivationTest, ReluKeepsNaN) {
  const float x = kNaN;
  for (Activation act : {Activation::kRelu, Activation::kReluSquared}) {
    float y = 0.0f;
    CpuBiasActivation(act, &x, nullptr, 1, 1, &y);
    EXPECT_TRUE(std::isnan(y)) << ActivationName(act);
  }
}

// Squared, large inputs reach fp32's top (and overflow to inf, as the square does), and
// negative ones of any size give 0.
TEST(CpuBiasActivationTest, ReluSquaredAtTheEnds) {
  const std::vector<float> x = {-1e30f, -0.0f, 1e-20f, 1e19f, 2e19f};
  std::vector<float> y(x.size(), kNaN);
  CpuBiasActivation(Activation::kReluSquared, x.data(), nullptr, 1, static_cast<int64_t>(x.size()),
                    y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 1e-40f);
  EXPECT_FLOAT_EQ(y[3], 1e38f);
  EXPECT_TRUE(std::isinf(y[4]));
}

TEST(CpuGluTest, MatchesReferenceForEachActivation) {
  std::mt19937 rng(5);
  const std::vector<float> gate = Random(3 * 41, rng, 3.0f);
  const std::vector<float> up = Random(3 * 41, rng, 1.0f);
  for (Activation act :
       {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu, Activation::kReluSquared}) {
    std::vector<float> y(gate.size(), kNaN);
    CpuGlu(act, gate.data(), up.data(), static_cast<int64_t>(y.size()), y.data());
    const std::vector<double> want = ReferenceGlu(act, ToDouble(gate), ToDouble(up));
    std::vector<float> arg(gate.size());
    for (size_t i = 0; i < arg.size(); ++i) arg[i] = gate[i] * up[i];
    ExpectClose(y, want, arg, std::string(ActivationName(act)) + " GLU", 2.0);
    // In place over the gate.
    std::vector<float> in_place = gate;
    CpuGlu(act, in_place.data(), up.data(), static_cast<int64_t>(y.size()), in_place.data());
    EXPECT_EQ(0, std::memcmp(in_place.data(), y.data(), y.size() * sizeof(float)));
  }
}

TEST(CpuAddTest, AddsExactlyAndInPlace) {
  std::mt19937 rng(6);
  const std::vector<float> a = Random(99, rng, 1.0f);
  const std::vector<float> b = Random(99, rng, 1.0f);
  std::vector<float> y(a.size(), kNaN);
  CpuAdd(a.data(), b.data(), 99, y.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], a[i] + b[i]) << i;
  std::vector<float> in_place = b;
  CpuAdd(a.data(), in_place.data(), 99, in_place.data());
  EXPECT_EQ(0, std::memcmp(in_place.data(), y.data(), y.size() * sizeof(float)));
}

}  // namespace
}  // namespace qmm
