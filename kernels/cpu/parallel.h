// A small parallel-for used by the CPU kernels.
#ifndef QMM_KERNELS_CPU_PARALLEL_H_
#define QMM_KERNELS_CPU_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace qmm {

// Splits [0, n) into contiguous chunks of at least `min_chunk` items and calls
// fn(begin, end) on each, using the calling thread plus up to num_threads - 1 threads of
// a process-wide pool (num_threads <= 0 means hardware concurrency). Returns when every
// chunk is done. Safe to call concurrently from several threads; fn must not throw.
void ParallelFor(int64_t n, int64_t min_chunk, int num_threads,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace qmm

#endif  // QMM_KERNELS_CPU_PARALLEL_H_
