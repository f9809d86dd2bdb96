#include "client/upload_request.h"

#include <algorithm>

#include "client/sha256.h"
#include "proto/enum_convert.h"

namespace qmm {

bool IsInt4Checkpoint(UploadSpec::Encoding e) {
  return e == UploadSpec::Encoding::kGptq || e == UploadSpec::Encoding::kGptqV2 ||
         e == UploadSpec::Encoding::kAwq || e == UploadSpec::Encoding::kPackQuantized;
}

bool IsCheckpointLayer(UploadSpec::Encoding e) {
  return IsInt4Checkpoint(e) || e == UploadSpec::Encoding::kBitnetHf;
}

namespace client_internal {
namespace {

v1::SourceEncoding EncodingToProto(UploadSpec::Encoding e) {
  switch (e) {
    case UploadSpec::Encoding::kFloat:
      return v1::SOURCE_ENCODING_FLOAT;
    case UploadSpec::Encoding::kPacked:
      return v1::SOURCE_ENCODING_PACKED;
    case UploadSpec::Encoding::kBitnetHf:
      return v1::SOURCE_ENCODING_BITNET_HF;
    case UploadSpec::Encoding::kBitnetLiger:
      return v1::SOURCE_ENCODING_BITNET_LIGER;
    case UploadSpec::Encoding::kGptq:
      return v1::SOURCE_ENCODING_GPTQ;
    case UploadSpec::Encoding::kGptqV2:
      return v1::SOURCE_ENCODING_GPTQ_V2;
    case UploadSpec::Encoding::kPackQuantized:
      return v1::SOURCE_ENCODING_PACK_QUANTIZED;
    case UploadSpec::Encoding::kAwq:
      return v1::SOURCE_ENCODING_AWQ;
  }
  return v1::SOURCE_ENCODING_UNSPECIFIED;
}

}  // namespace

v1::WeightHeader BuildUploadHeader(const UploadSpec& spec, std::span<const uint8_t> payload) {
  v1::WeightHeader header;
  header.set_name(spec.name);
  header.set_n(spec.shape.n);
  header.set_k(spec.shape.k);
  header.set_scheme(SchemeToProto(spec.scheme));
  header.set_group_size(spec.shape.group_size);
  header.set_zero_points(spec.shape.zero_points);
  header.set_act_order(spec.shape.act_order);
  header.set_scale_multiplies(spec.scale_multiplies);
  header.set_encoding(EncodingToProto(spec.encoding));
  // Every encoding but the packed form names a dtype: the values' or the scales'.
  if (spec.encoding != UploadSpec::Encoding::kPacked) {
    header.set_source_dtype(DTypeToProto(spec.source_dtype));
  }
  header.set_total_bytes(static_cast<int64_t>(payload.size()));
  const std::array<uint8_t, 32> digest = Sha256Digest(payload);
  header.set_sha256(digest.data(), digest.size());
  return header;
}

std::vector<std::span<const uint8_t>> SplitIntoChunks(std::span<const uint8_t> payload,
                                                      size_t max_chunk_bytes) {
  std::vector<std::span<const uint8_t>> chunks;
  chunks.reserve((payload.size() + max_chunk_bytes - 1) / max_chunk_bytes);
  for (size_t offset = 0; offset < payload.size(); offset += max_chunk_bytes) {
    chunks.push_back(payload.subspan(offset, std::min(max_chunk_bytes, payload.size() - offset)));
  }
  return chunks;
}

}  // namespace client_internal
}  // namespace qmm
