// The progress line qmmctl draws on stderr during large uploads.
#ifndef QMM_CLIENT_QMMCTL_PROGRESS_H_
#define QMM_CLIENT_QMMCTL_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "client/client.h"

namespace qmm::ctl {

// Uploads above this size show progress.
inline constexpr int64_t kProgressThresholdBytes = int64_t{8} << 20;

// A callback that redraws "\rupload NAME: 12.0/64.0 MiB (18%) 310 MiB/s" on `out` at most
// ten times a second, and ends the line once everything was sent. When `out` is not a
// terminal (a log file), only that last line is written.
UploadProgress MakeProgressPrinter(std::string name, std::FILE* out);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_PROGRESS_H_
