// Element types of activations and results, and exact conversions between them.
#ifndef QMM_KERNELS_DTYPE_H_
#define QMM_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qmm {

enum class DType : uint8_t { kF32, kF16, kBF16 };

constexpr size_t DTypeSize(DType d) { return d == DType::kF32 ? 4 : 2; }
std::string_view DTypeName(DType d);

// IEEE binary16 / bfloat16 <-> float, round-to-nearest-even, NaN and Inf preserved.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToBf16(float f);

// Converts `count` elements of `src` (dtype `from`) to float.
void ToFloat(DType from, const void* src, size_t count, float* dst);
// Converts `count` floats to dtype `to`.
void FromFloat(DType to, const float* src, size_t count, void* dst);

}  // namespace qmm

#endif  // QMM_KERNELS_DTYPE_H_
