#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/activation_quant.h"
#include "kernels/quantize.h"
#include "kernels/reference.h"

namespace qmm {
namespace {

struct Case {
  Scheme scheme;
  int32_t group_size;
  bool zero_points = false;
  bool act_order = false;
};
const Case kCases[] = {{Scheme::kFp16, 0},
                       {Scheme::kBf16, 0},
                       {Scheme::kW8A16, 0},
                       {Scheme::kW4A16, 0},
                       {Scheme::kW4A16, 128},
                       {Scheme::kW4A16, 0, true},
                       {Scheme::kW4A16, 128, true},
                       {Scheme::kW4A16, 128, false, true},
                       {Scheme::kW4A16, 128, true, true},
                       {Scheme::kW2A8, 0}};
const int64_t kRows[] = {1, 2, 3, 7, 16, 33, 65};

std::string Name(const Case& c, int64_t m, int64_t n, int64_t k) {
  return absl::StrCat(std::string(SchemeName(c.scheme)), " g", c.group_size,
                      c.zero_points ? " zp" : "", c.act_order ? " act_order" : "", " m", m, " n", n,
                      " k", k);
}

std::vector<float> Random(int64_t count, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<uint8_t> RandomPacked(const Case& c, const WeightShape& shape, std::mt19937& rng) {
  std::vector<float> w = Random(shape.n * shape.k, rng, 0.02f);
  if (c.zero_points) {
    // Groups shifted off zero by different amounts, so that their zero points spread over
    // the range rather than sitting at a symmetric group's 8.
    for (int64_t i = 0; i < shape.n * shape.k; ++i) {
      w[i] += 0.02f * static_cast<float>((i / 128 * 7) % 9 - 4);
    }
  }
  // In activation order: the quantized columns taken as stored columns, with a random order
  // after them (any permutation makes a valid weight).
  WeightShape in_order = shape;
  in_order.act_order = false;
  absl::StatusOr<std::vector<uint8_t>> p = QuantizeWeight(
      c.scheme, in_order, DType::kF32, {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4});
  EXPECT_TRUE(p.ok()) << p.status();
  if (c.act_order) {
    std::vector<int32_t> perm(shape.k);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const auto* bytes = reinterpret_cast<const uint8_t*>(perm.data());
    p->insert(p->end(), bytes, bytes + 4 * shape.k);
  }
  return *p;
}

std::vector<float> PoisonedMatMul(const PackedWeight& w, const std::vector<float>& x, int64_t m,
                                  int threads) {
  // Poisoned: an element the kernel skips stays NaN and fails the comparison.
  std::vector<float> y(m * w.shape.n, std::numeric_limits<float>::quiet_NaN());
  CpuMatMul(w, x.data(), m, y.data(), threads);
  return y;
}

// fp32 schemes: every element within 1e-5 of sum |x * w| (fp32 accumulation over K of at
// most a few thousand), and the whole result within 1e-5 relative in the 2-norm.
void ExpectCloseFloat(const PackedWeight& w, const std::vector<float>& x, int64_t m,
                      const std::vector<float>& y, const std::string& name) {
  const std::vector<double> ref = ReferenceMatMul(w, x.data(), m);
  const std::vector<float> deq = DequantizeWeight(w);
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  double err2 = 0.0;
  double ref2 = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < n_rows; ++n) {
      double magnitude = 0.0;
      for (int64_t c = 0; c < k; ++c) magnitude += std::fabs(x[i * k + c] * deq[n * k + c]);
      const double r = ref[i * n_rows + n];
      const double got = y[i * n_rows + n];
      ASSERT_TRUE(std::isfinite(got)) << name << " element " << i << "," << n;
      ASSERT_NEAR(got, r, 1e-5 * magnitude + 1e-30) << name << " element " << i << "," << n;
      err2 += (got - r) * (got - r);
      ref2 += r * r;
    }
  }
  ASSERT_GT(ref2, 0.0) << name;
  EXPECT_LE(std::sqrt(err2 / ref2), 1e-5) << name;
}

// W2A8: the kernel quantizes x in fp32 and the reference in double. They agree except where
// x / a lands within rounding of a .5 tie; each such element may move one xq by 1, which
// moves y by at most a * s. Everything else is integer arithmetic, exact on both sides.
void ExpectCloseTernary(const PackedWeight& w, const std::vector<float>& x, int64_t m,
                        const std::vector<float>& y, const std::string& name) {
  const std::vector<double> ref = ReferenceMatMul(w, x.data(), m);
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  std::vector<int8_t> xq(m * k);
  std::vector<float> a(m);
  QuantizeRowsInt8(x.data(), m, k, xq.data(), a.data());
  for (int64_t i = 0; i < m; ++i) {
    double max_abs = 0.0;
    for (int64_t c = 0; c < k; ++c) max_abs = std::max(max_abs, std::fabs(double{x[i * k + c]}));
    const double a_double = max_abs / 127.0;
    int64_t ties = 0;
    for (int64_t c = 0; c < k; ++c) {
      const double ratio = x[i * k + c] / a_double;
      if (std::round(ratio) != xq[i * k + c]) {
        // Only a near-tie may round differently.
        ASSERT_NEAR(std::fabs(ratio - std::trunc(ratio)), 0.5, 1e-5) << name;
        ++ties;
      }
    }
    for (int64_t n = 0; n < n_rows; ++n) {
      float s;
      std::memcpy(&s, w.scales() + 4 * n, 4);
      const double got = y[i * n_rows + n];
      const double r = ref[i * n_rows + n];
      ASSERT_TRUE(std::isfinite(got)) << name << " element " << i << "," << n;
      const double unit = a_double * s;
      ASSERT_NEAR(got, r, unit * ties + 1e-6 * (std::fabs(r) + unit))
          << name << " element " << i << "," << n;
    }
  }
}

TEST(CpuMatMulTest, MatchesReferenceOnOddShapes) {
  std::mt19937 rng(42);
  for (const Case& c : kCases) {
    const int64_t align = KAlignment(c.scheme);
    for (int64_t k : {align, int64_t{640}, int64_t{1152}}) {
      for (int64_t n : {1, 24, 200}) {
        const WeightShape shape{n, k, c.group_size, c.zero_points, c.act_order};
        const std::vector<uint8_t> bytes = RandomPacked(c, shape, rng);
        absl::StatusOr<PackedWeight> w = ViewPacked(c.scheme, shape, bytes);
        ASSERT_TRUE(w.ok()) << w.status();
        for (int64_t m : kRows) {
          const std::vector<float> x = Random(m * k, rng, 1.0f);
          const std::vector<float> y = PoisonedMatMul(*w, x, m, static_cast<int>(m % 3) + 1);
          const std::string name = Name(c, m, n, k);
          if (c.scheme == Scheme::kW2A8) {
            ExpectCloseTernary(*w, x, m, y, name);
          } else {
            ExpectCloseFloat(*w, x, m, y, name);
          }
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Zero points over their whole range [-8, 8] (the quantizer never writes 8, GPTQ's "minus
// one" storage can), with every code, against the float64 reference.
TEST(CpuMatMulTest, W4A16ZeroPointsOverTheirWholeRange) {
  std::mt19937 rng(5);
  for (int32_t group_size : {0, 128}) {
    const WeightShape shape{37, 384, group_size, true};
    std::vector<uint8_t> bytes(PackedBytes(Scheme::kW4A16, shape));
    const int64_t groups = shape.GroupsPerRow();
    for (int64_t i = 0; i < shape.n * shape.k / 2; ++i) bytes[i] = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t i = 0; i < shape.n * groups; ++i) {
      const uint16_t h = FloatToHalf(scale(rng));
      std::memcpy(&bytes[shape.n * shape.k / 2 + 2 * i], &h, 2);
      bytes[shape.n * shape.k / 2 + 2 * shape.n * groups + i] =
          static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(i % 17) - 8));
    }
    absl::StatusOr<PackedWeight> w = ViewPacked(Scheme::kW4A16, shape, bytes);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int64_t m : {1, 7}) {
      const std::vector<float> x = Random(m * shape.k, rng, 1.0f);
      ExpectCloseFloat(*w, x, m, PoisonedMatMul(*w, x, m, 2),
                       Name({Scheme::kW4A16, group_size, true}, m, shape.n, shape.k));
      if (HasFatalFailure()) return;
    }
  }
}

// Each output element is computed by one thread in a fixed order, so the split over
// threads cannot change a single bit.
TEST(CpuMatMulTest, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    const WeightShape shape{203, 512, c.group_size, c.zero_points, c.act_order};
    const std::vector<uint8_t> bytes = RandomPacked(c, shape, rng);
    const PackedWeight w{c.scheme, shape, bytes};
    const int64_t m = 5;
    const std::vector<float> x = Random(m * shape.k, rng, 1.0f);
    const std::vector<float> one = PoisonedMatMul(w, x, m, 1);
    for (int threads : {2, 3, 16, 0}) {
      const std::vector<float> many = PoisonedMatMul(w, x, m, threads);
      ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * 4), 0)
          << SchemeName(c.scheme) << " threads " << threads;
    }
  }
}

TEST(CpuMatMulTest, ConcurrentCallsAgree) {
  std::mt19937 rng(9);
  const Case c{Scheme::kW4A16, 128};
  const WeightShape shape{100, 1024, 128};
  const std::vector<uint8_t> bytes = RandomPacked(c, shape, rng);
  const PackedWeight w{c.scheme, shape, bytes};
  const int64_t m = 4;
  const std::vector<float> x = Random(m * shape.k, rng, 1.0f);
  const std::vector<float> expected = PoisonedMatMul(w, x, m, 1);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        mismatches[t] += PoisonedMatMul(w, x, m, 0) != expected;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << t;
}

// Zero activation rows give zero outputs (W2A8's activation scale is 0 there) and leave
// the other rows alone.
TEST(CpuMatMulTest, ZeroActivationRow) {
  std::mt19937 rng(3);
  for (const Case& c : kCases) {
    const WeightShape shape{9, 256, c.group_size, c.zero_points, c.act_order};
    const std::vector<uint8_t> bytes = RandomPacked(c, shape, rng);
    const PackedWeight w{c.scheme, shape, bytes};
    std::vector<float> x = Random(3 * shape.k, rng, 1.0f);
    std::fill(x.begin() + shape.k, x.begin() + 2 * shape.k, 0.0f);
    const std::vector<float> y = PoisonedMatMul(w, x, 3, 2);
    for (int64_t n = 0; n < shape.n; ++n) {
      EXPECT_EQ(y[shape.n + n], 0.0f) << SchemeName(c.scheme);
      EXPECT_NE(y[n], 0.0f) << SchemeName(c.scheme);
    }
  }
}

}  // namespace
}  // namespace qmm
