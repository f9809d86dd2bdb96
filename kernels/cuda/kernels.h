// The registry of CUDA matmul kernels, one entry per scheme, so that the backend, the GPU
// tests and qmm-kernel-bench iterate over schemes without naming each kernel.
#ifndef QMM_KERNELS_CUDA_KERNELS_H_
#define QMM_KERNELS_CUDA_KERNELS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cuda/gemm_args.h"
#include "kernels/format.h"

namespace qmm::cuda {

struct KernelOps {
  // Host, once at upload: canonical packed form -> device layout bytes.
  std::vector<uint8_t> (*repack)(const PackedWeight& packed);
  // Device scratch one launch of m rows needs (0 if none).
  size_t (*workspace_bytes)(const WeightShape& shape, int64_t m);
  // Enqueues the product on args.stream; returns the launch error, never synchronizes.
  cudaError_t (*launch)(const GemmArgs& args);
  // Optional (nullptr if the scheme has none): a gated MLP's gate and up projections and
  // act(gate) * up in one launch, args.weight the gate and `up` the up weight of the
  // same shape, for m <= glu_max_m; no residual.
  cudaError_t (*launch_glu)(const GemmArgs& args, const void* up, Activation act);
  int64_t glu_max_m;
  // Whether `launch` adds GemmArgs::residual (a Linear closed by a residual is then one
  // launch).
  bool takes_residual;
  // Whether `launch` applies GemmArgs::dyt to its input, read in any of kF32, kF16 and
  // kBF16 (a DyT before it is then no launch of its own).
  bool takes_dyt;
  // Likewise GemmArgs::rms_norm.
  bool takes_rms_norm;
};

// The kernel for `scheme`, or nullptr when it has none yet.
const KernelOps* FindKernel(Scheme scheme);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_KERNELS_H_
