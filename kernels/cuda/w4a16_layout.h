// The W4A16 kernel's device layout, shared by the host repack and the kernel.
//
// Rows of W are taken 16 at a time ("strips") so that one strip fills the M slot of
// mma.m16n8k16 and the tokens take its N slot; 8 strips make a "group" of 128 rows (N is
// padded with zero rows to a multiple of 128). K is taken 64 at a time ("blocks"): one
// 16-byte load per lane of a warp holds one strip's block, i.e. the A fragments of four
// k16 MMA steps; two blocks make a "chunk" of 128 k, one pipeline stage and one scale
// group. A group's chunk (8 KB) and its scales (256 bytes) are contiguous, so one bulk
// copy each fills a stage.
//
// Inside a block the k order is permuted (the same permutation on x, so the product is
// unchanged) so that lane (g = lane / 4, t = lane % 4) owns the contiguous k range
// [16t, 16t + 16): its B fragments for all four steps are then two 16-byte loads of x.
// Step s of lane (g, t) covers k = 16t + 4s + {0, 1, 2, 3}; the mma's logical columns
// {2t, 2t+1} map to the first two and {2t+8, 2t+9} to the last two.
//
// Bytes, in order:
//   weights: [group][chunk][strip][block][lane][step s] uint32 words,
//     NumGroups * K/128 * 8 KB. Word (lane (g, t), step s) holds offset-binary nibbles
//     u = q + 8 so that the LOP3 magic-number dequant yields the four A registers in order:
//       nibble 0, 4: row g,     k = 16t+4s+0, +1   (A register 0)
//       nibble 1, 5: row g + 8, k = 16t+4s+0, +1   (A register 1)
//       nibble 2, 6: row g,     k = 16t+4s+2, +3   (A register 2)
//       nibble 3, 7: row g + 8, k = 16t+4s+2, +3   (A register 3)
//   scales:  [group][scale group][strip][g] pairs of fp16 (s[row g], s[row g + 8]),
//     NumGroups * ScaleGroups * 256 bytes; ScaleGroups is K/128 for group_size 128 and 1
//     for per-row scales. Padding rows have scale 0 and u = 8 (q = 0).
//   With group_size 128 two more regions, for the wgmma GEMM on fp16 activations
//   (w4a16_wgmma.cuh), which dequantizes by one fma a pair of weights where the decode
//   kernels take two (w4a16_ptx.cuh, DequantScaledF16):
//   gemm scales: the scales' region again, each pair (s[row g] * 2^(e[row g] + 24),
//     s[row g + 8] * 2^(e[row g + 8] + 20)) in fp16, e[row] the row's exponent
//     (RowExponent below);
//   row factors: [group][strip][g] pairs of fp32 (2^-e[row g], 2^-e[row g + 8]),
//     NumGroups * 512 bytes, which multiply the GEMM's sums.
//   With zero points (WeightShape::zero_points) three more regions; the regions above are
//   the symmetric weight of the same codes and scales, which the kernels that do not take
//   zero points stream, with the zero-point term as their residual (w4a16_zero_points.h):
//   zero terms: [scale group][row] fp32 -z[row][scale group] * s[row][scale group] (exact:
//     a 5-bit integer times an fp16 value), ScaleGroups * N * 4 bytes, rows not padded;
//     what the term reads.
//   zero biases, fp16 then bf16: each laid out as the scales (256-byte aligned), the pair
//     of a row g and its row g + 8 the two biases that the decode kernels' dequantization
//     adds in place of the symmetric one (w4a16_ptx.cuh Dequant), so that it yields
//     q - z (the wgmma GEMM's too, w4a16_wgmma.cuh WgmmaZeroPoints): fp16
//     (-(1032 + z[row g]), -(72 + z[row g + 8])), bf16 (-(136 + z[row g]),
//     -(136 + z[row g + 8])), all exact; padding rows z = 0.
//   In activation order (WeightShape::act_order) the canonical form's order last, which
//   only the gather of the inputs reads (w4a16_act_order.h); the regions above hold the
//   stored columns as any weight's:
//   order: K int32, stored column j multiplying input feature perm[j], 256-byte aligned.
#ifndef QMM_KERNELS_CUDA_W4A16_LAYOUT_H_
#define QMM_KERNELS_CUDA_W4A16_LAYOUT_H_

#include <cmath>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::cuda::w4a16 {

inline constexpr int kStripRows = 16;
inline constexpr int kGroupStrips = 8;
inline constexpr int kGroupRows = kStripRows * kGroupStrips;
inline constexpr int kBlockK = 64;
inline constexpr int kBlockBytes = 512;  // 32 lanes x 16 bytes
inline constexpr int kChunkK = 128;
inline constexpr int kChunkBlocks = kChunkK / kBlockK;
static_assert(kChunkK == kW4GroupSize, "a pipeline stage must hold exactly one scale group");
inline constexpr int kStripChunkBytes = kChunkBlocks * kBlockBytes;       // 1 KB
inline constexpr int kGroupChunkBytes = kGroupStrips * kStripChunkBytes;  // 8 KB
inline constexpr int kStripScaleBytes = 32;                               // 16 fp16 scales
inline constexpr int kGroupScaleBytes = kGroupStrips * kStripScaleBytes;  // 256 bytes

constexpr int64_t NumGroups(const WeightShape& s) { return (s.n + kGroupRows - 1) / kGroupRows; }
constexpr int64_t NumChunks(const WeightShape& s) { return s.k / kChunkK; }
constexpr int64_t ScaleGroups(const WeightShape& s) { return s.group_size == 0 ? 1 : NumChunks(s); }
constexpr int64_t WeightRegionBytes(const WeightShape& s) {
  return NumGroups(s) * NumChunks(s) * kGroupChunkBytes;
}
// Floats of one row set's outputs in the decode kernel's stream-K grid (decode_stream.cuh):
// two strips by 8T tokens.
constexpr int StreamTileFloats(int t) { return 2 * kStripRows * 8 * t; }

// Where row i of a strip finds its fp16 scale in the strip's 32 bytes: half i / 8 of
// pair i % 8 (the scales and the gemm scales alike).
constexpr int StripScaleOffset(int i) { return (i % 8) * 4 + (i / 8) * 2; }
// The power of two of row i's gemm scales over its exponent e: 2^(e + 24) for the rows g of
// the pairs, 2^(e + 20) for the rows g + 8 (the nibbles the dequantization masks in place).
constexpr int GemmScaleShift(int i) { return i < 8 ? 24 : 20; }

inline constexpr int kStripRowFactorBytes = 64;                                   // 16 fp32
inline constexpr int kGroupRowFactorBytes = kGroupStrips * kStripRowFactorBytes;  // 512 bytes

constexpr int64_t ScaleRegionBytes(const WeightShape& s) {
  return NumGroups(s) * ScaleGroups(s) * kGroupScaleBytes;
}
// What the decode kernels read: the weights and the scales.
constexpr int64_t DecodeBytes(const WeightShape& s) {
  return WeightRegionBytes(s) + ScaleRegionBytes(s);
}
constexpr bool HasGemmScales(const WeightShape& s) { return s.group_size != 0; }
constexpr int64_t GemmScalesOffset(const WeightShape& s) { return DecodeBytes(s); }
constexpr int64_t RowFactorsOffset(const WeightShape& s) {
  return GemmScalesOffset(s) + (HasGemmScales(s) ? ScaleRegionBytes(s) : 0);
}
constexpr int64_t ZeroTermsOffset(const WeightShape& s) {
  return RowFactorsOffset(s) + (HasGemmScales(s) ? NumGroups(s) * kGroupRowFactorBytes : 0);
}
constexpr int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }
// The fp16 zero biases; the bf16 ones follow them, ScaleRegionBytes on.
constexpr int64_t ZeroBiasesOffset(const WeightShape& s) {
  return Align256(ZeroTermsOffset(s) + (s.zero_points ? ScaleGroups(s) * s.n * 4 : 0));
}
// Those of activations of `dtype` (kF16 or kBF16).
constexpr int64_t ZeroBiasesOf(const WeightShape& s, DType dtype) {
  return ZeroBiasesOffset(s) + (dtype == DType::kBF16 ? ScaleRegionBytes(s) : 0);
}
constexpr int64_t OrderOffset(const WeightShape& s) {
  return Align256(ZeroBiasesOffset(s) + (s.zero_points ? 2 * ScaleRegionBytes(s) : 0));
}
constexpr int64_t DeviceBytes(const WeightShape& s) {
  return OrderOffset(s) + (s.act_order ? s.k * 4 : 0);
}

// The exponent e of a row whose largest |scale| is `max_abs` (finite): the one that puts
// max_abs * 2^(e + shift) in [2^15, 2^16), where shift is 24 for the rows g of a strip's
// pairs and 20 for the rows g + 8 (the gemm scales above); 0 for a row of zero scales.
inline int RowExponent(float max_abs, int shift) {
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs)) return 0;
  return 15 - shift - std::ilogb(max_abs);
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_LAYOUT_H_
