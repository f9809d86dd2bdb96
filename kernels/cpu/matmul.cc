#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/activation_quant.h"
#include "kernels/cpu/parallel.h"

namespace qmm {
namespace {

// Weight rows are handled kTile at a time so each activation element loaded feeds kTile
// products; a K block of those rows is decoded once (to fp32, or int16 for W2A8) and
// reused for every activation row. kBlock is a multiple of every KAlignment and of the
// W4A16 group, so blocks never split a group or a packed byte, and every block length is a
// multiple of 8 (K % 8 == 0 for every scheme).
constexpr int kTile = 4;
constexpr int64_t kBlock = 512;
// Enough multiply-adds per parallel chunk to pay for handing it to another thread.
constexpr int64_t kMinChunkWork = int64_t{1} << 18;

// Explicit 128-bit vectors (GCC/Clang vector extensions): strict fp32 semantics forbid the
// compiler to split one running sum into lanes itself, and these map onto SSE2 or NEON
// without -march flags.
using F32x4 = float __attribute__((vector_size(16)));
using I16x8 = int16_t __attribute__((vector_size(16)));

template <typename V, typename T>
inline V LoadVec(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// out[t] = sum_i x[i] * w[t][i] for the kTile decoded rows, with fp32 partial sums in
// 8 lanes per row.
inline void DotTile(const float* x, const float (*w)[kBlock], int64_t len, float* out) {
  F32x4 acc[kTile][2] = {};
  for (int64_t i = 0; i < len; i += 8) {
    const F32x4 x0 = LoadVec<F32x4>(x + i);
    const F32x4 x1 = LoadVec<F32x4>(x + i + 4);
    for (int t = 0; t < kTile; ++t) {
      acc[t][0] += x0 * LoadVec<F32x4>(w[t] + i);
      acc[t][1] += x1 * LoadVec<F32x4>(w[t] + i + 4);
    }
  }
  for (int t = 0; t < kTile; ++t) {
    const F32x4 sum = acc[t][0] + acc[t][1];
    out[t] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
}

// The W2A8 block product in exact integers: |xq * t| <= 127, and each of the 8 int16
// lanes sums at most kBlock / 8 = 64 of them (<= 8128), so nothing overflows before the
// block's sums are widened into the int32 accumulators.
static_assert(kBlock / 8 * 127 <= 32767);
inline void DotTileInt(const int16_t* x, const int16_t (*w)[kBlock], int64_t len, int32_t* out) {
  I16x8 acc[kTile] = {};
  for (int64_t i = 0; i < len; i += 8) {
    const I16x8 xv = LoadVec<I16x8>(x + i);
    for (int t = 0; t < kTile; ++t) acc[t] += xv * LoadVec<I16x8>(w[t] + i);
  }
  for (int t = 0; t < kTile; ++t) {
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) sum += acc[t][j];
    out[t] += sum;
  }
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Exact binary16 -> binary32 (the same mapping as HalfToFloat) without branches, so the
// decode loop vectorises: the half's bits placed in a float's low exponent bits are the
// value times 2^-112 (subnormals included), and an all-ones half exponent maps to
// 143 after the scaling, which OR-ing in the full exponent turns into Inf/NaN.
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t magnitude = h & 0x7fff;
  const uint32_t scaled = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude << 13) * 0x1p112f);
  const uint32_t special = -static_cast<uint32_t>(magnitude >= 0x7c00) & 0x7f800000;
  return std::bit_cast<float>(scaled | special | sign);
}

// Byte -> its four ternary values (bits 2j..2j+1 hold t + 1 for k = 4b + j).
struct TernaryTable {
  int16_t values[256][4];
};
constexpr TernaryTable MakeTernaryTable() {
  TernaryTable table{};
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 4; ++j) table.values[b][j] = static_cast<int16_t>(((b >> (2 * j)) & 3) - 1);
  }
  return table;
}
constexpr TernaryTable kTernary = MakeTernaryTable();

// Decoders: write elements [k0, k0 + len) of weight row n as fp32 into out, and give the
// factor applied to the row's finished sum.
struct Fp16Rows {
  const PackedWeight& w;
  void Decode(int64_t n, int64_t k0, int64_t len, float* out) const {
    const uint8_t* src = w.values() + 2 * (n * w.shape.k + k0);
    for (int64_t i = 0; i < len; ++i) out[i] = HalfBitsToFloat(Load<uint16_t>(src + 2 * i));
  }
  float RowScale(int64_t) const { return 1.0f; }
};

struct Bf16Rows {
  const PackedWeight& w;
  void Decode(int64_t n, int64_t k0, int64_t len, float* out) const {
    const uint8_t* src = w.values() + 2 * (n * w.shape.k + k0);
    for (int64_t i = 0; i < len; ++i) {
      out[i] = std::bit_cast<float>(static_cast<uint32_t>(Load<uint16_t>(src + 2 * i)) << 16);
    }
  }
  float RowScale(int64_t) const { return 1.0f; }
};

struct W8Rows {
  const PackedWeight& w;
  void Decode(int64_t n, int64_t k0, int64_t len, float* out) const {
    const auto* src = reinterpret_cast<const int8_t*>(w.values() + n * w.shape.k + k0);
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<float>(src[i]);
  }
  float RowScale(int64_t n) const { return Load<float>(w.scales() + 4 * n); }
};

struct W4Rows {
  const PackedWeight& w;
  // Group scales and zero points vary along K, so they are folded into the decoded values
  // ((q - z) * s is exact in fp32: a 5-bit integer times an 11-bit fp16 significand).
  void Decode(int64_t n, int64_t k0, int64_t len, float* out) const {
    const int64_t g = w.shape.GroupLength();
    const int64_t groups = w.shape.GroupsPerRow();
    const uint8_t* src = w.values() + (n * w.shape.k + k0) / 2;
    const uint8_t* scales = w.scales() + 2 * n * groups;
    const int8_t* zero_points = w.zero_points() == nullptr ? nullptr : w.zero_points() + n * groups;
    for (int64_t start = 0; start < len;) {
      const int64_t k = k0 + start;
      const int64_t end = std::min(len, start + g - k % g);
      const float s = HalfBitsToFloat(Load<uint16_t>(scales + 2 * (k / g)));
      const int z = zero_points == nullptr ? 0 : zero_points[k / g];
      const uint8_t* bytes = src + start / 2;
      float* o = out + start;
      for (int64_t b = 0; b < (end - start) / 2; ++b) {
        const int8_t byte = static_cast<int8_t>(bytes[b]);
        // Move the low nibble to the top of an int8 and shift back to sign-extend it.
        o[2 * b] = static_cast<float>((static_cast<int8_t>(byte << 4) >> 4) - z) * s;
        o[2 * b + 1] = static_cast<float>((byte >> 4) - z) * s;
      }
      start = end;
    }
  }
  float RowScale(int64_t) const { return 1.0f; }
};

template <typename Rows>
void FloatTiles(const Rows& rows, const float* x, int64_t m, float* y, int64_t tile_begin,
                int64_t tile_end) {
  const int64_t n_rows = rows.w.shape.n;
  const int64_t k = rows.w.shape.k;
  alignas(64) float w_block[kTile][kBlock];
  std::vector<float> acc(m * kTile);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t n0 = tile * kTile;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k0 = 0; k0 < k; k0 += kBlock) {
      const int64_t len = std::min(kBlock, k - k0);
      // A ragged last tile repeats its last row; the extra sums are computed, not stored.
      for (int t = 0; t < kTile; ++t) {
        rows.Decode(std::min(n0 + t, n_rows - 1), k0, len, w_block[t]);
      }
      for (int64_t i = 0; i < m; ++i) {
        float part[kTile];
        DotTile(x + i * k + k0, w_block, len, part);
        for (int t = 0; t < kTile; ++t) acc[i * kTile + t] += part[t];
      }
    }
    for (int t = 0; t < kTile && n0 + t < n_rows; ++t) {
      const float scale = rows.RowScale(n0 + t);
      for (int64_t i = 0; i < m; ++i) y[i * n_rows + n0 + t] = acc[i * kTile + t] * scale;
    }
  }
}

void W2A8Tiles(const PackedWeight& w, const int16_t* xq, const float* x_scale, int64_t m, float* y,
               int64_t tile_begin, int64_t tile_end) {
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  alignas(64) int16_t w_block[kTile][kBlock];
  std::vector<int32_t> acc(m * kTile);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t n0 = tile * kTile;
    std::fill(acc.begin(), acc.end(), 0);
    for (int64_t k0 = 0; k0 < k; k0 += kBlock) {
      const int64_t len = std::min(kBlock, k - k0);
      for (int t = 0; t < kTile; ++t) {
        const uint8_t* src = w.values() + (std::min(n0 + t, n_rows - 1) * k + k0) / 4;
        for (int64_t b = 0; b < len / 4; ++b) {
          std::memcpy(&w_block[t][4 * b], kTernary.values[src[b]], sizeof(kTernary.values[0]));
        }
      }
      for (int64_t i = 0; i < m; ++i) DotTileInt(xq + i * k + k0, w_block, len, &acc[i * kTile]);
    }
    for (int t = 0; t < kTile && n0 + t < n_rows; ++t) {
      const float s = Load<float>(w.scales() + 4 * (n0 + t));
      for (int64_t i = 0; i < m; ++i) {
        y[i * n_rows + n0 + t] = x_scale[i] * s * static_cast<float>(acc[i * kTile + t]);
      }
    }
  }
}

// An act_order weight's stored column j multiplies x[perm[j]]: x in the stored order, so
// that the tiles run as for any W4A16 weight (K floats a row, against N*K products).
std::vector<float> GatherInputs(const PackedWeight& w, const float* x, int64_t m) {
  const int64_t k = w.shape.k;
  std::vector<float> gathered(m * k);
  for (int64_t j = 0; j < k; ++j) {
    const int32_t input = w.Input(j);
    for (int64_t i = 0; i < m; ++i) gathered[i * k + j] = x[i * k + input];
  }
  return gathered;
}

}  // namespace

void CpuMatMul(const PackedWeight& w, const float* x, int64_t m, float* y, int num_threads) {
  const int64_t k = w.shape.k;
  const int64_t tiles = (w.shape.n + kTile - 1) / kTile;
  const int64_t min_chunk = std::max<int64_t>(1, kMinChunkWork / (kTile * k * (m + 1)));
  auto run_float = [&](const auto& rows, const float* inputs = nullptr) {
    if (inputs == nullptr) inputs = x;
    ParallelFor(tiles, min_chunk, num_threads,
                [&](int64_t begin, int64_t end) { FloatTiles(rows, inputs, m, y, begin, end); });
  };
  switch (w.scheme) {
    case Scheme::kFp16:
      run_float(Fp16Rows{w});
      return;
    case Scheme::kBf16:
      run_float(Bf16Rows{w});
      return;
    case Scheme::kW8A16:
      run_float(W8Rows{w});
      return;
    case Scheme::kW4A16:
      if (w.permutation() != nullptr) {
        run_float(W4Rows{w}, GatherInputs(w, x, m).data());
      } else {
        run_float(W4Rows{w});
      }
      return;
    case Scheme::kW2A8: {
      std::vector<int8_t> xq(m * k);
      std::vector<float> x_scale(m);
      QuantizeRowsInt8(x, m, k, xq.data(), x_scale.data());
      // Widened once here so the block products run on int16 lanes.
      const std::vector<int16_t> xq16(xq.begin(), xq.end());
      ParallelFor(tiles, min_chunk, num_threads, [&](int64_t begin, int64_t end) {
        W2A8Tiles(w, xq16.data(), x_scale.data(), m, y, begin, end);
      });
      return;
    }
  }
}

}  // namespace qmm
