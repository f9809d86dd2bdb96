// The request limits the server enforces and reports in ServerInfo.
#ifndef QMM_SERVER_LIMITS_H_
#define QMM_SERVER_LIMITS_H_

#include <cstdint>

namespace qmm {

inline constexpr int64_t kMaxChunkBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxNameLength = 128;
// Room for everything in a MatMulResponse besides the output data.
inline constexpr int64_t kResponseOverheadBytes = 64;

struct ServiceLimits {
  int64_t max_message_bytes = int64_t{64} << 20;
  int64_t max_rows = 65536;
  // Largest upload payload; the server stages it in host memory before converting.
  int64_t max_upload_bytes = int64_t{1} << 40;
};

}  // namespace qmm

#endif  // QMM_SERVER_LIMITS_H_
