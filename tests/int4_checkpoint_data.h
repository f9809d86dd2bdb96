// Test data for the int4 checkpoint encodings (kernels/int4_checkpoint.h): a random int4
// weight, symmetric or with zero points, in activation order or not, and its GPTQ, AWQ and
// compressed-tensors tensors
// and canonical W4A16 bytes, each written here from the formats' descriptions
// (proto/qmm/v1/qmm.proto), not from the converter, so that the tests compare two
// independent readings.
#ifndef QMM_TESTS_INT4_CHECKPOINT_DATA_H_
#define QMM_TESTS_INT4_CHECKPOINT_DATA_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::testing {

struct Int4Weight {
  WeightShape shape;
  std::vector<int> q;    // [N, K] in [-8, 7]
  std::vector<float> s;  // [N, G], values the checkpoint's scale dtype holds exactly
  std::vector<int> z;    // [N, G] canonical zero points in [-8, 8] (shape.zero_points), or empty
  std::vector<int32_t> group_of;  // [K] each input feature's group (shape.act_order), or empty

  int64_t Groups() const { return shape.group_size == 0 ? 1 : shape.k / shape.group_size; }
  int Zero(int64_t n, int64_t g) const { return z.empty() ? 0 : z[n * Groups() + g]; }
  int64_t Group(int64_t c) const {
    return !group_of.empty() ? group_of[c] : shape.group_size == 0 ? 0 : c / shape.group_size;
  }
  // The canonical form's column order: features sorted by group, in k order within one.
  std::vector<int32_t> StoredOrder() const {
    std::vector<int32_t> order(shape.k);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return Group(a) < Group(b); });
    return order;
  }
};

// Random q covering both ends of the range, and scales of either sign in [1e-3, 0.1)
// rounded to `scale_dtype`.
inline Int4Weight RandomInt4Weight(int64_t n, int64_t k, int32_t group_size, DType scale_dtype,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  Int4Weight w{{n, k, group_size}, std::vector<int>(n * k), {}, {}, {}};
  for (int& v : w.q) v = static_cast<int>(rng() % 16) - 8;
  w.q[0] = -8;
  w.q[n * k - 1] = 7;
  std::uniform_real_distribution<float> magnitude(1e-3f, 0.1f);
  w.s.resize(n * w.Groups());
  for (float& v : w.s) {
    float value = (rng() % 2 ? -1.0f : 1.0f) * magnitude(rng);
    if (scale_dtype == DType::kBF16) value = Bf16ToFloat(FloatToBf16(value));
    if (scale_dtype == DType::kF16) value = HalfToFloat(FloatToHalf(value));
    v = value;
  }
  return w;
}

// `w` with random zero points in [lo, hi], both ends included.
inline Int4Weight WithZeroPoints(Int4Weight w, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  w.shape.zero_points = true;
  w.z.resize(w.s.size());
  for (int& v : w.z) v = lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1));
  w.z.front() = lo;
  w.z.back() = hi;
  return w;
}

// `w` (group size 128) in activation order: its features dealt into the groups at random,
// 128 each, as GPTQ's desc_act leaves them.
inline Int4Weight WithActOrder(Int4Weight w, uint32_t seed) {
  std::vector<int32_t> features(w.shape.k);
  std::iota(features.begin(), features.end(), 0);
  std::shuffle(features.begin(), features.end(), std::mt19937(seed));
  w.shape.act_order = true;
  w.group_of.resize(w.shape.k);
  for (int64_t i = 0; i < w.shape.k; ++i) {
    w.group_of[features[i]] = static_cast<int32_t>(i / w.shape.group_size);
  }
  return w;
}

inline void AppendWord(std::vector<uint8_t>* out, uint32_t word) {
  for (int b = 0; b < 4; ++b) out->push_back(static_cast<uint8_t>(word >> (8 * b)));
}

inline void AppendScale(std::vector<uint8_t>* out, DType dtype, float v) {
  if (dtype == DType::kF32) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    AppendWord(out, bits);
    return;
  }
  const uint16_t bits = dtype == DType::kF16 ? FloatToHalf(v) : FloatToBf16(v);
  out->push_back(static_cast<uint8_t>(bits & 0xff));
  out->push_back(static_cast<uint8_t>(bits >> 8));
}

// One linear layer's tensors, little-endian; `zeros` is empty for symmetric pack-quantized.
struct Int4CheckpointTensors {
  std::vector<uint8_t> codes;   // qweight int32 [K/8, N] or weight_packed int32 [N, K/8]
  std::vector<uint8_t> zeros;   // qzeros int32 [G, N/8] or weight_zero_point int32 [N/8, G]
  std::vector<uint8_t> scales;  // [G, N] (GPTQ) or [N, G]
  std::vector<uint8_t> g_idx;   // int32 [K], each feature's group

  // The upload payload: the tensors in that order, with or without the group index.
  std::vector<uint8_t> Payload(bool with_g_idx) const {
    std::vector<uint8_t> out = codes;
    out.insert(out.end(), zeros.begin(), zeros.end());
    out.insert(out.end(), scales.begin(), scales.end());
    if (with_g_idx) out.insert(out.end(), g_idx.begin(), g_idx.end());
    return out;
  }
};

// Eight values u = q + 8 an int32, value j in bits 4j..4j+3, for k = 8i..8i+7 of row n.
inline uint32_t PackedWord(const Int4Weight& w, int64_t n, int64_t i) {
  uint32_t word = 0;
  for (int j = 0; j < 8; ++j) {
    word |= static_cast<uint32_t>(w.q[n * w.shape.k + 8 * i + j] + 8) << (4 * j);
  }
  return word;
}

inline std::vector<uint8_t> GroupIndex(const Int4Weight& w) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < w.shape.k; ++i) AppendWord(&out, static_cast<uint32_t>(w.Group(i)));
  return out;
}

// GPTQ's tensors, each zero point z + 8 stored as z + `stored_zero` (7 for "gptq", 8 for
// "gptq_v2").
inline Int4CheckpointTensors GptqTensors(const Int4Weight& w, DType scale_dtype,
                                         uint32_t stored_zero) {
  const int64_t n = w.shape.n, k = w.shape.k, groups = w.Groups();
  Int4CheckpointTensors t;
  for (int64_t i = 0; i < k / 8; ++i) {
    for (int64_t c = 0; c < n; ++c) AppendWord(&t.codes, PackedWord(w, c, i));
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < n / 8; ++i) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        word |= static_cast<uint32_t>(w.Zero(8 * i + j, g) + static_cast<int>(stored_zero))
                << (4 * j);
      }
      AppendWord(&t.zeros, word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n; ++c) AppendScale(&t.scales, scale_dtype, w.s[c * groups + g]);
  }
  t.g_idx = GroupIndex(w);
  return t;
}

// AWQ's tensors: qweight [K, N/8] and qzeros [G, N/8] with value j of a word in column
// 8i + {0, 2, 4, 6, 1, 3, 5, 7}[j], zero points stored as z + 8; scales [G, N].
inline Int4CheckpointTensors AwqTensors(const Int4Weight& w, DType scale_dtype) {
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t n = w.shape.n, k = w.shape.k, groups = w.Groups();
  Int4CheckpointTensors t;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t i = 0; i < n / 8; ++i) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        word |= static_cast<uint32_t>(w.q[(8 * i + kOrder[j]) * k + c] + 8) << (4 * j);
      }
      AppendWord(&t.codes, word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < n / 8; ++i) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        word |= static_cast<uint32_t>(w.Zero(8 * i + kOrder[j], g) + 8) << (4 * j);
      }
      AppendWord(&t.zeros, word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n; ++c) AppendScale(&t.scales, scale_dtype, w.s[c * groups + g]);
  }
  return t;
}

// compressed-tensors' tensors; with zero points weight_zero_point [N/8, G], value j of word
// [i][g] the zero point of row 8i + j stored as z + 8.
inline Int4CheckpointTensors PackQuantizedTensors(const Int4Weight& w, DType scale_dtype) {
  Int4CheckpointTensors t;
  for (int64_t c = 0; c < w.shape.n; ++c) {
    for (int64_t i = 0; i < w.shape.k / 8; ++i) AppendWord(&t.codes, PackedWord(w, c, i));
  }
  for (int64_t i = 0; !w.z.empty() && i < w.shape.n / 8; ++i) {
    for (int64_t g = 0; g < w.Groups(); ++g) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j)
        word |= static_cast<uint32_t>(w.Zero(8 * i + j, g) + 8) << (4 * j);
      AppendWord(&t.zeros, word);
    }
  }
  for (float s : w.s) AppendScale(&t.scales, scale_dtype, s);
  t.g_idx = GroupIndex(w);
  return t;
}

// The canonical W4A16 form of the weight (its scales rounded to fp16): two's complement
// nibbles, even stored column low, then the scales [N, G], then any zero points [N, G] as
// int8, then in activation order the stored order as int32.
inline std::vector<uint8_t> CanonicalInt4(const Int4Weight& w) {
  const int64_t n = w.shape.n, k = w.shape.k;
  const std::vector<int32_t> order = w.StoredOrder();
  std::vector<uint8_t> out(n * k / 2, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = r * k + j;
      out[i / 2] |= static_cast<uint8_t>((w.q[r * k + order[j]] & 15) << (4 * (i % 2)));
    }
  }
  for (float s : w.s) AppendScale(&out, DType::kF16, s);
  for (int z : w.z) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(z)));
  if (w.shape.act_order) {
    for (int32_t feature : order) AppendWord(&out, static_cast<uint32_t>(feature));
  }
  return out;
}

}  // namespace qmm::testing

#endif  // QMM_TESTS_INT4_CHECKPOINT_DATA_H_
