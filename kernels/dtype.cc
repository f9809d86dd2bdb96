#include "kernels/dtype.h"

#include <bit>
#include <cstring>

namespace qmm {

static_assert(std::endian::native == std::endian::little,
              "wire tensors are little-endian and are copied as they are");

std::string_view DTypeName(DType d) {
  switch (d) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t magnitude = h & 0x7fff;
  uint32_t bits;
  if (magnitude >= 0x7c00) {
    // Inf or NaN: all-ones exponent, payload kept in the top mantissa bits.
    bits = 0x7f800000 | ((magnitude & 0x3ff) << 13);
  } else {
    // Placing the half's exponent and mantissa in a float's low exponent bits gives the
    // value times 2^-112; scaling by 2^112 is exact and turns half subnormals into float
    // normals without a separate branch.
    const float scaled = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
    bits = std::bit_cast<uint32_t>(scaled);
  }
  return std::bit_cast<float>(bits | sign);
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t magnitude = u & 0x7fffffff;
  if (magnitude > 0x7f800000) {
    // NaN: keep the top payload bits and force the quiet bit so it cannot become Inf.
    return sign | 0x7e00 | static_cast<uint16_t>((magnitude >> 13) & 0x3ff);
  }
  // 65520 (= 0x477ff000) is halfway between the largest half, 65504, and 2^16; ties go
  // to the even neighbour, which is Inf.
  if (magnitude >= 0x477ff000) return sign | 0x7c00;
  if (magnitude >= 0x38800000) {
    // Normal half: rebias the exponent (127 -> 15), then round the 13 dropped bits to
    // nearest even. A carry out of the mantissa correctly bumps the exponent.
    uint32_t r = (magnitude - 0x38000000) >> 13;
    const uint32_t rest = magnitude & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Subnormal half (or zero): the result counts units of 2^-24.
  const int exponent = static_cast<int>(magnitude >> 23);
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
  const int shift = 126 - exponent;  // 14..24
  uint32_t r = mantissa >> shift;
  const uint32_t rest = mantissa & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rest > half || (rest == half && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

uint16_t FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffff) > 0x7f800000) {
    // NaN: truncation could clear every payload bit left; set the quiet bit.
    return static_cast<uint16_t>((u >> 16) | 0x40);
  }
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

void ToFloat(DType from, const void* src, size_t count, float* dst) {
  if (count == 0) return;  // src and dst may be null then
  switch (from) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = HalfToFloat(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* b = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Bf16ToFloat(b[i]);
      return;
    }
  }
}

void FromFloat(DType to, const float* src, size_t count, void* dst) {
  if (count == 0) return;  // src and dst may be null then
  switch (to) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) h[i] = FloatToHalf(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* b = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) b[i] = FloatToBf16(src[i]);
      return;
    }
  }
}

}  // namespace qmm
