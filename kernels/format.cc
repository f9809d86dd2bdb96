#include "kernels/format.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

bool IsKnown(Scheme s) {
  for (Scheme known : kAllSchemes) {
    if (s == known) return true;
  }
  return false;
}

// Byte offset of the first W2A8 byte in `row` holding code 3, or -1.
int64_t FindInvalidTernaryByte(const uint8_t* row, int64_t bytes) {
  // A 2-bit field is 3 exactly when both of its bits are set.
  uint8_t any = 0;
  for (int64_t b = 0; b < bytes; ++b) any |= row[b] & (row[b] >> 1);
  if ((any & 0x55) == 0) return -1;
  for (int64_t b = 0; b < bytes; ++b) {
    if ((row[b] & (row[b] >> 1) & 0x55) != 0) return b;
  }
  return -1;
}

// A W4A16 zero point outside [kW4MinZeroPoint, kW4MaxZeroPoint] is no checkpoint's.
absl::Status CheckZeroPoints(const PackedWeight& w) {
  const int64_t groups = w.shape.GroupsPerRow();
  const int8_t* zero_points = w.zero_points();
  for (int64_t i = 0; i < w.shape.n * groups; ++i) {
    if (zero_points[i] < kW4MinZeroPoint || zero_points[i] > kW4MaxZeroPoint) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed W4A16 weight: zero point of row ", i / groups,
                       (groups > 1 ? absl::StrCat(", group ", i % groups) : ""), " is ",
                       static_cast<int>(zero_points[i]), ", must be in [", kW4MinZeroPoint, ", ",
                       kW4MaxZeroPoint, "]"));
    }
  }
  return absl::OkStatus();
}

// An act_order permutation must name each input feature exactly once.
absl::Status CheckPermutation(const PackedWeight& w) {
  std::vector<int64_t> first(w.shape.k, -1);  // the stored column naming each feature
  for (int64_t j = 0; j < w.shape.k; ++j) {
    const int32_t input = w.Input(j);
    const auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed W4A16 weight: act_order permutation[", j, "] = ", input, " ", why));
    };
    if (input < 0 || input >= w.shape.k) {
      return error(absl::StrCat("is outside [0, ", w.shape.k, ")"));
    }
    if (first[input] >= 0) return error(absl::StrCat("repeats permutation[", first[input], "]"));
    first[input] = j;
  }
  return absl::OkStatus();
}

// Scales are multiplied into every output; a NaN or Inf would poison whole rows.
absl::Status CheckScalesFinite(const PackedWeight& w) {
  const int64_t n = w.shape.n;
  const int64_t groups = w.shape.GroupsPerRow();
  const uint8_t* scales = w.scales();
  for (int64_t i = 0; i < n * groups; ++i) {
    float s;
    if (w.scheme == Scheme::kW4A16) {
      uint16_t h;
      std::memcpy(&h, scales + 2 * i, 2);
      s = HalfToFloat(h);
    } else {
      std::memcpy(&s, scales + 4 * i, 4);
    }
    if (!std::isfinite(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed ", std::string(SchemeName(w.scheme)), " weight: scale of row ", i / groups,
          (groups > 1 ? absl::StrCat(", group ", i % groups) : ""), " is ", s, ", must be finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view SchemeName(Scheme s) {
  switch (s) {
    case Scheme::kFp16:
      return "FP16";
    case Scheme::kBf16:
      return "BF16";
    case Scheme::kW8A16:
      return "W8A16";
    case Scheme::kW4A16:
      return "W4A16";
    case Scheme::kW2A8:
      return "W2A8";
  }
  return "unknown";
}

int64_t KAlignment(Scheme s) {
  switch (s) {
    case Scheme::kFp16:
    case Scheme::kBf16:
      return 8;
    case Scheme::kW8A16:
      return 64;
    case Scheme::kW4A16:
    case Scheme::kW2A8:
      return 128;
  }
  return 1;
}

absl::Status ValidateShape(Scheme s, const WeightShape& shape) {
  if (!IsKnown(s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheme = ", static_cast<int>(s), " is not a known scheme"));
  }
  // This abseil build has its own string_view, which StrCat takes but std::string_view it
  // does not.
  const std::string name(SchemeName(s));
  for (const auto& [field, value] : {std::pair{"n", shape.n}, std::pair{"k", shape.k}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, " must be at least 1"));
    }
    if (value > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = ", value, " exceeds the limit of ", kMaxDim));
    }
  }
  // Both factors are at most 2^20, so the product cannot overflow.
  if (shape.n * shape.k > kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("n * k = ", shape.n * shape.k, " exceeds the limit of ", kMaxElements));
  }
  if (s == Scheme::kW4A16) {
    if (shape.group_size != 0 && shape.group_size != kW4GroupSize) {
      return absl::InvalidArgumentError(absl::StrCat("group_size = ", shape.group_size,
                                                     " is not supported for W4A16 (", kW4GroupSize,
                                                     ", or 0 for one group per row)"));
    }
  } else if (shape.group_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_size = ", shape.group_size, " must be 0 for ", name));
  } else if (shape.zero_points) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_points is only for W4A16, must be false for ", name));
  }
  if (shape.act_order && (s != Scheme::kW4A16 || shape.group_size != kW4GroupSize)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "act_order is only for W4A16 with group_size ", kW4GroupSize, ", must be false for ", name,
        s == Scheme::kW4A16 ? " with one group per row" : ""));
  }
  const int64_t align = KAlignment(s);
  if (shape.k % align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("k = ", shape.k, " must be a multiple of ", align, " for ", name));
  }
  return absl::OkStatus();
}

int64_t PackedBytes(Scheme s, const WeightShape& shape) {
  const int64_t n = shape.n;
  const int64_t k = shape.k;
  switch (s) {
    case Scheme::kFp16:
    case Scheme::kBf16:
      return 2 * n * k;
    case Scheme::kW8A16:
      return n * k + 4 * n;
    case Scheme::kW4A16:
      return n * k / 2 + (shape.zero_points ? 3 : 2) * n * shape.GroupsPerRow() +
             (shape.act_order ? 4 * k : 0);
    case Scheme::kW2A8:
      return n * k / 4 + 4 * n;
  }
  return 0;
}

const int8_t* PackedWeight::zero_points() const {
  if (scheme != Scheme::kW4A16 || !shape.zero_points) return nullptr;
  return reinterpret_cast<const int8_t*>(scales() + 2 * shape.n * shape.GroupsPerRow());
}

const uint8_t* PackedWeight::permutation() const {
  if (scheme != Scheme::kW4A16 || !shape.act_order) return nullptr;
  return scales() + (shape.zero_points ? 3 : 2) * shape.n * shape.GroupsPerRow();
}

int32_t PackedWeight::Input(int64_t j) const {
  int32_t input;
  std::memcpy(&input, permutation() + 4 * j, 4);
  return input;  // little-endian host (as everywhere in qmm)
}

int64_t PackedWeight::values_bytes() const {
  const int64_t elements = shape.n * shape.k;
  switch (scheme) {
    case Scheme::kFp16:
    case Scheme::kBf16:
      return 2 * elements;
    case Scheme::kW8A16:
      return elements;
    case Scheme::kW4A16:
      return elements / 2;
    case Scheme::kW2A8:
      return elements / 4;
  }
  return 0;
}

absl::StatusOr<PackedWeight> ViewPacked(Scheme s, const WeightShape& shape,
                                        std::span<const uint8_t> bytes) {
  if (absl::Status status = ValidateShape(s, shape); !status.ok()) return status;
  const int64_t expected = PackedBytes(s, shape);
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packed ", std::string(SchemeName(s)), " weight with n = ", shape.n, ", k = ", shape.k,
        ", group_size = ", shape.group_size, (shape.zero_points ? " with zero points" : ""),
        (shape.act_order ? " in act_order" : ""), " must be ", expected, " bytes, got ",
        bytes.size()));
  }
  PackedWeight w{s, shape, bytes};
  if (s == Scheme::kW2A8) {
    const int64_t row_bytes = shape.k / 4;
    for (int64_t n = 0; n < shape.n; ++n) {
      const int64_t b = FindInvalidTernaryByte(w.values() + n * row_bytes, row_bytes);
      if (b >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "packed W2A8 weight: row ", n, ", byte ", b, " (value ",
            static_cast<int>(w.values()[n * row_bytes + b]), ") holds code 3, which is invalid"));
      }
    }
  }
  if (s == Scheme::kW8A16 || s == Scheme::kW4A16 || s == Scheme::kW2A8) {
    if (absl::Status status = CheckScalesFinite(w); !status.ok()) return status;
  }
  if (w.zero_points() != nullptr) {
    if (absl::Status status = CheckZeroPoints(w); !status.ok()) return status;
  }
  if (w.permutation() != nullptr) {
    if (absl::Status status = CheckPermutation(w); !status.ok()) return status;
  }
  return w;
}

}  // namespace qmm
