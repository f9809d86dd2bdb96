#include "client/nd_array.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace qmm {
namespace {

template <typename T>
void ConvertAll(const std::vector<uint8_t>& data, std::vector<float>& out) {
  const size_t count = data.size() / sizeof(T);
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data.data() + i * sizeof(T), sizeof(T));  // data may be unaligned
    out[i] = static_cast<float>(v);
  }
}

}  // namespace

size_t ElementSize(ElementType t) {
  switch (t) {
    case ElementType::kI8:
    case ElementType::kU8:
      return 1;
    case ElementType::kF16:
    case ElementType::kBF16:
    case ElementType::kI16:
    case ElementType::kU16:
      return 2;
    case ElementType::kF32:
    case ElementType::kI32:
    case ElementType::kU32:
      return 4;
    case ElementType::kF64:
    case ElementType::kI64:
    case ElementType::kU64:
      return 8;
  }
  return 1;
}

std::string_view ElementTypeName(ElementType t) {
  switch (t) {
    case ElementType::kF16:
      return "f16";
    case ElementType::kBF16:
      return "bf16";
    case ElementType::kF32:
      return "f32";
    case ElementType::kF64:
      return "f64";
    case ElementType::kI8:
      return "i8";
    case ElementType::kI16:
      return "i16";
    case ElementType::kI32:
      return "i32";
    case ElementType::kI64:
      return "i64";
    case ElementType::kU8:
      return "u8";
    case ElementType::kU16:
      return "u16";
    case ElementType::kU32:
      return "u32";
    case ElementType::kU64:
      return "u64";
  }
  return "unknown";
}

std::optional<DType> ToWireDType(ElementType t) {
  switch (t) {
    case ElementType::kF32:
      return DType::kF32;
    case ElementType::kF16:
      return DType::kF16;
    case ElementType::kBF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

ElementType FromWireDType(DType d) {
  switch (d) {
    case DType::kF32:
      return ElementType::kF32;
    case DType::kF16:
      return ElementType::kF16;
    case DType::kBF16:
      return ElementType::kBF16;
  }
  return ElementType::kF32;
}

int64_t NdArray::NumElements() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

absl::StatusOr<int64_t> CheckedElementCount(const std::vector<int64_t>& shape,
                                            size_t element_size) {
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", i, " of the shape is negative (", shape[i], ")"));
    }
    if (shape[i] != 0 && count > std::numeric_limits<int64_t>::max() / shape[i]) {
      return absl::InvalidArgumentError("the shape's element count overflows int64");
    }
    count *= shape[i];
  }
  if (count > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_size)) {
    return absl::InvalidArgumentError("the shape's byte count overflows int64");
  }
  return count;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::vector<float> ToFloats(const NdArray& a) {
  std::vector<float> out;
  switch (a.type) {
    case ElementType::kF16:
    case ElementType::kBF16:
    case ElementType::kF32: {
      const size_t count = a.data.size() / ElementSize(a.type);
      out.resize(count);
      ToFloat(*ToWireDType(a.type), a.data.data(), count, out.data());
      break;
    }
    case ElementType::kF64:
      ConvertAll<double>(a.data, out);
      break;
    case ElementType::kI8:
      ConvertAll<int8_t>(a.data, out);
      break;
    case ElementType::kI16:
      ConvertAll<int16_t>(a.data, out);
      break;
    case ElementType::kI32:
      ConvertAll<int32_t>(a.data, out);
      break;
    case ElementType::kI64:
      ConvertAll<int64_t>(a.data, out);
      break;
    case ElementType::kU8:
      ConvertAll<uint8_t>(a.data, out);
      break;
    case ElementType::kU16:
      ConvertAll<uint16_t>(a.data, out);
      break;
    case ElementType::kU32:
      ConvertAll<uint32_t>(a.data, out);
      break;
    case ElementType::kU64:
      ConvertAll<uint64_t>(a.data, out);
      break;
  }
  return out;
}

NdArray FromFloats(DType type, std::vector<int64_t> shape, std::span<const float> values) {
  NdArray a{FromWireDType(type), std::move(shape), {}};
  a.data.resize(values.size() * DTypeSize(type));
  FromFloat(type, values.data(), values.size(), a.data.data());
  return a;
}

}  // namespace qmm
