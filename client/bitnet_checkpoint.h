// Reads one BitLinear layer of a Hugging Face BitNet b1.58 checkpoint (transformers'
// integrations/bitnet.py, BitLinear and AutoBitLinear stored "offline") from a
// .safetensors file into a SOURCE_ENCODING_BITNET_HF upload payload: LAYER.weight, uint8
// [N / 4, K], the ternary codes packed planar along N, as it is, then the values of
// LAYER.weight_scale (one, or one a row; none when the layer has no such tensor). Whether
// the scale divides (BitLinear) or multiplies (AutoBitLinear) is the checkpoint's
// config.json's to say (client/checkpoint_config.h), not the tensors'. The server converts
// the payload (kernels/bitnet_packing.h) and checks the codes and the scales' values.
#ifndef QMM_CLIENT_BITNET_CHECKPOINT_H_
#define QMM_CLIENT_BITNET_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/safetensors.h"
#include "kernels/dtype.h"

namespace qmm {

struct BitnetLayerPayload {
  int64_t n = 0;  // 4 * the rows of LAYER.weight: BitLinear's N is a multiple of 4
  int64_t k = 0;
  DType scale_dtype = DType::kF32;  // LAYER.weight_scale's (f32 when there is none)
  std::vector<uint8_t> bytes;
};

// `layer` names the layer (e.g. "model.layers.0.mlp.down_proj"), or one of its tensors
// (a name ending in ".weight" or ".weight_scale"). NOT_FOUND when LAYER.weight is
// missing; INVALID_ARGUMENT, naming the tensor, when LAYER.weight is not a 2-D uint8
// tensor or LAYER.weight_scale is not f16, bf16 or f32 with 1 or N values.
absl::StatusOr<BitnetLayerPayload> ReadBitnetLayer(const SafetensorsFile& file,
                                                   std::string_view layer);

// The layers of `file` that are BitNet layers: each LAYER whose LAYER.weight is a 2-D
// uint8 tensor (float layers, such as the lm_head a checkpoint keeps, are not), in the
// file's order of names.
std::vector<std::string> BitnetLayers(const SafetensorsFile& file);

}  // namespace qmm

#endif  // QMM_CLIENT_BITNET_CHECKPOINT_H_
