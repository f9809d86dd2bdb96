#include "client/random_data.h"

#include <cmath>

namespace qmm {
namespace {

// Separate streams, so a weight and activations drawn with the same seed are unrelated.
constexpr uint64_t kWeightStream = 0x5745494748543031;      // "WEIGHT01"
constexpr uint64_t kRowScaleStream = 0x524f575343414c45;    // "ROWSCALE"
constexpr uint64_t kActivationStream = 0x4143544956415445;  // "ACTIVATE"

// SplitMix64's finalizer: a bijective mix whose outputs pass BigCrush as a counter hash.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Hash(uint64_t stream, uint64_t seed, uint64_t index) {
  return Mix(Mix(stream ^ Mix(seed)) + index * 0x9e3779b97f4a7c15ULL);
}

// Irwin-Hall(4) from four 16-bit uniforms, rescaled to variance 1: bell-shaped, bounded by
// 2*sqrt(3), exact to compute.
double BellNoise(uint64_t bits) {
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += (static_cast<double>((bits >> (16 * i)) & 0xffff) + 0.5);
  constexpr double kSqrt3 = 1.7320508075688772;
  return (sum / 65536.0 - 2.0) * kSqrt3;
}

// Uniform in [0, 1) with 53 bits.
double Uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; }

}  // namespace

std::vector<float> RandomWeightValues(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(n * k));
  const double inv_sqrt_k = 1.0 / std::sqrt(static_cast<double>(k));
  for (int64_t r = 0; r < n; ++r) {
    const double row_scale = (0.5 + Uniform(Hash(kRowScaleStream, seed, r))) * inv_sqrt_k;
    for (int64_t c = 0; c < k; ++c) {
      const uint64_t index = static_cast<uint64_t>(r * k + c);
      w[index] = static_cast<float>(row_scale * BellNoise(Hash(kWeightStream, seed, index)));
    }
  }
  return w;
}

std::vector<float> RandomActivationValues(int64_t m, int64_t k, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(m * k));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(BellNoise(Hash(kActivationStream, seed, i)));
  }
  return x;
}

std::vector<int32_t> RandomTokenIds(int64_t m, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(m);
  uint64_t state = seed;
  for (int32_t& id : ids) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

}  // namespace qmm
