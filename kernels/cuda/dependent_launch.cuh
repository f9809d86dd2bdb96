// Programmatic dependent launch, the device half (dependent_launch.h says how launches use
// it). Both are no-ops before sm_90, where launches never carry the attribute and stream
// order alone serializes kernels.
#ifndef QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_
#define QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_

namespace qmm::cuda {

// Lets the next kernel in the stream be scheduled into SM room this grid leaves.
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Blocks until the previous kernel in the stream has completed and its writes are
// visible. Loads issued before it (asm volatile, so they stay there) overlap that wait.
__device__ __forceinline__ void WaitForPrerequisiteGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_
