#include "server/proto_convert.h"

namespace qmm {

void FillWeightInfo(const StoredWeight& weight, v1::WeightInfo* info) {
  const WeightDesc& desc = weight.desc();
  info->set_name(weight.name());
  info->set_n(desc.shape.n);
  info->set_k(desc.shape.k);
  info->set_scheme(SchemeToProto(desc.scheme));
  info->set_group_size(desc.shape.group_size);
  info->set_zero_points(desc.shape.zero_points);
  info->set_act_order(desc.shape.act_order);
  info->set_device_bytes(weight.device_bytes());
  info->set_packed_bytes(desc.packed_bytes);
}

}  // namespace qmm
