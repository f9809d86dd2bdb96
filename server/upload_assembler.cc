#include "server/upload_assembler.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/limits.h"

namespace qmm {
namespace {

// Reserving the whole declared size up front would let one header claim a large block of
// memory before sending anything; beyond this, the buffer grows with the data.
constexpr int64_t kMaxInitialReserve = int64_t{64} << 20;

std::string Hex(const Sha256::Digest& digest) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

}  // namespace

UploadAssembler::UploadAssembler(int64_t total_bytes, const Sha256::Digest& expected_sha256)
    : total_bytes_(total_bytes), expected_(expected_sha256) {
  payload_.reserve(std::min(total_bytes_, kMaxInitialReserve));
}

absl::Status UploadAssembler::AddChunk(absl::string_view chunk) {
  const int64_t size = static_cast<int64_t>(chunk.size());
  if (size > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", size, " bytes exceeds the chunk limit of ", kMaxChunkBytes, " bytes"));
  }
  if (size > total_bytes_ - received_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk of ", size, " bytes after ", received_bytes(),
                     " received goes past header.total_bytes = ", total_bytes_));
  }
  sha256_.Update(chunk);
  payload_.insert(payload_.end(), chunk.begin(), chunk.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> UploadAssembler::Finish() {
  if (received_bytes() != total_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("upload stream ended after ", received_bytes(),
                                                   " of ", total_bytes_, " declared bytes"));
  }
  const Sha256::Digest actual = sha256_.Finish();
  if (actual != expected_) {
    return absl::DataLossError(absl::StrCat("SHA-256 of the ", total_bytes_, "-byte payload is ",
                                            Hex(actual), ", header.sha256 says ", Hex(expected_)));
  }
  return std::move(payload_);
}

}  // namespace qmm
