// What an upload sends: the header message (with the payload's SHA-256) and the payload
// split into chunks of at most 1 MiB, as proto/qmm/v1/qmm.proto prescribes.
#ifndef QMM_CLIENT_UPLOAD_REQUEST_H_
#define QMM_CLIENT_UPLOAD_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm {

// Describes one weight to upload. The payload is either float values [n, k] row-major of
// `source_dtype`, which the server quantizes into `scheme`, the scheme's canonical packed
// form (see QuantizeWeight in kernels/quantize.h to produce it locally), for W2A8 a
// BitNet planar packing (Hugging Face or Liger-Kernel layout, proto SourceEncoding) whose
// optional scales are `source_dtype` values, or for W4A16 a GPTQ, AWQ or compressed-tensors
// layer's tensors (client/int4_checkpoint.h reads them) whose scales are.
struct UploadSpec {
  enum class Encoding {
    kFloat,
    kPacked,
    kBitnetHf,
    kBitnetLiger,
    kGptq,
    kGptqV2,
    kPackQuantized,
    kAwq,
  };

  std::string name;
  Scheme scheme = Scheme::kFp16;
  WeightShape shape;  // n, k and (W4A16 only) group_size and zero_points
  Encoding encoding = Encoding::kFloat;
  // kFloat: the values' dtype; kPacked: unused; the other encodings: the scales'.
  DType source_dtype = DType::kF32;
  // The BitNet encodings: the scales multiply (AutoBitLinear) rather than divide.
  bool scale_multiplies = false;
};

// Whether `e` is one of the int4 checkpoints' encodings (GPTQ, GPTQ v2, AWQ,
// pack-quantized).
bool IsInt4Checkpoint(UploadSpec::Encoding e);
// Whether `e` is a checkpoint layer's that qmmctl reads from .safetensors files: the int4
// encodings and Hugging Face's BitNet packing.
bool IsCheckpointLayer(UploadSpec::Encoding e);

namespace client_internal {

inline constexpr size_t kMaxChunkBytes = size_t{1} << 20;

v1::WeightHeader BuildUploadHeader(const UploadSpec& spec, std::span<const uint8_t> payload);

// Consecutive views of at most `max_chunk_bytes` (> 0) covering `payload`; none for an
// empty payload.
std::vector<std::span<const uint8_t>> SplitIntoChunks(std::span<const uint8_t> payload,
                                                      size_t max_chunk_bytes);

}  // namespace client_internal
}  // namespace qmm

#endif  // QMM_CLIENT_UPLOAD_REQUEST_H_
