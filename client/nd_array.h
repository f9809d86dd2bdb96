// An n-dimensional array held in host memory: the common currency of the .npy and
// .safetensors readers and of the tensors the client sends and receives.
#ifndef QMM_CLIENT_ND_ARRAY_H_
#define QMM_CLIENT_ND_ARRAY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace qmm {

// Element types found in .npy and .safetensors files. Multi-byte elements are always
// little-endian in memory (readers convert nothing and reject big-endian files).
enum class ElementType : uint8_t {
  kF16,
  kBF16,
  kF32,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
};

size_t ElementSize(ElementType t);
// Short lower-case names: "f16", "bf16", "f32", "i8", "u8", ...
std::string_view ElementTypeName(ElementType t);

// The wire dtype with the same representation, if any (f32, f16, bf16).
std::optional<DType> ToWireDType(ElementType t);
ElementType FromWireDType(DType d);

struct NdArray {
  ElementType type = ElementType::kF32;
  std::vector<int64_t> shape;  // row-major (C order); empty means a scalar
  std::vector<uint8_t> data;   // NumElements() * ElementSize(type) bytes

  int64_t NumElements() const;
};

// The number of elements of `shape`, or INVALID_ARGUMENT when a dimension is negative or
// the product (times `element_size`, the byte count) overflows int64.
absl::StatusOr<int64_t> CheckedElementCount(const std::vector<int64_t>& shape, size_t element_size);

// "[2, 3]", for messages.
std::string ShapeText(const std::vector<int64_t>& shape);

// Every element converted to float (integers exactly where they fit, f64 rounded).
std::vector<float> ToFloats(const NdArray& a);

// An array of wire dtype `type` and `shape` holding `values` converted with
// round-to-nearest-even. `values` must hold product(shape) elements.
NdArray FromFloats(DType type, std::vector<int64_t> shape, std::span<const float> values);

}  // namespace qmm

#endif  // QMM_CLIENT_ND_ARRAY_H_
