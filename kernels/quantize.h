// Quantization of float weights into each scheme's canonical packed form (the byte
// layouts documented in proto/qmm/v1/qmm.proto), and the inverse.
//
// Shared by the server (SOURCE_ENCODING_FLOAT uploads) and by clients that pack weights
// themselves, so both produce bit-identical bytes.
#ifndef QMM_KERNELS_QUANTIZE_H_
#define QMM_KERNELS_QUANTIZE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm {

// Quantizes `src`, N*K values of `src_dtype` in row-major [N, K] order (little-endian),
// into the canonical packed form of `scheme`, exactly as the proto specifies: round to
// nearest (half away from zero) for W8A16/W4A16 (W4A16 computes q with the fp16-rounded
// scale; with shape.zero_points, over each group's range rather than its largest |w|),
// absmean for W2A8, round-to-nearest-even conversion for FP16/BF16.
// INVALID_ARGUMENT when the shape is invalid or act_order, `src` is not
// N*K*DTypeSize(src_dtype) bytes, or a value is NaN or infinite (the message names its row
// and column).
absl::StatusOr<std::vector<uint8_t>> QuantizeWeight(Scheme scheme, const WeightShape& shape,
                                                    DType src_dtype, std::span<const uint8_t> src);

// The float values [N, K] row-major that a packed weight stands for (w = q * s, or
// (q - z) * s with zero points), in the inputs' order (an act_order weight's stored column j
// lands at column perm[j]).
std::vector<float> DequantizeWeight(const PackedWeight& w);

}  // namespace qmm

#endif  // QMM_KERNELS_QUANTIZE_H_
