#include "kernels/bench/random_packed.h"

#include <cstring>
#include <utility>
#include <vector>

#include "kernels/dtype.h"

namespace qmm::bench {
namespace {

// splitmix64: fast, and good enough to defeat any data-dependent shortcut.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Sign, exponent in [e0, e0 + 5], random significand: magnitudes in [2^-6, 1) for fp16
// (e0 = 9) and bf16 (e0 = 121).
uint16_t RandomHalf(uint64_t r, bool bf16) {
  const uint16_t sign = (r & 1) << 15;
  const uint16_t exponent = static_cast<uint16_t>((r >> 1) % 6);
  if (bf16) return sign | ((121 + exponent) << 7) | ((r >> 8) & 0x7f);
  return sign | ((9 + exponent) << 10) | ((r >> 8) & 0x3ff);
}

void FillScalesF32(int64_t count, Rng& rng, uint8_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float s = (0.5f + static_cast<float>(rng.Next() >> 40) / (1 << 25)) / 128.0f;
    std::memcpy(out + 4 * i, &s, 4);
  }
}

}  // namespace

std::vector<uint16_t> RandomHalves(bool bf16, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& h : v) h = RandomHalf(rng.Next(), bf16);
  return v;
}

std::vector<uint8_t> RandomPacked(Scheme scheme, const WeightShape& shape, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> out(PackedBytes(scheme, shape));
  const PackedWeight view{scheme, shape, out};
  const int64_t value_bytes = view.values_bytes();
  uint8_t* v = out.data();
  switch (scheme) {
    case Scheme::kFp16:
    case Scheme::kBf16:
      for (int64_t i = 0; i < value_bytes / 2; ++i) {
        const uint16_t h = RandomHalf(rng.Next(), scheme == Scheme::kBf16);
        std::memcpy(v + 2 * i, &h, 2);
      }
      break;
    case Scheme::kW8A16:
      for (int64_t i = 0; i < value_bytes; i += 8) {
        uint64_t r = rng.Next();
        for (int64_t j = i; j < i + 8 && j < value_bytes; ++j, r >>= 8) {
          v[j] = static_cast<uint8_t>(r) == 0x80 ? 0x81
                                                 : static_cast<uint8_t>(r);  // -128 is not a code
        }
      }
      FillScalesF32(shape.n, rng, v + value_bytes);
      break;
    case Scheme::kW4A16: {
      for (int64_t i = 0; i < value_bytes; i += 8) {
        uint64_t r = rng.Next();
        for (int64_t j = i; j < i + 8 && j < value_bytes; ++j, r >>= 8)
          v[j] = static_cast<uint8_t>(r);
      }
      const int64_t scales = shape.n * shape.GroupsPerRow();
      for (int64_t i = 0; i < scales; ++i) {
        const uint16_t h =
            FloatToHalf((0.5f + static_cast<float>(rng.Next() >> 40) / (1 << 25)) / 16.0f);
        std::memcpy(v + value_bytes + 2 * i, &h, 2);
      }
      // Zero points, if any, over all of [kW4MinZeroPoint, kW4MaxZeroPoint].
      for (int64_t i = 0; shape.zero_points && i < scales; ++i) {
        v[value_bytes + 2 * scales + i] = static_cast<uint8_t>(
            static_cast<int8_t>(kW4MinZeroPoint + static_cast<int>(rng.Next() % 17)));
      }
      // An activation order, if any: a random permutation (Fisher-Yates).
      if (shape.act_order) {
        std::vector<int32_t> order(shape.k);
        for (int64_t j = 0; j < shape.k; ++j) order[j] = static_cast<int32_t>(j);
        for (int64_t j = shape.k - 1; j > 0; --j) {
          std::swap(order[j], order[rng.Next() % static_cast<uint64_t>(j + 1)]);
        }
        std::memcpy(out.data() + out.size() - 4 * shape.k, order.data(), 4 * shape.k);
      }
      break;
    }
    case Scheme::kW2A8:
      for (int64_t i = 0; i < value_bytes; ++i) {
        uint64_t r = rng.Next();
        uint8_t byte = 0;
        for (int j = 0; j < 4; ++j, r >>= 16)
          byte |= static_cast<uint8_t>((r & 0xffff) % 3) << (2 * j);
        v[i] = byte;
      }
      FillScalesF32(shape.n, rng, v + value_bytes);
      break;
  }
  return out;
}

}  // namespace qmm::bench
