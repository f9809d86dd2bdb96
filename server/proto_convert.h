// Conversions between the wire enums/messages of qmm.v1 and the kernel library's types.
#ifndef QMM_SERVER_PROTO_CONVERT_H_
#define QMM_SERVER_PROTO_CONVERT_H_

#include <optional>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"
#include "server/weight_store.h"

namespace qmm {

// nullopt for DTYPE_UNSPECIFIED and for values this server does not know (proto3 enums
// are open: a newer client may send any number).
std::optional<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);

// nullopt for SCHEME_UNSPECIFIED and unknown values.
std::optional<Scheme> SchemeFromProto(v1::Scheme scheme);
v1::Scheme SchemeToProto(Scheme scheme);

void FillWeightInfo(const StoredWeight& weight, v1::WeightInfo* info);

}  // namespace qmm

#endif  // QMM_SERVER_PROTO_CONVERT_H_
