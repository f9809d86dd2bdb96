// Conversions between the wire enums/messages of qmm.v1 and the kernel library's types.
#ifndef QMM_SERVER_PROTO_CONVERT_H_
#define QMM_SERVER_PROTO_CONVERT_H_

#include <optional>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "proto/enum_convert.h"
#include "qmm/v1/qmm.pb.h"
#include "server/weight_store.h"

namespace qmm {

void FillWeightInfo(const StoredWeight& weight, v1::WeightInfo* info);

}  // namespace qmm

#endif  // QMM_SERVER_PROTO_CONVERT_H_
