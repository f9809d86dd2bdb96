// What a Hugging Face checkpoint directory says about its quantized linear layers (int4,
// or BitNet's ternary), so that `qmmctl upload --checkpoint=DIR` uploads every one of them
// with the right encoding, zero points and scales, as the quantizer wrote them, without
// the user restating its settings.
//
// The settings come from config.json's "quantization_config" (transformers' GPTQ, AWQ and
// compressed-tensors configs), else quantize_config.json (AutoGPTQ, GPTQModel), else
// quant_config.json (AutoAWQ). Taken: 4-bit GPTQ ("gptq" or "gptq_v2" checkpoint format,
// sym either way, desc_act either way: the layers' g_idx says where the groups are), 4-bit
// AWQ of the "gemm" version with zero points, and compressed-tensors' "pack-quantized"
// 4-bit integer weight-only schemes; groups of 128 or one a row; and transformers'
// BitNet ("bitnet": BitLinear layers stored packed, "offline", whose weight_scale divides,
// or with linear_class "autobitlinear" multiplies, as microsoft/bitnet-b1.58-2B-4T's).
// Anything else is refused with the key and the value that rule it out.
#ifndef QMM_CLIENT_CHECKPOINT_CONFIG_H_
#define QMM_CLIENT_CHECKPOINT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/bitnet_packing.h"
#include "kernels/int4_checkpoint.h"

namespace qmm {

struct CheckpointConfig {
  // Set for a BitNet checkpoint (W2A8 layers in Hugging Face's packing): what its weight
  // scales do. The int4 fields below are then unused.
  std::optional<BitnetScale> bitnet;
  Int4Checkpoint format = Int4Checkpoint::kGptq;
  // Whether the layers have zero points: GPTQ's sym = false, AWQ always; for
  // compressed-tensors each layer's weight_zero_point tensor says it, and this is whether
  // any scheme is asymmetric.
  bool zero_points = false;
  // W4A16's group size (128, or 0 for one group a row); nullopt where the config leaves it
  // to each scheme (compressed-tensors).
  std::optional<int32_t> group_size;
  std::string file;         // the file the settings came from
  std::string description;  // for people, e.g. "GPTQ (sym=False, desc_act)"
};

// Parses the settings object of `file` (config.json's "quantization_config", or the whole
// of quantize_config.json or quant_config.json). INVALID_ARGUMENT, naming the file, the
// key and the value, for a quantization qmm cannot hold as it is.
absl::StatusOr<CheckpointConfig> ParseQuantizationConfig(std::string_view json,
                                                         const std::string& file, bool whole_file);

// Reads the settings of the checkpoint directory `dir`. NOT_FOUND when none of the three
// files has them (a checkpoint that is not quantized).
absl::StatusOr<CheckpointConfig> ReadCheckpointConfig(const std::string& dir);

// The checkpoint's .safetensors files, as paths: those model.safetensors.index.json maps
// tensors to, else every *.safetensors file in `dir`, in name order. NOT_FOUND when there
// are none.
absl::StatusOr<std::vector<std::string>> CheckpointShards(const std::string& dir);

}  // namespace qmm

#endif  // QMM_CLIENT_CHECKPOINT_CONFIG_H_
