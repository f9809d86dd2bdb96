// Reads one linear layer of a GPTQ, AWQ or compressed-tensors (pack-quantized) int4
// checkpoint from a .safetensors file into an upload payload of the matching source
// encoding (proto SOURCE_ENCODING_GPTQ, _GPTQ_V2, _AWQ, _PACK_QUANTIZED): the layer's
// tensors as they are, one after the other, with the weight's shape and group size read
// from theirs. The server converts them
// (kernels/int4_checkpoint.h); what only it can check (zero point ranges, group index
// values, scales) is left to it.
#ifndef QMM_CLIENT_INT4_CHECKPOINT_H_
#define QMM_CLIENT_INT4_CHECKPOINT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/safetensors.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/int4_checkpoint.h"

namespace qmm {

struct Int4CheckpointPayload {
  // n, k, group_size (128, or 0 for one group a row), and zero_points: set for AWQ, which
  // always has them, and for a pack-quantized layer with a weight_zero_point. A GPTQ
  // layer's say nothing of it (a "gptq_v2" layer read as "gptq" would look asymmetric):
  // the quantize_config's sym decides, which the caller knows.
  // act_order: set where the group index is there and is not k / 128 (desc_act, actorder
  // "group"), so that such layers upload as they are.
  WeightShape shape;
  DType scale_dtype = DType::kF16;
  std::vector<uint8_t> bytes;
};

// `layer` names the linear layer (e.g. "model.layers.0.mlp.down_proj"); its tensors are
// LAYER.qweight, .qzeros, .scales and optionally .g_idx (GPTQ; AWQ has no g_idx, and its
// qweight is [K, N/8] where GPTQ's is [K/8, N]) or LAYER.weight_packed,
// .weight_scale and optionally .weight_zero_point and .weight_g_idx (pack-quantized). A
// name ending in one of those tensors' suffixes is taken as its layer. INVALID_ARGUMENT,
// naming the tensor, when one has the wrong dtype or a shape that does not fit the
// others, or the group size is neither 128 nor one group a row; NOT_FOUND when a tensor
// is missing.
absl::StatusOr<Int4CheckpointPayload> ReadInt4Checkpoint(const SafetensorsFile& file,
                                                         std::string_view layer,
                                                         Int4Checkpoint format);

}  // namespace qmm

#endif  // QMM_CLIENT_INT4_CHECKPOINT_H_
