// Conversions between the wire enums of qmm.v1 and the C++ enums of kernels/.
#ifndef QMM_CLIENT_PROTO_ENUMS_H_
#define QMM_CLIENT_PROTO_ENUMS_H_

#include <optional>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm::client_internal {

v1::DType DTypeToProto(DType dtype);
// nullopt for DTYPE_UNSPECIFIED and values this client does not know.
std::optional<DType> DTypeFromProto(v1::DType dtype);

v1::Scheme SchemeToProto(Scheme scheme);
// nullopt for SCHEME_UNSPECIFIED and values this client does not know.
std::optional<Scheme> SchemeFromProto(v1::Scheme scheme);

}  // namespace qmm::client_internal

#endif  // QMM_CLIENT_PROTO_ENUMS_H_
