// Host side of W8A16: the device layout described in w8a16.h.
#include <cstring>

#include "kernels/cuda/w8a16.h"
#include "kernels/cuda/wgmma_layout.h"

namespace qmm::cuda {
namespace {

constexpr int64_t kRowsPerTile = 16;
constexpr int64_t kChunkK = 32;
constexpr int64_t kChunkBytes = 512;

int64_t RowTiles(const WeightShape& shape) { return (shape.n + kRowsPerTile - 1) / kRowsPerTile; }

}  // namespace

int64_t W8A16DeviceBytes(const WeightShape& shape) {
  const int64_t rows = RowTiles(shape) * kRowsPerTile;
  return rows * shape.k + rows * static_cast<int64_t>(sizeof(float));
}

std::vector<uint8_t> RepackW8A16(const PackedWeight& packed) {
  const WeightShape& shape = packed.shape;
  const int64_t tiles = RowTiles(shape);
  const int64_t chunks = shape.k / kChunkK;
  const int64_t rows = tiles * kRowsPerTile;
  // 0x80 is q = 0 in the biased encoding: padding rows contribute nothing.
  std::vector<uint8_t> out(W8A16DeviceBytes(shape), 0x80);
  const uint8_t* q = packed.values();
  for (int64_t n = 0; n < shape.n; ++n) {
    const int64_t tile = n / kRowsPerTile;
    const int64_t g = n % 8;
    const int64_t upper = (n % kRowsPerTile) / 8;  // row r1 = r0 + 8 of its lane
    for (int64_t k = 0; k < shape.k; k += 4) {
      const int64_t chunk = k / kChunkK;
      const int64_t in_chunk = k % kChunkK;
      const int64_t lane = 4 * g + in_chunk / 8;
      const int64_t word = 2 * ((in_chunk % 8) / 4) + upper;
      uint32_t v;
      std::memcpy(&v, q + n * shape.k + k, 4);
      v ^= 0x80808080u;  // two's complement q -> q + 128, byte by byte
      std::memcpy(out.data() + (tile * chunks + chunk) * kChunkBytes + lane * 16 + word * 4, &v, 4);
    }
  }
  // Scales: the packed fp32 values, then zeros for the padding rows.
  uint8_t* scales = out.data() + rows * shape.k;
  std::memcpy(scales, packed.scales(), shape.n * sizeof(float));
  std::memset(scales + shape.n * sizeof(float), 0, (rows - shape.n) * sizeof(float));
  return out;
}

size_t W8A16WorkspaceBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>(PermutedXBytes(m, shape.k));
}

}  // namespace qmm::cuda
