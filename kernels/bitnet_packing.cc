#include "kernels/bitnet_packing.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

// Rows of the packed tensor and its row length, for the dimension the axis packs.
struct Planar {
  int64_t rows;     // R = ceil(D / 4)
  int64_t columns;  // the unpacked dimension
};

Planar PlanarOf(BitnetPackedAxis axis, const WeightShape& shape) {
  return axis == BitnetPackedAxis::kOutFeatures ? Planar{(shape.n + 3) / 4, shape.k}
                                                : Planar{shape.k / 4, shape.n};
}

float LoadScale(DType dtype, const uint8_t* src) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, src, 4);
    return v;
  }
  const uint16_t bits = static_cast<uint16_t>(src[0] | (src[1] << 8));
  return dtype == DType::kF16 ? HalfToFloat(bits) : Bf16ToFloat(bits);
}

}  // namespace

int64_t BitnetPlanarCodeBytes(BitnetPackedAxis axis, const WeightShape& shape) {
  const Planar planar = PlanarOf(axis, shape);
  return planar.rows * planar.columns;
}

absl::StatusOr<std::vector<uint8_t>> BitnetPlanarToPacked(BitnetPackedAxis axis,
                                                          const WeightShape& shape,
                                                          DType scale_dtype,
                                                          std::span<const uint8_t> payload,
                                                          BitnetScale scale_use) {
  if (absl::Status status = ValidateShape(Scheme::kW2A8, shape); !status.ok()) return status;
  const int64_t n_rows = shape.n;
  const int64_t k = shape.k;
  const Planar planar = PlanarOf(axis, shape);
  const int64_t code_bytes = planar.rows * planar.columns;
  const int64_t scale_size = static_cast<int64_t>(DTypeSize(scale_dtype));
  const int64_t size = static_cast<int64_t>(payload.size());
  int64_t scales = -1;
  for (int64_t count : {int64_t{0}, int64_t{1}, n_rows}) {
    if (size == code_bytes + count * scale_size) scales = count;
  }
  if (scales < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BitNet planar payload for n = ", n_rows, ", k = ", k, " must be ", code_bytes,
        " code bytes followed by 0, 1 or ", n_rows, " ", std::string(DTypeName(scale_dtype)),
        " scales (", code_bytes, ", ", code_bytes + scale_size, " or ",
        code_bytes + n_rows * scale_size, " bytes), got ", size));
  }

  std::vector<uint8_t> packed(PackedBytes(Scheme::kW2A8, shape), 0);
  const uint8_t* codes = payload.data();
  for (int64_t n = 0; n < n_rows; ++n) {
    uint8_t* dst = packed.data() + n * (k / 4);
    for (int64_t c = 0; c < k; ++c) {
      // Element [d][e] of the packed tensor's unpacked form is plane d / R of row d % R.
      const bool by_rows = axis == BitnetPackedAxis::kOutFeatures;
      const int64_t d = by_rows ? n : c;
      const int64_t e = by_rows ? c : n;
      const int plane = static_cast<int>(d / planar.rows);
      const int code = (codes[(d % planar.rows) * planar.columns + e] >> (2 * plane)) & 3;
      if (code == 3) {
        return absl::InvalidArgumentError(
            absl::StrCat("BitNet planar code 3 (valid codes are 0, 1, 2 for -1, 0, +1) at "
                         "weight row ",
                         n, ", column ", c));
      }
      dst[c / 4] |= static_cast<uint8_t>(code << (2 * (c % 4)));
    }
  }

  uint8_t* dst_scales = packed.data() + n_rows * (k / 4);
  for (int64_t n = 0; n < n_rows; ++n) {
    float s = 1.0f;
    if (scales > 0) {
      const int64_t index = scales == 1 ? 0 : n;
      const float scale = LoadScale(scale_dtype, codes + code_bytes + index * scale_size);
      if (!std::isfinite(scale) || !(scale > 0.0f)) {
        return absl::InvalidArgumentError(absl::StrCat("BitNet weight scale ", index, " is ", scale,
                                                       ", must be finite and positive"));
      }
      s = scale_use == BitnetScale::kMultiplies ? scale : 1.0f / scale;
      if (!std::isfinite(s)) {
        return absl::InvalidArgumentError(absl::StrCat("BitNet weight scale ", index, " is ", scale,
                                                       ", its inverse overflows fp32"));
      }
    }
    std::memcpy(dst_scales + 4 * n, &s, 4);
  }
  return packed;
}

}  // namespace qmm
