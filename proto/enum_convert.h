// Conversions between the wire enums of qmm.v1 and the C++ enums of kernels/.
#ifndef QMM_PROTO_ENUM_CONVERT_H_
#define QMM_PROTO_ENUM_CONVERT_H_

#include <optional>

#include "kernels/activation.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/int4_checkpoint.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm {

v1::DType DTypeToProto(DType dtype);
// nullopt for DTYPE_UNSPECIFIED and values this build does not know (proto3 enums are open).
std::optional<DType> DTypeFromProto(v1::DType dtype);

v1::Scheme SchemeToProto(Scheme scheme);
// nullopt for SCHEME_UNSPECIFIED and values this build does not know (proto3 enums are open).
std::optional<Scheme> SchemeFromProto(v1::Scheme scheme);

// nullopt for ACTIVATION_UNSPECIFIED and values this build does not know.
std::optional<Activation> ActivationFromProto(v1::Activation a);

// The int4 checkpoint format of SOURCE_ENCODING_GPTQ, _GPTQ_V2 and _PACK_QUANTIZED;
// nullopt for every other encoding.
std::optional<Int4Checkpoint> Int4CheckpointFromProto(v1::SourceEncoding encoding);

}  // namespace qmm

#endif  // QMM_PROTO_ENUM_CONVERT_H_
