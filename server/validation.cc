#include "server/validation.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/proto_convert.h"

namespace qmm {

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '/' || c == '-';
}

absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// Index of the first NaN or Inf among `count` raw elements of `dtype`, or -1. Works on
// the bit patterns: a value is non-finite exactly when its exponent bits are all set.
int64_t FindNonFinite(DType dtype, const char* data, int64_t count) {
  if (dtype == DType::kF32) {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + 4 * i, 4);
      if ((bits & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
  }
  const uint16_t exponent_mask = dtype == DType::kF16 ? 0x7c00 : 0x7f80;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, data + 2 * i, 2);
    if ((bits & exponent_mask) == exponent_mask) return i;
  }
  return -1;
}

// The enum value's name, or its number when this build does not know it.
template <typename Enum>
std::string EnumLabel(Enum value, const std::string& name) {
  return name.empty() ? absl::StrCat(static_cast<int>(value)) : name;
}

absl::StatusOr<DType> CheckDType(v1::DType dtype, absl::string_view field) {
  std::optional<DType> out = DTypeFromProto(dtype);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", EnumLabel(dtype, v1::DType_Name(dtype)),
                     " is not a supported dtype (DTYPE_FP32, DTYPE_FP16 or DTYPE_BF16)"));
  }
  return *out;
}

// The dtype of the scales that a checkpoint encoding carries (header.source_dtype, or
// `default_dtype` when unset), once the header's scheme is the one the encoding converts
// into.
absl::StatusOr<DType> CheckpointScaleDtype(const v1::WeightHeader& header, v1::Scheme scheme,
                                           DType default_dtype) {
  if (header.scheme() != scheme) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.encoding = ", v1::SourceEncoding_Name(header.encoding()), " needs header.scheme = ",
        v1::Scheme_Name(scheme), ", not ", v1::Scheme_Name(header.scheme())));
  }
  if (header.source_dtype() == v1::DTYPE_UNSPECIFIED) return default_dtype;
  return CheckDType(header.source_dtype(), "header.source_dtype");
}

// The BitNet planar encodings carry the codes and 0, 1 or N scales; total_bytes says
// how many, so it must be one of those three sizes. Fills spec->bitnet.
absl::StatusOr<int64_t> CheckBitnetPayload(const v1::WeightHeader& header, UploadSpec& spec) {
  const std::string encoding = v1::SourceEncoding_Name(header.encoding());
  absl::StatusOr<DType> scales = CheckpointScaleDtype(header, v1::SCHEME_W2A8, DType::kF32);
  if (!scales.ok()) return scales.status();
  const DType scale_dtype = *scales;
  const BitnetPackedAxis axis = header.encoding() == v1::SOURCE_ENCODING_BITNET_HF
                                    ? BitnetPackedAxis::kOutFeatures
                                    : BitnetPackedAxis::kInFeatures;
  spec.bitnet = UploadSpec::Bitnet{
      axis, scale_dtype,
      header.scale_multiplies() ? BitnetScale::kMultiplies : BitnetScale::kDivides};
  const int64_t codes = BitnetPlanarCodeBytes(axis, spec.desc.shape);
  const int64_t scale = static_cast<int64_t>(DTypeSize(scale_dtype));
  for (int64_t count : {int64_t{0}, int64_t{1}, header.n()}) {
    if (header.total_bytes() == codes + count * scale) return header.total_bytes();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "header.total_bytes = ", header.total_bytes(), " but a ", encoding,
      " payload for n = ", header.n(), ", k = ", header.k(), " is ", codes,
      " code bytes plus 0, 1 or ", header.n(), " ", std::string(DTypeName(scale_dtype)),
      " scales: ", codes, ", ", codes + scale, " or ", codes + header.n() * scale, " bytes"));
}

// The GPTQ, AWQ and pack-quantized encodings carry the codes, the zero points (GPTQ, AWQ), the
// scales and optionally the group index; total_bytes says whether the index is there (an
// act_order weight needs it). Fills spec->int4_checkpoint.
absl::StatusOr<int64_t> CheckInt4CheckpointPayload(const v1::WeightHeader& header,
                                                   UploadSpec& spec) {
  const std::string encoding = v1::SourceEncoding_Name(header.encoding());
  absl::StatusOr<DType> scales = CheckpointScaleDtype(header, v1::SCHEME_W4A16, DType::kF16);
  if (!scales.ok()) return scales.status();
  const DType scale_dtype = *scales;
  const Int4Checkpoint format = *Int4CheckpointFromProto(header.encoding());
  if (absl::Status s = CheckInt4CheckpointShape(format, spec.desc.shape); !s.ok()) {
    return WithPrefix(absl::StrCat("header: ", encoding, ": "), s);
  }
  spec.int4_checkpoint = UploadSpec::Int4{format, scale_dtype};
  const Int4CheckpointBytes sizes = Int4CheckpointSizes(format, spec.desc.shape, scale_dtype);
  if (header.act_order()) {
    if (header.total_bytes() == sizes.Total(true)) return header.total_bytes();
    return absl::InvalidArgumentError(
        absl::StrCat("header.total_bytes = ", header.total_bytes(), " but a ", encoding,
                     " payload in act_order for n = ", header.n(), ", k = ", header.k(), " with ",
                     std::string(DTypeName(scale_dtype)), " scales is ", sizes.Total(true),
                     " bytes (the group index included: it gives the order)"));
  }
  for (bool with_g_idx : {false, true}) {
    if (header.total_bytes() == sizes.Total(with_g_idx)) return header.total_bytes();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "header.total_bytes = ", header.total_bytes(), " but a ", encoding,
      " payload for n = ", header.n(), ", k = ", header.k(), ", group_size ", header.group_size(),
      " with ", std::string(DTypeName(scale_dtype)), " scales is ", sizes.Total(false), " bytes",
      sizes.g_idx > 0 ? absl::StrCat(", or ", sizes.Total(true), " with the group index") : ""));
}

}  // namespace

absl::Status CheckWeightName(absl::string_view name, absl::string_view field) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  // Overlong or odd names are not echoed back: they could be anything.
  if (static_cast<int64_t>(name.size()) > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is ", name.size(), " characters long, over the limit of ", kMaxNameLength));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has a character outside [A-Za-z0-9._:/-] at position ", i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<UploadSpec> CheckWeightHeader(const v1::WeightHeader& header, const Backend& backend,
                                             const ServiceLimits& limits) {
  UploadSpec spec;
  if (absl::Status s = CheckWeightName(header.name(), "header.name"); !s.ok()) return s;
  spec.name = header.name();

  std::optional<Scheme> scheme = SchemeFromProto(header.scheme());
  if (!scheme) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.scheme = ", EnumLabel(header.scheme(), v1::Scheme_Name(header.scheme())),
        " is not a supported scheme (SCHEME_FP16, SCHEME_BF16, SCHEME_W8A16, SCHEME_W4A16 or "
        "SCHEME_W2A8)"));
  }
  spec.desc.scheme = *scheme;
  spec.desc.shape = {header.n(), header.k(), header.group_size(), header.zero_points(),
                     header.act_order()};
  if (absl::Status s = ValidateShape(*scheme, spec.desc.shape); !s.ok()) {
    return WithPrefix("header: ", s);
  }
  if (absl::Status s = backend.CheckShape(*scheme, spec.desc.shape); !s.ok()) {
    return WithPrefix(absl::StrCat("header: backend ", std::string(backend.name()), ": "), s);
  }
  spec.desc.packed_bytes = PackedBytes(*scheme, spec.desc.shape);

  if (header.scale_multiplies() && header.encoding() != v1::SOURCE_ENCODING_BITNET_HF &&
      header.encoding() != v1::SOURCE_ENCODING_BITNET_LIGER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.scale_multiplies applies to the BitNet encodings (SOURCE_ENCODING_BITNET_HF, "
        "SOURCE_ENCODING_BITNET_LIGER) only, not ",
        EnumLabel(header.encoding(), v1::SourceEncoding_Name(header.encoding()))));
  }
  int64_t expected_bytes = 0;
  switch (header.encoding()) {
    case v1::SOURCE_ENCODING_FLOAT: {
      if (header.act_order()) {
        // The order comes from GPTQ's Hessian, which float values do not carry.
        return absl::InvalidArgumentError(
            "header.act_order must be false for SOURCE_ENCODING_FLOAT (float values are "
            "quantized in their own column order)");
      }
      absl::StatusOr<DType> dtype = CheckDType(header.source_dtype(), "header.source_dtype");
      if (!dtype.ok()) return dtype.status();
      spec.source_dtype = *dtype;
      std::optional<int64_t> elements = CheckedMul(header.n(), header.k());
      std::optional<int64_t> bytes =
          elements ? CheckedMul(*elements, DTypeSize(*dtype)) : std::nullopt;
      if (!bytes) return absl::InvalidArgumentError("header: n * k * dtype size overflows");
      expected_bytes = *bytes;
      break;
    }
    case v1::SOURCE_ENCODING_PACKED:
      if (header.source_dtype() != v1::DTYPE_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            "header.source_dtype must be unset for SOURCE_ENCODING_PACKED payloads");
      }
      expected_bytes = spec.desc.packed_bytes;
      break;
    case v1::SOURCE_ENCODING_BITNET_HF:
    case v1::SOURCE_ENCODING_BITNET_LIGER: {
      absl::StatusOr<int64_t> bytes = CheckBitnetPayload(header, spec);
      if (!bytes.ok()) return bytes.status();
      expected_bytes = *bytes;
      break;
    }
    case v1::SOURCE_ENCODING_GPTQ:
    case v1::SOURCE_ENCODING_GPTQ_V2:
    case v1::SOURCE_ENCODING_PACK_QUANTIZED:
    case v1::SOURCE_ENCODING_AWQ: {
      absl::StatusOr<int64_t> bytes = CheckInt4CheckpointPayload(header, spec);
      if (!bytes.ok()) return bytes.status();
      expected_bytes = *bytes;
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "header.encoding = ",
          EnumLabel(header.encoding(), v1::SourceEncoding_Name(header.encoding())),
          " is not supported (SOURCE_ENCODING_FLOAT, SOURCE_ENCODING_PACKED, "
          "SOURCE_ENCODING_BITNET_HF, SOURCE_ENCODING_BITNET_LIGER, SOURCE_ENCODING_GPTQ, "
          "SOURCE_ENCODING_GPTQ_V2, SOURCE_ENCODING_PACK_QUANTIZED or SOURCE_ENCODING_AWQ)"));
  }
  if (header.total_bytes() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.total_bytes = ", header.total_bytes(), " but the payload for n = ", header.n(),
        ", k = ", header.k(), ", scheme ", std::string(SchemeName(*scheme)),
        spec.source_dtype
            ? absl::StrCat(" from ", std::string(DTypeName(*spec.source_dtype)), " values")
            : std::string(" in packed form"),
        " is ", expected_bytes, " bytes"));
  }
  if (expected_bytes > limits.max_upload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("header.total_bytes = ", expected_bytes,
                                                     " exceeds the upload limit of ",
                                                     limits.max_upload_bytes, " bytes"));
  }
  spec.total_bytes = expected_bytes;

  if (header.sha256().size() != spec.sha256.size()) {
    return absl::InvalidArgumentError(absl::StrCat("header.sha256 is ", header.sha256().size(),
                                                   " bytes, must be ", spec.sha256.size()));
  }
  std::memcpy(spec.sha256.data(), header.sha256().data(), spec.sha256.size());
  return spec;
}

absl::StatusOr<MatMulSpec> CheckMatMulInput(const v1::MatMulRequest& request,
                                            const StoredWeight& weight, const ServiceLimits& limits,
                                            const InputRows* beside) {
  const v1::Tensor& input = request.input();
  if (beside != nullptr && !input.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("input.data is ", input.data().size(),
                                                   " bytes but must be empty: the rows travel in ",
                                                   beside->field));
  }
  const absl::string_view data = beside != nullptr ? beside->data : input.data();
  const absl::string_view data_field = beside != nullptr ? beside->field : "input.data";
  const WeightShape& shape = weight.desc().shape;
  MatMulSpec spec;
  absl::StatusOr<DType> x_dtype = CheckDType(input.dtype(), "input.dtype");
  if (!x_dtype.ok()) return x_dtype.status();
  spec.x_dtype = *x_dtype;
  if (request.output_dtype() == v1::DTYPE_UNSPECIFIED) {
    spec.y_dtype = spec.x_dtype;
  } else {
    absl::StatusOr<DType> y_dtype = CheckDType(request.output_dtype(), "output_dtype");
    if (!y_dtype.ok()) return y_dtype.status();
    spec.y_dtype = *y_dtype;
  }

  if (input.shape_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape has ", input.shape_size(), " dimensions, must be 2 ([M, K])"));
  }
  spec.m = input.shape(0);
  if (spec.m < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape[0] = ", spec.m, " (M) must be at least 1"));
  }
  if (spec.m > limits.max_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape[0] = ", spec.m, " (M) exceeds max_rows ", limits.max_rows));
  }
  if (input.shape(1) != shape.k) {
    return absl::InvalidArgumentError(absl::StrCat("input.shape[1] = ", input.shape(1),
                                                   " does not match K = ", shape.k, " of weight \"",
                                                   weight.name(), "\""));
  }
  // M <= max_rows and K <= kMaxDim keep these far from overflow; check anyway, cheaply.
  const std::optional<int64_t> x_elements = CheckedMul(spec.m, shape.k);
  const std::optional<int64_t> x_bytes =
      x_elements ? CheckedMul(*x_elements, DTypeSize(spec.x_dtype)) : std::nullopt;
  if (!x_bytes || static_cast<int64_t>(data.size()) != *x_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        data_field, " is ", data.size(), " bytes, but shape [", spec.m, ", ", shape.k, "] of ",
        std::string(DTypeName(spec.x_dtype)), " needs ", x_bytes ? *x_bytes : -1));
  }
  const std::optional<int64_t> y_elements = CheckedMul(spec.m, shape.n);
  const std::optional<int64_t> y_bytes =
      y_elements ? CheckedMul(*y_elements, DTypeSize(spec.y_dtype)) : std::nullopt;
  const int64_t y_limit = limits.max_message_bytes - kResponseOverheadBytes;
  if (!y_bytes || *y_bytes > y_limit) {
    const int64_t row_bytes = shape.n * static_cast<int64_t>(DTypeSize(spec.y_dtype));
    return absl::ResourceExhaustedError(absl::StrCat(
        "output [", spec.m, ", ", shape.n, "] of ", std::string(DTypeName(spec.y_dtype)),
        " would exceed max_message_bytes ", limits.max_message_bytes, "; send at most ",
        y_limit / row_bytes, " rows per request"));
  }
  spec.y_bytes = *y_bytes;

  if (weight.desc().scheme == Scheme::kW2A8) {
    const int64_t bad = FindNonFinite(spec.x_dtype, data.data(), *x_elements);
    if (bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input[", bad / shape.k, "][", bad % shape.k,
          "] is NaN or infinite; W2A8 quantizes activations to int8 and needs finite values"));
    }
  }
  return spec;
}

}  // namespace qmm
