#include "client/upload_request.h"

#include <algorithm>

#include "client/sha256.h"
#include "proto/enum_convert.h"

namespace qmm {

bool IsInt4Checkpoint(UploadSpec::Encoding e) {
  return e == UploadSpec::Encoding::kGptq || e == UploadSpec::Encoding::kGptqV2 ||
         e == UploadSpec::Encoding::kAwq || e == UploadSpec::Encoding::kPackQuantized;
}

namespace client_internal {

v1::WeightHeader BuildUploadHeader(const UploadSpec& spec, std::span<const uint8_t> payload) {
  v1::WeightHeader header;
  header.set_name(spec.name);
  header.set_n(spec.shape.n);
  header.set_k(spec.shape.k);
  header.set_scheme(SchemeToProto(spec.scheme));
  header.set_group_size(spec.shape.group_size);
  header.set_zero_points(spec.shape.zero_points);
  switch (spec.encoding) {
    case UploadSpec::Encoding::kFloat:
      header.set_encoding(v1::SOURCE_ENCODING_FLOAT);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
    case UploadSpec::Encoding::kPacked:
      header.set_encoding(v1::SOURCE_ENCODING_PACKED);
      break;
    case UploadSpec::Encoding::kBitnetHf:
    case UploadSpec::Encoding::kBitnetLiger:
      header.set_encoding(spec.encoding == UploadSpec::Encoding::kBitnetHf
                              ? v1::SOURCE_ENCODING_BITNET_HF
                              : v1::SOURCE_ENCODING_BITNET_LIGER);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
    case UploadSpec::Encoding::kGptq:
      header.set_encoding(v1::SOURCE_ENCODING_GPTQ);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
    case UploadSpec::Encoding::kGptqV2:
      header.set_encoding(v1::SOURCE_ENCODING_GPTQ_V2);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
    case UploadSpec::Encoding::kPackQuantized:
      header.set_encoding(v1::SOURCE_ENCODING_PACK_QUANTIZED);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
    case UploadSpec::Encoding::kAwq:
      header.set_encoding(v1::SOURCE_ENCODING_AWQ);
      header.set_source_dtype(DTypeToProto(spec.source_dtype));
      break;
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
