// The names qmmctl's flags and output use for schemes and dtypes.
#ifndef QMM_CLIENT_QMMCTL_NAMES_H_
#define QMM_CLIENT_QMMCTL_NAMES_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm::ctl {

// "fp16", "bf16", "w8a16", "w4a16", "w2a8"; INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<Scheme> ParseScheme(std::string_view name);
std::string_view SchemeFlagName(Scheme scheme);
// The flag name of a wire scheme ("w4a16"), or its number for one this build does not know.
std::string ProtoSchemeName(v1::Scheme scheme);

// "fp32", "fp16", "bf16"; INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_NAMES_H_
