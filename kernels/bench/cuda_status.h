// Error plumbing shared by the benchmarks: a CUDA error as an absl::Status naming the
// step, and early return on failure.
#ifndef QMM_KERNELS_BENCH_CUDA_STATUS_H_
#define QMM_KERNELS_BENCH_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace qmm::bench {

inline absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace qmm::bench

#define QMM_RETURN_IF_ERROR(expr)             \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return _s;                              \
    }                                         \
  } while (0)

#endif  // QMM_KERNELS_BENCH_CUDA_STATUS_H_
