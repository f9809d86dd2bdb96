// Conversion of the int4 layouts that GPTQ and compressed-tensors checkpoints store into
// the W4A16 canonical packed form (proto/qmm/v1/qmm.proto), so that such checkpoints
// upload as they are: no dequantizing and requantizing, which would lose the rounding
// the quantizer chose.
//
// Both store eight 4-bit values u in [0, 15] per little-endian int32, value j in bits
// 4j..4j+3, and both mean w = s * (u - 8) for a symmetric quantization, which is W4A16's
// q = u - 8 in [-8, 7] exactly. So each word, XORed with 0x88888888, is four canonical
// bytes (k = 8i + 2b in byte b's low nibble, 8i + 2b + 1 in its high one).
//   - GPTQ (AutoGPTQ, GPTQModel, transformers; one linear's qweight, qzeros, scales,
//     g_idx): qweight int32 [K/8, N] packs k; qzeros int32 [G, N/8] packs n, one zero
//     point per group and column; scales [G, N]; g_idx int32 [K], each k's group.
//     Checkpoint format "gptq" stores each zero point minus one (a symmetric one, 8, as
//     7), "gptq_v2" stores it as it is.
//   - compressed-tensors' pack-quantized format (llm-compressor's W4A16 schemes):
//     weight_packed int32 [N, K/8] packs k, weight_scale [N, G], weight_g_idx int32 [K]
//     with activation ordering by group; symmetric quantizations store no zero point,
//     asymmetric ones (W4A16_ASYM) weight_zero_point int32 [N/8, G] packing n, each zero
//     point z stored as z + 8 (as the values).
//   - AWQ (AutoAWQ's "gemm" version, transformers' AwqConfig): qweight int32 [K, N/8]
//     packs n in the interleaved order 0, 2, 4, 6, 1, 3, 5, 7 (value j of word [k][i] is
//     column 8i + that order's j-th entry); qzeros int32 [G, N/8] likewise; scales
//     [G, N]; zero points stored as they are.
// G is K / 128 (group size 128) or 1 (one group per row). With WeightShape::zero_points
// the zero points become the canonical ones (the unsigned zero point minus 8); without,
// each must be 8 (a symmetric quantization). With WeightShape::act_order (GPTQ's
// desc_act, compressed-tensors' actorder "group") the group index gives the order: the
// canonical form stores the columns sorted by group, with that permutation.
#ifndef QMM_KERNELS_INT4_CHECKPOINT_H_
#define QMM_KERNELS_INT4_CHECKPOINT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm {

enum class Int4Checkpoint : uint8_t {
  kGptq,           // qweight, qzeros (stored zero point - 1), scales[, g_idx]
  kGptqV2,         // qweight, qzeros (stored zero point), scales[, g_idx]
  kPackQuantized,  // weight_packed[, weight_zero_point], weight_scale[, weight_g_idx]
  kAwq,            // qweight, qzeros (interleaved columns), scales
};

// The tensors' bytes for `shape`, in the order a payload carries them.
struct Int4CheckpointBytes {
  int64_t codes = 0;   // qweight or weight_packed
  int64_t zeros = 0;   // qzeros or weight_zero_point; 0 for symmetric pack-quantized
  int64_t scales = 0;  // G * N scales of the payload's scale dtype
  int64_t g_idx = 0;   // the optional group index, K int32; 0 for AWQ, which has none

  int64_t Total(bool with_g_idx) const { return codes + zeros + scales + (with_g_idx ? g_idx : 0); }
};

// INVALID_ARGUMENT unless `shape` is a valid W4A16 shape that `format` can hold (the zero
// points' tensors pack N in eights, so N must be a multiple of 8 for GPTQ, AWQ and
// pack-quantized with zero points; AWQ has no group index, so no act_order).
absl::Status CheckInt4CheckpointShape(Int4Checkpoint format, const WeightShape& shape);

// Sizes for a shape that CheckInt4CheckpointShape accepted.
Int4CheckpointBytes Int4CheckpointSizes(Int4Checkpoint format, const WeightShape& shape,
                                        DType scale_dtype);

// `payload` holds the format's tensors in the order of Int4CheckpointBytes, row-major and
// little-endian, with or without the group index (its length says which). Returns the
// canonical W4A16 packed form (with zero points if shape.zero_points, in group order if
// shape.act_order). Scales of another dtype are rounded to the nearest fp16.
// INVALID_ARGUMENT, naming the tensor and the element, when the payload has another
// length, a zero point is not 8 while shape.zero_points is false, the group index is not
// k / 128 (0 for one group per row) while shape.act_order is false, or is missing, outside
// [0, G) or puts other than 128 columns in a group while it is true, or a scale is not
// finite, overflows fp16 or underflows to zero from a nonzero value.
absl::StatusOr<std::vector<uint8_t>> Int4CheckpointToPacked(Int4Checkpoint format,
                                                            const WeightShape& shape,
                                                            DType scale_dtype,
                                                            std::span<const uint8_t> payload);

}  // namespace qmm

#endif  // QMM_KERNELS_INT4_CHECKPOINT_H_
