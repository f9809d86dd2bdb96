// Host side of the W2A8 device layout: canonical packed codes -> the unit order of
// w2a8_layout.h.
#include <cstring>

#include "kernels/cuda/w2a8.h"
#include "kernels/cuda/w2a8_layout.h"

namespace qmm::cuda {

std::vector<uint8_t> RepackW2A8(const PackedWeight& packed) {
  const w2a8::Geometry geo(packed.shape.n, packed.shape.k);
  std::vector<uint8_t> out(geo.device_bytes(), 0);
  const int64_t row_bytes = geo.k / 4;
  const uint8_t* codes = packed.values();
  uint8_t* dst = out.data();
  for (int64_t group = 0; group < geo.row_groups; ++group) {
    for (int64_t kb = 0; kb < geo.k_blocks; ++kb) {
      for (int r = 0; r < w2a8::kBlocksPerGroup; ++r) {
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4;
          const int t = lane % 4;
          for (int w = 0; w < 4; ++w) {
            const int64_t row =
                group * w2a8::kRowsPerGroup + r * w2a8::kRowsPerBlock + g + 8 * (w & 1);
            if (row >= geo.n) {
              dst += 4;
              continue;
            }
            // Canonical byte k / 4 for j = 0; field j is the next byte on, and every k of
            // this word has k % 4 == b, the byte's position in the word.
            const uint8_t* src = codes + row * row_bytes + kb * 32 + (w >> 1) * 16 + t * 4;
            for (int b = 0; b < 4; ++b) {
              uint8_t v = 0;
              for (int j = 0; j < 4; ++j) v |= ((src[j] >> (2 * b)) & 3) << (2 * j);
              *dst++ = v;
            }
          }
        }
      }
    }
  }
  std::memcpy(dst, packed.scales(), static_cast<size_t>(geo.n) * 4);
  return out;
}

}  // namespace qmm::cuda
