#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

// round(v) with ties away from zero, then clamped to [-limit, limit].
int RoundClamp(float v, int limit) {
  const float r = std::round(v);
  return static_cast<int>(std::clamp(r, -static_cast<float>(limit), static_cast<float>(limit)));
}

float MaxAbs(const float* v, int64_t count) {
  float m = 0.0f;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

absl::Status CheckFinite(const float* row, int64_t n, int64_t k) {
  for (int64_t c = 0; c < k; ++c) {
    if (!std::isfinite(row[c])) {
      return absl::InvalidArgumentError(absl::StrCat("weight value at row ", n, ", column ", c,
                                                     " is ", row[c],
                                                     "; only finite values can be quantized"));
    }
  }
  return absl::OkStatus();
}

// Dense targets: a finite source value that overflows the target type is an error, not Inf.
absl::Status PackDense(DType to, const float* row, int64_t n, int64_t k, uint8_t* out) {
  FromFloat(to, row, k, out);
  const auto* packed = reinterpret_cast<const uint16_t*>(out);
  for (int64_t c = 0; c < k; ++c) {
    const float back = to == DType::kF16 ? HalfToFloat(packed[c]) : Bf16ToFloat(packed[c]);
    if (std::isinf(back)) {
      return absl::InvalidArgumentError(absl::StrCat("weight value at row ", n, ", column ", c,
                                                     " is ", row[c], ", out of range for ",
                                                     std::string(DTypeName(to))));
    }
  }
  return absl::OkStatus();
}

void PackW8(const float* row, int64_t k, uint8_t* q, uint8_t* scale_out) {
  float s = MaxAbs(row, k) / 127.0f;
  // s can underflow to 0 for a row of tiny subnormals; such a row is stored as zero.
  if (s == 0.0f) {
    std::memset(q, 0, k);
  } else {
    for (int64_t c = 0; c < k; ++c) {
      q[c] = static_cast<uint8_t>(static_cast<int8_t>(RoundClamp(row[c] / s, 127)));
    }
  }
  std::memcpy(scale_out, &s, 4);
}

absl::Status PackW4(const float* row, int64_t n, const WeightShape& shape, uint8_t* q,
                    uint8_t* scales_out) {
  const int64_t g = shape.GroupLength();
  for (int64_t group = 0; group < shape.GroupsPerRow(); ++group) {
    const float* v = row + group * g;
    const float max_abs = MaxAbs(v, g);
    const uint16_t s_half = FloatToHalf(max_abs / 7.0f);
    const float s = HalfToFloat(s_half);
    if (std::isinf(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight row ", n, ", group ", group, " has max |w| = ", max_abs,
          "; its scale does not fit in fp16 (max |w| must be at most ", 65504.0f * 7.0f, ")"));
    }
    uint8_t* qg = q + group * g / 2;
    for (int64_t c = 0; c < g; c += 2) {
      const int lo = s == 0.0f ? 0 : RoundClamp(v[c] / s, 7);
      const int hi = s == 0.0f ? 0 : RoundClamp(v[c + 1] / s, 7);
      qg[c / 2] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
    }
    std::memcpy(scales_out + 2 * group, &s_half, 2);
  }
  return absl::OkStatus();
}

// The asymmetric form (shape.zero_points), as GPTQ and AWQ quantize: the group's range,
// widened to hold 0, in 15 steps: s = (hi - lo) / 15 (rounded to fp16 first), the
// unsigned zero point u0 = round(-lo / s) in [0, 15], u = round(w / s) + u0 clamped to
// [0, 15]; stored as q = u - 8 and z = u0 - 8, so that w = (q - z) * s.
absl::Status PackW4Asymmetric(const float* row, int64_t n, const WeightShape& shape, uint8_t* q,
                              uint8_t* scales_out, int8_t* zero_points_out) {
  const int64_t g = shape.GroupLength();
  for (int64_t group = 0; group < shape.GroupsPerRow(); ++group) {
    const float* v = row + group * g;
    const auto [lo_it, hi_it] = std::minmax_element(v, v + g);
    const float lo = std::min(*lo_it, 0.0f);
    const float hi = std::max(*hi_it, 0.0f);
    const uint16_t s_half = FloatToHalf((hi - lo) / 15.0f);
    const float s = HalfToFloat(s_half);
    if (std::isinf(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight row ", n, ", group ", group, " spans [", lo, ", ", hi,
          "]; its scale does not fit in fp16 (the span must be at most ", 65504.0f * 15.0f, ")"));
    }
    // A group whose scale is 0 (all zeros, or too small for fp16) is stored as zeros.
    const int u0 = s == 0.0f ? 8 : std::clamp(static_cast<int>(std::round(-lo / s)), 0, 15);
    auto code = [&](float w) {
      const int u = s == 0.0f ? 8 : std::clamp(static_cast<int>(std::round(w / s)) + u0, 0, 15);
      return (u - 8) & 0xf;
    };
    uint8_t* qg = q + group * g / 2;
    for (int64_t c = 0; c < g; c += 2) {
      qg[c / 2] = static_cast<uint8_t>(code(v[c]) | (code(v[c + 1]) << 4));
    }
    std::memcpy(scales_out + 2 * group, &s_half, 2);
    zero_points_out[group] = static_cast<int8_t>(u0 - 8);
  }
  return absl::OkStatus();
}

void PackW2(const float* row, int64_t k, uint8_t* codes, uint8_t* scale_out) {
  // A double sum keeps the mean independent of K's size and summation order.
  double sum = 0.0;
  for (int64_t c = 0; c < k; ++c) sum += std::fabs(row[c]);
  const float s = static_cast<float>(sum / static_cast<double>(k));
  for (int64_t c = 0; c < k; c += 4) {
    uint8_t byte = 0;
    for (int j = 0; j < 4; ++j) {
      const int t = s == 0.0f ? 0 : RoundClamp(row[c + j] / s, 1);
      byte |= static_cast<uint8_t>((t + 1) << (2 * j));
    }
    codes[c / 4] = byte;
  }
  std::memcpy(scale_out, &s, 4);
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> QuantizeWeight(Scheme scheme, const WeightShape& shape,
                                                    DType src_dtype, std::span<const uint8_t> src) {
  if (absl::Status status = ValidateShape(scheme, shape); !status.ok()) return status;
  if (shape.act_order) {
    // The order comes from GPTQ's Hessian, which a float weight does not carry.
    return absl::InvalidArgumentError(
        "act_order: a float weight is quantized in its own column order; act_order is for "
        "packed and GPTQ or pack-quantized uploads");
  }
  const int64_t n_rows = shape.n;
  const int64_t k = shape.k;
  const int64_t src_row_bytes = k * static_cast<int64_t>(DTypeSize(src_dtype));
  if (static_cast<int64_t>(src.size()) != n_rows * src_row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "float weight with n = ", n_rows, ", k = ", k, " of ", std::string(DTypeName(src_dtype)),
        " must be ", n_rows * src_row_bytes, " bytes, got ", src.size()));
  }

  std::vector<uint8_t> out(PackedBytes(scheme, shape));
  PackedWeight layout{scheme, shape, out};
  uint8_t* values = out.data();
  uint8_t* scales = out.data() + layout.values_bytes();
  std::vector<float> row(k);
  for (int64_t n = 0; n < n_rows; ++n) {
    ToFloat(src_dtype, src.data() + n * src_row_bytes, k, row.data());
    if (absl::Status status = CheckFinite(row.data(), n, k); !status.ok()) return status;
    switch (scheme) {
      case Scheme::kFp16:
      case Scheme::kBf16: {
        const DType to = scheme == Scheme::kFp16 ? DType::kF16 : DType::kBF16;
        if (absl::Status status = PackDense(to, row.data(), n, k, values + n * 2 * k);
            !status.ok()) {
          return status;
        }
        break;
      }
      case Scheme::kW8A16:
        PackW8(row.data(), k, values + n * k, scales + 4 * n);
        break;
      case Scheme::kW4A16: {
        const int64_t groups = shape.GroupsPerRow();
        const absl::Status status =
            shape.zero_points
                ? PackW4Asymmetric(
                      row.data(), n, shape, values + n * k / 2, scales + 2 * n * groups,
                      reinterpret_cast<int8_t*>(scales + 2 * n_rows * groups) + n * groups)
                : PackW4(row.data(), n, shape, values + n * k / 2, scales + 2 * n * groups);
        if (!status.ok()) return status;
        break;
      }
      case Scheme::kW2A8:
        PackW2(row.data(), k, values + n * k / 4, scales + 4 * n);
        break;
    }
  }
  return out;
}

std::vector<float> DequantizeWeight(const PackedWeight& w) {
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  std::vector<float> out(n_rows * k);
  const uint8_t* values = w.values();
  switch (w.scheme) {
    case Scheme::kFp16:
    case Scheme::kBf16:
      ToFloat(w.scheme == Scheme::kFp16 ? DType::kF16 : DType::kBF16, values, n_rows * k,
              out.data());
      break;
    case Scheme::kW8A16:
      for (int64_t n = 0; n < n_rows; ++n) {
        float s;
        std::memcpy(&s, w.scales() + 4 * n, 4);
        for (int64_t c = 0; c < k; ++c) {
          out[n * k + c] = static_cast<float>(static_cast<int8_t>(values[n * k + c])) * s;
        }
      }
      break;
    case Scheme::kW4A16: {
      const int64_t g = w.shape.GroupLength();
      const int64_t groups = w.shape.GroupsPerRow();
      for (int64_t n = 0; n < n_rows; ++n) {
        for (int64_t c = 0; c < k; ++c) {
          uint16_t s_half;
          std::memcpy(&s_half, w.scales() + 2 * (n * groups + c / g), 2);
          const uint8_t byte = values[(n * k + c) / 2];
          // Shift the nibble to the top of an int8 and back to sign-extend it.
          const int q = static_cast<int8_t>(c % 2 == 0 ? byte << 4 : byte & 0xf0) >> 4;
          const int z = w.zero_points() == nullptr ? 0 : w.zero_points()[n * groups + c / g];
          // An act_order weight's stored column c is input feature perm[c].
          const int64_t input = w.permutation() == nullptr ? c : w.Input(c);
          out[n * k + input] = static_cast<float>(q - z) * HalfToFloat(s_half);
        }
      }
      break;
    }
    case Scheme::kW2A8:
      for (int64_t n = 0; n < n_rows; ++n) {
        float s;
        std::memcpy(&s, w.scales() + 4 * n, 4);
        for (int64_t c = 0; c < k; ++c) {
          const int code = (values[(n * k + c) / 4] >> (2 * (c % 4))) & 3;
          out[n * k + c] = static_cast<float>(code - 1) * s;
        }
      }
      break;
  }
  return out;
}

}  // namespace qmm
