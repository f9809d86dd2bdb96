// The CPU backend: weights stay in host memory in their canonical packed form and the
// CPU kernels (kernels/cpu/matmul.h) read them directly. Always built; the default where
// no GPU is present.
#ifndef QMM_SERVER_CPU_BACKEND_H_
#define QMM_SERVER_CPU_BACKEND_H_

#include <memory>

#include "server/backend.h"

namespace qmm {

// options.num_workers >= 1; options.cpu_threads is the kernel thread count per call
// (0 = hardware concurrency).
std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options);

}  // namespace qmm

#endif  // QMM_SERVER_CPU_BACKEND_H_
