// The benchmarks' launch-gap-free timing: launches captured once in a CUDA graph and the
// graph replayed, so that no host submission gap sits between them.
#ifndef QMM_KERNELS_BENCH_GRAPH_TIMING_H_
#define QMM_KERNELS_BENCH_GRAPH_TIMING_H_

#include <cuda_runtime.h>

#include <functional>

#include "absl/status/statusor.h"

namespace qmm::bench {

// `batch` launches of `launch(i)` (rotating weight copies, as in a decode loop over
// layers) captured once, the graph replayed once to warm up and then `replays` times with
// an event pair around each replay: the median replay divided by `batch`, in us.
absl::StatusOr<double> TimeGraph(cudaStream_t stream, int batch, int replays,
                                 const std::function<cudaError_t(int)>& launch);

}  // namespace qmm::bench

#endif  // QMM_KERNELS_BENCH_GRAPH_TIMING_H_
