// Collects one upload's payload as its chunks arrive: enforces the declared byte count
// and the chunk size limit on the fly, and checks the SHA-256 digest at the end.
//
// Not thread-safe: one upload stream feeds it, one message at a time.
#ifndef QMM_SERVER_UPLOAD_ASSEMBLER_H_
#define QMM_SERVER_UPLOAD_ASSEMBLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/sha256.h"

namespace qmm {

class UploadAssembler {
 public:
  // total_bytes >= 0: the exact payload size the header declared.
  UploadAssembler(int64_t total_bytes, const Sha256::Digest& expected_sha256);

  // INVALID_ARGUMENT when the chunk is over kMaxChunkBytes or would carry the payload past
  // total_bytes (the message names both counts); the assembler is unusable afterwards.
  absl::Status AddChunk(absl::string_view chunk);

  // At the end of the stream: INVALID_ARGUMENT naming received vs declared bytes when the
  // payload is short, DATA_LOSS when the digest does not match; the payload otherwise.
  // Call once.
  absl::StatusOr<std::vector<uint8_t>> Finish();

  int64_t received_bytes() const { return static_cast<int64_t>(payload_.size()); }

 private:
  const int64_t total_bytes_;
  const Sha256::Digest expected_;
  Sha256 sha256_;
  std::vector<uint8_t> payload_;
};

}  // namespace qmm

#endif  // QMM_SERVER_UPLOAD_ASSEMBLER_H_
