// Host side of W4A16: canonical packed form -> the device layout of w4a16_layout.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w4a16_act_order.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_zero_points.h"
#include "kernels/cuda/wgmma_layout.h"
#include "kernels/dtype.h"

namespace qmm::cuda {
namespace {

using w4a16::kBlockBytes;
using w4a16::kBlockK;
using w4a16::kChunkBlocks;
using w4a16::kChunkK;
using w4a16::kGroupChunkBytes;
using w4a16::kGroupScaleBytes;
using w4a16::kGroupStrips;
using w4a16::kStripChunkBytes;
using w4a16::kStripRows;
using w4a16::kStripScaleBytes;

// Offset-binary nibble u = q + 8 of w[n][k] (flipping the sign bit of the 4-bit two's
// complement adds 8); 8 (q = 0) for padding rows.
uint32_t OffsetNibble(const PackedWeight& w, int64_t n, int64_t k) {
  if (n >= w.shape.n) return 8;
  const uint8_t byte = w.values()[n * (w.shape.k / 2) + k / 2];
  return ((k % 2 == 0 ? byte : byte >> 4) & 0xf) ^ 0x8;
}

// The four words (steps) of one lane of one strip's block.
void PackLane(const PackedWeight& w, int64_t row0, int64_t k_block, int lane, uint8_t* dst) {
  const int64_t g = lane / 4;
  const int64_t t = lane % 4;
  for (int step = 0; step < 4; ++step) {
    const int64_t k0 = k_block + 16 * t + 4 * step;
    auto nib = [&](int64_t row, int64_t dk) { return OffsetNibble(w, row0 + row, k0 + dk); };
    const uint32_t word = nib(g, 0) | nib(g + 8, 0) << 4 | nib(g, 2) << 8 | nib(g + 8, 2) << 12 |
                          nib(g, 1) << 16 | nib(g + 8, 1) << 20 | nib(g, 3) << 24 |
                          nib(g + 8, 3) << 28;
    std::memcpy(dst + step * 4, &word, 4);
  }
}

// The gemm scales and row factors (w4a16_layout.h) from the scales region of `out`.
void PackGemmScales(const WeightShape& shape, uint8_t* out) {
  const int64_t groups = w4a16::NumGroups(shape);
  const int64_t scale_groups = w4a16::ScaleGroups(shape);
  const uint8_t* scales = out + w4a16::WeightRegionBytes(shape);
  uint8_t* gemm = out + w4a16::GemmScalesOffset(shape);
  uint8_t* factors = out + w4a16::RowFactorsOffset(shape);
  for (int64_t group = 0; group < groups; ++group) {
    for (int strip = 0; strip < kGroupStrips; ++strip) {
      for (int i = 0; i < kStripRows; ++i) {
        const int64_t at = strip * kStripScaleBytes + w4a16::StripScaleOffset(i);
        const int shift = w4a16::GemmScaleShift(i);
        auto scale = [&](int64_t sg) {
          uint16_t h;
          std::memcpy(&h, scales + (group * scale_groups + sg) * kGroupScaleBytes + at, 2);
          return h;
        };
        float max_abs = 0.0f;
        for (int64_t sg = 0; sg < scale_groups; ++sg) {
          max_abs = std::max(max_abs, std::fabs(HalfToFloat(scale(sg))));
        }
        const int e = w4a16::RowExponent(max_abs, shift);
        for (int64_t sg = 0; sg < scale_groups; ++sg) {
          // A power of two times an fp16 value: exact unless it falls below fp16's normal
          // range (a scale far under its row's largest), where it rounds.
          const uint16_t h = FloatToHalf(std::ldexp(HalfToFloat(scale(sg)), e + shift));
          std::memcpy(gemm + (group * scale_groups + sg) * kGroupScaleBytes + at, &h, 2);
        }
        const float factor = std::ldexp(1.0f, -e);
        std::memcpy(factors + group * w4a16::kGroupRowFactorBytes +
                        strip * w4a16::kStripRowFactorBytes + (i % 8) * 8 + (i / 8) * 4,
                    &factor, 4);
      }
    }
  }
}

// The zero terms region (w4a16_layout.h): -z * s, [scale group][row].
void PackZeroTerms(const PackedWeight& packed, uint8_t* out) {
  const int64_t n = packed.shape.n;
  const int64_t groups = packed.shape.GroupsPerRow();
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t g = 0; g < groups; ++g) {
      uint16_t h;
      std::memcpy(&h, packed.scales() + (row * groups + g) * 2, 2);
      const float term =
          static_cast<float>(-packed.zero_points()[row * groups + g]) * HalfToFloat(h);
      std::memcpy(out + (g * n + row) * 4, &term, 4);
    }
  }
}

// The zero biases regions (w4a16_layout.h), fp16 then bf16, in the scales' order.
void PackZeroBiases(const PackedWeight& packed, uint8_t* out) {
  const WeightShape& shape = packed.shape;
  const int64_t scale_groups = w4a16::ScaleGroups(shape);
  const int64_t region = w4a16::ScaleRegionBytes(shape);
  for (int64_t group = 0; group < w4a16::NumGroups(shape); ++group) {
    for (int64_t sg = 0; sg < scale_groups; ++sg) {
      const int64_t base = (group * scale_groups + sg) * kGroupScaleBytes;
      for (int strip = 0; strip < kGroupStrips; ++strip) {
        for (int i = 0; i < kStripRows; ++i) {
          const int64_t row = (group * kGroupStrips + strip) * kStripRows + i;
          const int z = row < shape.n ? packed.zero_points()[row * scale_groups + sg] : 0;
          // Rows g: 1024 + u in fp16; rows g + 8: (1024 + 16 u) / 16 (Dequant).
          const float f16 = -static_cast<float>((i < 8 ? 1032 : 72) + z);
          const float bf16 = -static_cast<float>(136 + z);
          const int64_t at = base + strip * kStripScaleBytes + w4a16::StripScaleOffset(i);
          const uint16_t h = FloatToHalf(f16);
          const uint16_t b = FloatToBf16(bf16);
          std::memcpy(out + at, &h, 2);
          std::memcpy(out + region + at, &b, 2);
        }
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> RepackW4A16(const PackedWeight& packed) {
  const WeightShape& shape = packed.shape;
  const int64_t groups = w4a16::NumGroups(shape);
  const int64_t chunks = w4a16::NumChunks(shape);
  std::vector<uint8_t> out(w4a16::DeviceBytes(shape), 0);

  for (int64_t group = 0; group < groups; ++group) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      uint8_t* base = out.data() + (group * chunks + chunk) * kGroupChunkBytes;
      for (int strip = 0; strip < kGroupStrips; ++strip) {
        const int64_t row0 = (group * kGroupStrips + strip) * kStripRows;
        for (int block = 0; block < kChunkBlocks; ++block) {
          uint8_t* dst = base + strip * kStripChunkBytes + block * kBlockBytes;
          for (int lane = 0; lane < 32; ++lane) {
            PackLane(packed, row0, chunk * kChunkK + block * kBlockK, lane, dst + lane * 16);
          }
        }
      }
    }
  }

  // Scales: fp16 bit patterns copied as they are, paired (row g, row g + 8).
  const int64_t scale_groups = w4a16::ScaleGroups(shape);
  const int64_t src_groups = shape.GroupsPerRow();
  const uint8_t* scales = packed.scales();
  uint8_t* sbase = out.data() + w4a16::WeightRegionBytes(shape);
  for (int64_t group = 0; group < groups; ++group) {
    for (int64_t sg = 0; sg < scale_groups; ++sg) {
      uint8_t* dst = sbase + (group * scale_groups + sg) * kGroupScaleBytes;
      for (int strip = 0; strip < kGroupStrips; ++strip) {
        for (int i = 0; i < kStripRows; ++i) {
          const int64_t row = (group * kGroupStrips + strip) * kStripRows + i;
          if (row >= shape.n) continue;
          std::memcpy(dst + strip * kStripScaleBytes + w4a16::StripScaleOffset(i),
                      scales + (row * src_groups + sg) * 2, 2);
        }
      }
    }
  }
  if (w4a16::HasGemmScales(shape)) PackGemmScales(shape, out.data());
  if (shape.zero_points) {
    PackZeroTerms(packed, out.data() + w4a16::ZeroTermsOffset(shape));
    PackZeroBiases(packed, out.data() + w4a16::ZeroBiasesOffset(shape));
  }
  if (shape.act_order) {
    std::memcpy(out.data() + w4a16::OrderOffset(shape), packed.permutation(), 4 * shape.k);
  }
  return out;
}

// The workspace: the wgmma kernel's permuted activations, then (256-byte aligned) the
// zero-point term's scratch and the gathered inputs, each where the weight has them.
size_t W4A16ZeroPointScratchOffset(const WeightShape& shape, int64_t m) {
  return (static_cast<size_t>(PermutedXBytes(m, shape.k)) + 255) / 256 * 256;
}

size_t W4A16GatherOffset(const WeightShape& shape, int64_t m) {
  const size_t term = shape.zero_points ? ZeroPointScratchBytes(shape, m) : 0;
  return W4A16ZeroPointScratchOffset(shape, m) + (term + 255) / 256 * 256;
}

size_t W4A16WorkspaceBytes(const WeightShape& shape, int64_t m) {
  if (!shape.zero_points && !shape.act_order)
    return static_cast<size_t>(PermutedXBytes(m, shape.k));
  return W4A16GatherOffset(shape, m) + (shape.act_order ? ActOrderScratchBytes(shape, m) : 0);
}

}  // namespace qmm::cuda
