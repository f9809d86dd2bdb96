#include "kernels/int4_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

// u - 8 for each of a word's eight nibbles, as 4-bit two's complement: u ^ 8.
constexpr uint32_t kUnsignedToSigned = 0x88888888u;

uint32_t LoadWord(const uint8_t* src) {
  uint32_t v;
  std::memcpy(&v, src, 4);
  return v;  // little-endian host (as everywhere in qmm)
}

bool IsGptq(Int4Checkpoint format) { return format != Int4Checkpoint::kPackQuantized; }

const char* CodesName(Int4Checkpoint format) {
  return IsGptq(format) ? "qweight" : "weight_packed";
}
const char* ScalesName(Int4Checkpoint format) { return IsGptq(format) ? "scales" : "weight_scale"; }
const char* GroupIndexName(Int4Checkpoint format) {
  return IsGptq(format) ? "g_idx" : "weight_g_idx";
}

// The scale at `src` as fp16 bits: fp16 as it is, bf16 and fp32 rounded to nearest even.
absl::StatusOr<uint16_t> ScaleToHalf(Int4Checkpoint format, DType dtype, const uint8_t* src,
                                     int64_t row, int64_t column) {
  float value;
  if (dtype == DType::kF32) {
    std::memcpy(&value, src, 4);
  } else {
    const uint16_t bits = static_cast<uint16_t>(src[0] | (src[1] << 8));
    value = dtype == DType::kF16 ? HalfToFloat(bits) : Bf16ToFloat(bits);
  }
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(ScalesName(format), "[", row, "][", column, "] = ", value, " ", why));
  };
  if (!std::isfinite(value)) return error("is not finite");
  const uint16_t half = FloatToHalf(value);
  if ((half & 0x7c00) == 0x7c00) return error("overflows fp16 (W4A16 scales are fp16)");
  if ((half & 0x7fff) == 0 && value != 0.0f) {
    return error("underflows to zero in fp16 (W4A16 scales are fp16)");
  }
  return half;
}

}  // namespace

absl::Status CheckInt4CheckpointShape(Int4Checkpoint format, const WeightShape& shape) {
  if (absl::Status status = ValidateShape(Scheme::kW4A16, shape); !status.ok()) return status;
  if (IsGptq(format) && shape.n % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n = ", shape.n, " is not a multiple of 8, which GPTQ's qzeros need (8 columns an int32)"));
  }
  return absl::OkStatus();
}

Int4CheckpointBytes Int4CheckpointSizes(Int4Checkpoint format, const WeightShape& shape,
                                        DType scale_dtype) {
  const int64_t groups = shape.GroupsPerRow();
  Int4CheckpointBytes bytes;
  bytes.codes = shape.n * shape.k / 2;
  bytes.zeros = IsGptq(format) ? groups * shape.n / 2 : 0;
  bytes.scales = groups * shape.n * static_cast<int64_t>(DTypeSize(scale_dtype));
  bytes.g_idx = 4 * shape.k;
  return bytes;
}

absl::StatusOr<std::vector<uint8_t>> Int4CheckpointToPacked(Int4Checkpoint format,
                                                            const WeightShape& shape,
                                                            DType scale_dtype,
                                                            std::span<const uint8_t> payload) {
  if (absl::Status status = CheckInt4CheckpointShape(format, shape); !status.ok()) return status;
  const Int4CheckpointBytes sizes = Int4CheckpointSizes(format, shape, scale_dtype);
  const int64_t size = static_cast<int64_t>(payload.size());
  if (size != sizes.Total(false) && size != sizes.Total(true)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an int4 checkpoint payload for n = ", shape.n, ", k = ", shape.k, ", group_size ",
        shape.group_size, " is ", CodesName(format), " (", sizes.codes, " bytes)",
        IsGptq(format) ? absl::StrCat(", qzeros (", sizes.zeros, ")") : std::string(), ", ",
        ScalesName(format), " (", sizes.scales, ", ", std::string(DTypeName(scale_dtype)),
        ") and optionally ", GroupIndexName(format), " (", sizes.g_idx, "): ", sizes.Total(false),
        " or ", sizes.Total(true), " bytes, got ", size));
  }
  const int64_t n_rows = shape.n;
  const int64_t k = shape.k;
  const int64_t groups = shape.GroupsPerRow();
  const uint8_t* codes = payload.data();
  const uint8_t* zeros = codes + sizes.codes;
  const uint8_t* scales = zeros + sizes.zeros;
  const uint8_t* g_idx = scales + sizes.scales;

  if (IsGptq(format)) {
    // Symmetric GPTQ's zero point is 8: stored as 7 by "gptq", as 8 by "gptq_v2".
    const uint32_t stored = format == Int4Checkpoint::kGptq ? 0x77777777u : 0x88888888u;
    const int offset = format == Int4Checkpoint::kGptq ? 1 : 0;
    for (int64_t i = 0; i < sizes.zeros / 4; ++i) {
      const uint32_t word = LoadWord(zeros + 4 * i);
      if (word == stored) continue;
      int j = 0;
      while (((word >> (4 * j)) & 15) == ((stored >> (4 * j)) & 15)) ++j;
      const int64_t group = i / (n_rows / 8);
      const int64_t column = (i % (n_rows / 8)) * 8 + j;
      return absl::InvalidArgumentError(absl::StrCat(
          "qzeros: group ", group, ", column ", column, " has zero point ",
          ((word >> (4 * j)) & 15) + offset,
          "; W4A16 is symmetric and takes GPTQ checkpoints quantized with sym=True, whose zero "
          "points are all 8"));
    }
  }
  if (size == sizes.Total(true)) {
    for (int64_t i = 0; i < k; ++i) {
      int32_t group;
      std::memcpy(&group, g_idx + 4 * i, 4);
      const int64_t expected = groups == 1 ? 0 : i / kW4GroupSize;
      if (group != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            GroupIndexName(format), "[", i, "] = ", group, ", expected ", expected,
            ": W4A16 groups are consecutive k, so a checkpoint quantized with activation order "
            "(desc_act, actorder) cannot be taken"));
      }
    }
  }

  std::vector<uint8_t> packed(PackedBytes(Scheme::kW4A16, shape));
  const int64_t row_bytes = k / 2;
  if (IsGptq(format)) {
    // qweight is [K/8, N]: word [i][n] becomes bytes 4i..4i+3 of row n. Sixteen rows of
    // words a pass, so that each row n receives one 64-byte line at a time.
    constexpr int64_t kWordRows = 16;
    for (int64_t i0 = 0; i0 < k / 8; i0 += kWordRows) {
      const int64_t i1 = std::min(i0 + kWordRows, k / 8);
      for (int64_t n = 0; n < n_rows; ++n) {
        uint8_t* dst = packed.data() + n * row_bytes;
        for (int64_t i = i0; i < i1; ++i) {
          const uint32_t word = LoadWord(codes + 4 * (i * n_rows + n)) ^ kUnsignedToSigned;
          std::memcpy(dst + 4 * i, &word, 4);
        }
      }
    }
  } else {
    // weight_packed is [N, K/8]: the canonical rows, each nibble offset by 8.
    for (int64_t i = 0; i < n_rows * k / 8; ++i) {
      const uint32_t word = LoadWord(codes + 4 * i) ^ kUnsignedToSigned;
      std::memcpy(packed.data() + 4 * i, &word, 4);
    }
  }

  // Scales: GPTQ's are [G, N], compressed-tensors' [N, G]; the canonical form is [N, G].
  uint8_t* dst_scales = packed.data() + n_rows * row_bytes;
  const int64_t scale_size = static_cast<int64_t>(DTypeSize(scale_dtype));
  for (int64_t n = 0; n < n_rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t row = IsGptq(format) ? g : n;
      const int64_t column = IsGptq(format) ? n : g;
      const int64_t index = IsGptq(format) ? g * n_rows + n : n * groups + g;
      absl::StatusOr<uint16_t> half =
          ScaleToHalf(format, scale_dtype, scales + index * scale_size, row, column);
      if (!half.ok()) return half.status();
      const uint16_t bits = *half;
      std::memcpy(dst_scales + 2 * (n * groups + g), &bits, 2);
    }
  }
  return packed;
}

}  // namespace qmm
