#include "kernels/int4_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

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

// AWQ's column order inside a word: value j holds column 8i + kAwqOrder[j].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// The formats whose tensors are GPTQ's (qweight, qzeros, scales), [K/8, N] or [K, N/8].
bool IsGptq(Int4Checkpoint format) { return format != Int4Checkpoint::kPackQuantized; }
bool IsAwq(Int4Checkpoint format) { return format == Int4Checkpoint::kAwq; }

// The zero points' tensor holds, in value j of its word `word`, the zero point of weight
// row `row` and group `group`. GPTQ's and AWQ's qzeros are [G, N/8], packing N (AWQ in its
// interleaved order); compressed-tensors' weight_zero_point is [N/8, G], packing N too.
struct ZeroSlot {
  int64_t row;
  int64_t group;
};
ZeroSlot ZeroSlotOf(Int4Checkpoint format, int64_t n_rows, int64_t groups, int64_t word, int j) {
  if (!IsGptq(format)) return {8 * (word / groups) + j, word % groups};
  const int64_t i = word % (n_rows / 8);
  return {8 * i + (IsAwq(format) ? kAwqOrder[j] : j), word / (n_rows / 8)};
}

// What the format stores for a zero point z: z - 1 for "gptq", z otherwise.
int StoredZeroOffset(Int4Checkpoint format) { return format == Int4Checkpoint::kGptq ? 1 : 0; }

// qweight [K, N/8] of AWQ -> the canonical rows. Two k a byte: word [k][i] and [k+1][i]
// give the eight bytes at k/2 of rows 8i + kAwqOrder[j]. A tile of 128 k a pass, so that
// each row receives 64 contiguous bytes.
void AwqCodesToRows(const uint8_t* codes, int64_t n_rows, int64_t k, uint8_t* rows) {
  const int64_t words = n_rows / 8;
  const int64_t row_bytes = k / 2;
  constexpr int64_t kTileK = 128;
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    for (int64_t i = 0; i < words; ++i) {
      for (int64_t c = k0; c < std::min(k0 + kTileK, k); c += 2) {
        const uint32_t lo = LoadWord(codes + 4 * (c * words + i));
        const uint32_t hi = LoadWord(codes + 4 * ((c + 1) * words + i));
        for (int j = 0; j < 8; ++j) {
          const uint32_t byte = ((lo >> (4 * j)) & 15) | (((hi >> (4 * j)) & 15) << 4);
          rows[(8 * i + kAwqOrder[j]) * row_bytes + c / 2] = static_cast<uint8_t>(byte ^ 0x88);
        }
      }
    }
  }
}

const char* CodesName(Int4Checkpoint format) {
  return IsGptq(format) ? "qweight" : "weight_packed";
}
const char* ZerosName(Int4Checkpoint format) {
  return IsGptq(format) ? "qzeros" : "weight_zero_point";
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

// The stored order of an act_order weight: its columns sorted by group, each group's in
// their order in k, so that group g is stored columns 128g..128g+127. Every group must hold
// 128 columns (GPTQ's activation order gives each group 128 consecutive columns of its
// sorted order).
absl::StatusOr<std::vector<int32_t>> GroupOrder(Int4Checkpoint format, const uint8_t* g_idx,
                                                int64_t k) {
  const int64_t groups = k / kW4GroupSize;
  std::vector<int64_t> next(groups, 0);  // members seen so far, then where the next one goes
  std::vector<int32_t> group_of(k);
  for (int64_t i = 0; i < k; ++i) {
    std::memcpy(&group_of[i], g_idx + 4 * i, 4);
    if (group_of[i] < 0 || group_of[i] >= groups) {
      return absl::InvalidArgumentError(absl::StrCat(
          GroupIndexName(format), "[", i, "] = ", group_of[i], " is outside [0, ", groups, ")"));
    }
    ++next[group_of[i]];
  }
  for (int64_t g = 0; g < groups; ++g) {
    if (next[g] != kW4GroupSize) {
      return absl::InvalidArgumentError(absl::StrCat(GroupIndexName(format), " puts ", next[g],
                                                     " columns in group ", g, ", must put ",
                                                     kW4GroupSize, " in each"));
    }
    next[g] = g * kW4GroupSize;
  }
  std::vector<int32_t> perm(k);
  for (int64_t i = 0; i < k; ++i) perm[next[group_of[i]]++] = static_cast<int32_t>(i);
  return perm;
}

// Reorders the canonical rows' nibbles into the stored order (stored column j is k =
// perm[j]) and writes the permutation where the canonical act_order form ends with it.
void StoreInGroupOrder(const std::vector<int32_t>& perm, int64_t n_rows,
                       std::vector<uint8_t>& packed) {
  const int64_t k = static_cast<int64_t>(perm.size());
  std::vector<uint8_t> row(k / 2);
  for (int64_t n = 0; n < n_rows; ++n) {
    uint8_t* dst = packed.data() + n * k / 2;
    std::memcpy(row.data(), dst, k / 2);
    const auto nibble = [&](int32_t c) { return (row[c / 2] >> (c % 2 == 0 ? 0 : 4)) & 15; };
    for (int64_t j = 0; j < k; j += 2) {
      dst[j / 2] = static_cast<uint8_t>(nibble(perm[j]) | (nibble(perm[j + 1]) << 4));
    }
  }
  std::memcpy(packed.data() + packed.size() - 4 * k, perm.data(), 4 * k);
}

}  // namespace

absl::Status CheckInt4CheckpointShape(Int4Checkpoint format, const WeightShape& shape) {
  if (absl::Status status = ValidateShape(Scheme::kW4A16, shape); !status.ok()) return status;
  if ((IsGptq(format) || shape.zero_points) && shape.n % 8 != 0) {
    const char* zeros = IsAwq(format)    ? "AWQ's qzeros need"
                        : IsGptq(format) ? "GPTQ's qzeros need"
                                         : "weight_zero_point needs";
    return absl::InvalidArgumentError(absl::StrCat("n = ", shape.n,
                                                   " is not a multiple of 8, which ", zeros,
                                                   " (eight zero points an int32)"));
  }
  if (IsAwq(format) && shape.act_order) {
    return absl::InvalidArgumentError(
        "act_order: an AWQ checkpoint has no g_idx, its groups are consecutive k");
  }
  return absl::OkStatus();
}

Int4CheckpointBytes Int4CheckpointSizes(Int4Checkpoint format, const WeightShape& shape,
                                        DType scale_dtype) {
  const int64_t groups = shape.GroupsPerRow();
  Int4CheckpointBytes bytes;
  bytes.codes = shape.n * shape.k / 2;
  // Pack-quantized layers carry weight_zero_point only when asymmetric.
  bytes.zeros = IsGptq(format) || shape.zero_points ? groups * shape.n / 2 : 0;
  bytes.scales = groups * shape.n * static_cast<int64_t>(DTypeSize(scale_dtype));
  bytes.g_idx = IsAwq(format) ? 0 : 4 * shape.k;
  return bytes;
}

absl::StatusOr<std::vector<uint8_t>> Int4CheckpointToPacked(Int4Checkpoint format,
                                                            const WeightShape& shape,
                                                            DType scale_dtype,
                                                            std::span<const uint8_t> payload) {
  if (absl::Status status = CheckInt4CheckpointShape(format, shape); !status.ok()) return status;
  const Int4CheckpointBytes sizes = Int4CheckpointSizes(format, shape, scale_dtype);
  const int64_t size = static_cast<int64_t>(payload.size());
  if (shape.act_order && size == sizes.Total(false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("act_order: the payload (", size, " bytes) has no ", GroupIndexName(format),
                     " (", sizes.g_idx, " bytes more), which gives the order"));
  }
  if (size != sizes.Total(false) && size != sizes.Total(true)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an int4 checkpoint payload for n = ", shape.n, ", k = ", shape.k, ", group_size ",
        shape.group_size, " is ", CodesName(format), " (", sizes.codes, " bytes)",
        sizes.zeros > 0 ? absl::StrCat(", ", ZerosName(format), " (", sizes.zeros, ")")
                        : std::string(),
        ", ", ScalesName(format), " (", sizes.scales, ", ", std::string(DTypeName(scale_dtype)),
        ")",
        IsAwq(format) ? absl::StrCat(": ", sizes.Total(false))
                      : absl::StrCat(" and optionally ", GroupIndexName(format), " (", sizes.g_idx,
                                     "): ", sizes.Total(false), " or ", sizes.Total(true)),
        " bytes, got ", size));
  }
  const int64_t n_rows = shape.n;
  const int64_t k = shape.k;
  const int64_t groups = shape.GroupsPerRow();
  const uint8_t* codes = payload.data();
  const uint8_t* zeros = codes + sizes.codes;
  const uint8_t* scales = zeros + sizes.zeros;
  const uint8_t* g_idx = scales + sizes.scales;

  std::vector<uint8_t> packed(PackedBytes(Scheme::kW4A16, shape));
  // The canonical zero point is the unsigned one minus 8; a symmetric quantization's is 8
  // (stored as 7 by "gptq").
  const int offset = StoredZeroOffset(format);
  int8_t* dst_zeros =
      reinterpret_cast<int8_t*>(packed.data() + n_rows * k / 2 + 2 * n_rows * groups);
  for (int64_t i = 0; i < sizes.zeros / 4; ++i) {
    const uint32_t word = LoadWord(zeros + 4 * i);
    for (int j = 0; j < 8; ++j) {
      const int zero_point = static_cast<int>((word >> (4 * j)) & 15) + offset;
      const ZeroSlot slot = ZeroSlotOf(format, n_rows, groups, i, j);
      if (shape.zero_points) {
        dst_zeros[slot.row * groups + slot.group] = static_cast<int8_t>(zero_point - 8);
      } else if (zero_point != 8) {
        return absl::InvalidArgumentError(absl::StrCat(
            ZerosName(format), ": group ", slot.group, IsGptq(format) ? ", column " : ", row ",
            slot.row, " has zero point ", zero_point,
            "; a weight without zero points takes a symmetric quantization (sym=True), whose "
            "zero points are all 8: one quantized with sym=False uploads with zero_points "
            "set"));
      }
    }
  }
  std::vector<int32_t> perm;
  if (shape.act_order) {
    absl::StatusOr<std::vector<int32_t>> order = GroupOrder(format, g_idx, k);
    if (!order.ok()) return order.status();
    perm = *std::move(order);
  } else if (!IsAwq(format) && size == sizes.Total(true)) {
    for (int64_t i = 0; i < k; ++i) {
      int32_t group;
      std::memcpy(&group, g_idx + 4 * i, 4);
      const int64_t expected = groups == 1 ? 0 : i / kW4GroupSize;
      if (group != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            GroupIndexName(format), "[", i, "] = ", group, ", expected ", expected,
            ": groups are consecutive k unless the weight is uploaded with act_order set (a "
            "checkpoint quantized with activation order: desc_act, actorder)"));
      }
    }
  }

  const int64_t row_bytes = k / 2;
  if (IsAwq(format)) {
    AwqCodesToRows(codes, n_rows, k, packed.data());
  } else if (IsGptq(format)) {
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

  if (shape.act_order) StoreInGroupOrder(perm, n_rows, packed);

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
