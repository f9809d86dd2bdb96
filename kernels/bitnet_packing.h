// Conversion of the ternary packings used by existing BitNet b1.58 code into the W2A8
// canonical packed form (proto/qmm/v1/qmm.proto), so that such checkpoints upload as is.
//
// Both packings store codes c = t + 1 in {0, 1, 2}, four per byte, planar along the first
// (packed) dimension of the tensor they pack: with R = ceil(D / 4) packed rows for a
// tensor of D rows, bits 2i..2i+1 of packed byte [r][c] hold unpacked element [r + i*R][c]
// (elements past D, in the last planes, are padding and ignored).
//   - Hugging Face transformers (integrations/bitnet.py, BitLinear.weight): packs the
//     weight W [N, K] along N; uint8 [ceil(N / 4), K].
//   - Liger-Kernel (ops/experimental/mm_int8int2.py, pack_weights): packs W^T [K, N]
//     along K; uint8 [K / 4, N].
// The scale is Hugging Face's weight_scale, which divides in BitLinear (w = t / scale) and
// multiplies in AutoBitLinear (w = t * scale: linear_class "autobitlinear", as
// microsoft/bitnet-b1.58-2B-4T is stored); BitnetScale says which.
#ifndef QMM_KERNELS_BITNET_PACKING_H_
#define QMM_KERNELS_BITNET_PACKING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm {

// Which dimension of W the planar codes pack.
enum class BitnetPackedAxis : uint8_t {
  kOutFeatures,  // Hugging Face: [ceil(N / 4), K]
  kInFeatures,   // Liger-Kernel: [K / 4, N]
};

// What the checkpoint's weight scale does to the ternary values.
enum class BitnetScale : uint8_t {
  kDivides,    // BitLinear: w = t / scale
  kMultiplies  // AutoBitLinear: w = t * scale
};

// Bytes of the planar code tensor for `shape` (which must be a valid W2A8 shape).
int64_t BitnetPlanarCodeBytes(BitnetPackedAxis axis, const WeightShape& shape);

// `payload` is the planar code tensor (row-major, BitnetPlanarCodeBytes long) followed by
// the weight scale as little-endian values of `scale_dtype`: none (every row scale 1), one
// (per tensor, as Hugging Face stores it) or N (per row). Each value must be finite and
// positive; row n of the result gets s[n] = 1 / scale (fp32 division) where the scale
// divides, s[n] = scale where it multiplies.
// Returns the canonical W2A8 packed form (N*K/4 code bytes, then N fp32 scales).
// INVALID_ARGUMENT when the shape is not a valid W2A8 shape, the payload has any other
// length, a code is 3 (the message names the row and column of W), or a scale is not
// finite and positive.
absl::StatusOr<std::vector<uint8_t>> BitnetPlanarToPacked(
    BitnetPackedAxis axis, const WeightShape& shape, DType scale_dtype,
    std::span<const uint8_t> payload, BitnetScale scale_use = BitnetScale::kDivides);

}  // namespace qmm

#endif  // QMM_KERNELS_BITNET_PACKING_H_
