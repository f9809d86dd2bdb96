#include "client/qmmctl/names.h"

#include "absl/strings/str_cat.h"
#include "proto/enum_convert.h"

namespace qmm::ctl {

absl::StatusOr<Scheme> ParseScheme(std::string_view name) {
  for (Scheme scheme : kAllSchemes) {
    if (SchemeFlagName(scheme) == name) return scheme;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown scheme '", std::string(name),
                                                 "' (one of fp16, bf16, w8a16, w4a16, w2a8)"));
}

std::string_view SchemeFlagName(Scheme scheme) {
  switch (scheme) {
    case Scheme::kFp16:
      return "fp16";
    case Scheme::kBf16:
      return "bf16";
    case Scheme::kW8A16:
      return "w8a16";
    case Scheme::kW4A16:
      return "w4a16";
    case Scheme::kW2A8:
      return "w2a8";
  }
  return "unknown";
}

std::string ProtoSchemeName(v1::Scheme scheme) {
  const std::optional<Scheme> known = SchemeFromProto(scheme);
  if (!known) return absl::StrCat("scheme#", static_cast<int>(scheme));
  return std::string(SchemeFlagName(*known));
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name), "' (one of fp32, fp16, bf16)"));
}

}  // namespace qmm::ctl
