// The launch of a persistent decode grid (decode_plan.h), shared by the decode launchers
// of w4a16.cu, w8a16.cu and w2a8.cu: grid.ctas CTAs of `threads` threads, in clusters of
// grid.cluster CTAs where that is more than one, as a dependent launch where the device
// has it (dependent_launch.h).
#ifndef QMM_KERNELS_CUDA_DECODE_LAUNCH_H_
#define QMM_KERNELS_CUDA_DECODE_LAUNCH_H_

#include <cuda_runtime.h>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/dependent_launch.h"

namespace qmm::cuda {

class DecodeLaunch {
 public:
  DecodeLaunch(const DecodeGrid& grid, int threads, cudaStream_t stream, int cc_major) {
    config_.gridDim = dim3(static_cast<unsigned>(grid.ctas));
    config_.blockDim = dim3(static_cast<unsigned>(threads));
    config_.stream = stream;
    config_.attrs = attrs_;
    config_.numAttrs =
        AppendDependentLaunch(cc_major, attrs_, AppendClusterDim(attrs_, 0, grid.cluster));
  }
  // The configuration points into this object.
  DecodeLaunch(const DecodeLaunch&) = delete;
  DecodeLaunch& operator=(const DecodeLaunch&) = delete;

  // Enqueues kernel<<<...>>>(p) with this configuration.
  template <typename Params>
  cudaError_t operator()(void (*kernel)(Params), const Params& p) const {
    return cudaLaunchKernelEx(&config_, kernel, p);
  }

 private:
  cudaLaunchAttribute attrs_[2] = {};
  cudaLaunchConfig_t config_ = {};
};

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_LAUNCH_H_
