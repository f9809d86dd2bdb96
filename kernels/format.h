// Weight schemes, their shape rules and the canonical packed (wire) layout.
//
// The canonical packed form of each scheme is documented byte by byte in
// proto/qmm/v1/qmm.proto; this header is its C++ twin. Device layouts (what each kernel
// reads fastest) are private to the backends and never appear here.
#ifndef QMM_KERNELS_FORMAT_H_
#define QMM_KERNELS_FORMAT_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace qmm {

enum class Scheme : uint8_t { kFp16, kBf16, kW8A16, kW4A16, kW2A8 };

inline constexpr Scheme kAllSchemes[] = {Scheme::kFp16, Scheme::kBf16, Scheme::kW8A16,
                                         Scheme::kW4A16, Scheme::kW2A8};

std::string_view SchemeName(Scheme s);

// Largest N or K accepted, and largest N*K.
inline constexpr int64_t kMaxDim = int64_t{1} << 20;
inline constexpr int64_t kMaxElements = int64_t{1} << 34;
// The only W4A16 group size besides 0 (one group per row).
inline constexpr int32_t kW4GroupSize = 128;
// The range of a W4A16 zero point: a checkpoint's unsigned zero point minus 8, where
// GPTQ's "minus one" storage can make that zero point 16.
inline constexpr int kW4MinZeroPoint = -8;
inline constexpr int kW4MaxZeroPoint = 8;

struct WeightShape {
  int64_t n = 0;           // out_features
  int64_t k = 0;           // in_features
  int32_t group_size = 0;  // W4A16: 128 or 0 (= one group per row); 0 elsewhere
  // W4A16 only: each group also has a zero point z, w = (q - z) * s (the asymmetric
  // quantization of AWQ and of GPTQ with sym=False); false elsewhere.
  bool zero_points = false;
  // W4A16 with group_size 128 only: the weight's columns are stored in an order of their
  // own, with the permutation after the rest (GPTQ's activation order, desc_act, whose
  // groups are scattered over k): stored column j multiplies input feature perm[j], so
  // that each group is 128 consecutive stored columns. False elsewhere.
  bool act_order = false;

  // Elements of K covered by one scale (K itself for per-row scales).
  int64_t GroupLength() const { return group_size == 0 ? k : group_size; }
  int64_t GroupsPerRow() const { return k / GroupLength(); }
};

// K must be a multiple of this for the scheme (every backend accepts these shapes).
int64_t KAlignment(Scheme s);

// Checks dimensions, group size and K alignment; names the field and the limit.
absl::Status ValidateShape(Scheme s, const WeightShape& shape);

// Byte size of the canonical packed form (shape must be valid).
int64_t PackedBytes(Scheme s, const WeightShape& shape);

// A read-only view of a weight in canonical packed form, split into its parts.
struct PackedWeight {
  Scheme scheme;
  WeightShape shape;
  std::span<const uint8_t> bytes;  // the whole packed form, PackedBytes() long

  // The value part: fp16/bf16 values, int8 q, int4 nibble pairs or 2-bit codes.
  const uint8_t* values() const { return bytes.data(); }
  int64_t values_bytes() const;
  // The scale part (fp32 for W8A16/W2A8, fp16 for W4A16); nullptr for dense schemes.
  const uint8_t* scales() const { return bytes.data() + values_bytes(); }
  // W4A16 with shape.zero_points: the zero points, int8 [N, K/G] after the scales;
  // nullptr otherwise.
  const int8_t* zero_points() const;
  // W4A16 with shape.act_order: perm, int32 [K] little-endian after the zero points (or
  // the scales), unaligned; nullptr otherwise. Input(j) reads perm[j].
  const uint8_t* permutation() const;
  int32_t Input(int64_t j) const;
};

// Checks that `bytes` is a well-formed packed weight (size, finite scales, W4A16 zero points
// in [kW4MinZeroPoint, kW4MaxZeroPoint], an act_order permutation that is one of 0..K-1, and
// for W2A8 no code 3).
absl::StatusOr<PackedWeight> ViewPacked(Scheme s, const WeightShape& shape,
                                        std::span<const uint8_t> bytes);

}  // namespace qmm

#endif  // QMM_KERNELS_FORMAT_H_
