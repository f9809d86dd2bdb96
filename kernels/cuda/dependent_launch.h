// Programmatic dependent launch (sm_90+), the host half (the device half is
// dependent_launch.cuh).
//
// A kernel launched with the attribute may be scheduled while the kernel before it in the
// stream still runs, once every CTA of that kernel has executed
// griddepcontrol.launch_dependents (or exited). Our kernels use that time to load weights,
// which no kernel writes, and call griddepcontrol.wait before they read anything an
// earlier launch may have written and before they write anything: the wait returns once
// the earlier grid has completed and its memory is visible, so the stream's order of
// effects is unchanged. What it saves is the launch gap and the first loads' latency of
// every kernel that follows another, as in a decode loop or a Forward chain.
//
// When to trigger (griddepcontrol.launch_dependents), measured on the H200: a kernel
// never triggers before its own wait has returned, so at most one kernel runs ahead of
// the one computing. Triggering at the very start let a third and fourth kernel pile onto
// half-filled grids (W4A16 14336 x 4096 at M = 1: 19.0 us against 15.5 serialized). The
// streaming kernels trigger once they have issued their last weight loads, so the next
// kernel overlaps their tail; a persistent decode grid that fills the device triggers
// right after its wait instead (the next kernel can then only take the places of exiting
// CTAs; W4A16 8192 x 8192: 12.5 us against 14.0). The layer kernels and the W2A8
// prologue trigger after their wait. Where the attribute measured slower it is left off:
// the W4A16 staged kernel (w4a16.cu) and the W2A8 prologue beyond 16 rows (w2a8.cu).
//
// Rule: a kernel launched with the attribute must call WaitForPrerequisiteGrid() on every
// thread before any dependent access. After a copy or an event the launch is ordinary.
#ifndef QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_H_
#define QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_info.h"

namespace qmm::cuda {

// Process-wide, on by default; qmm-kernel-bench turns it off to time launches both ways.
void EnableDependentLaunch(bool on);
bool DependentLaunchEnabled();

// Appends the attribute to attrs[count] when it is enabled and the device (compute
// capability major `cc_major`) has it; returns the new count.
int AppendDependentLaunch(int cc_major, cudaLaunchAttribute* attrs, int count);

// Launches `kernel` on `grid` blocks of `block` threads on `stream`, with the attribute
// where it is enabled and the current device has it (a kernel that simply waits, then
// triggers: the small kernels around the matmuls).
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                            Args... args) {
  DeviceInfo device;
  if (cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute pdl[1];
  config.attrs = pdl;
  config.numAttrs = AppendDependentLaunch(device.cc_major, pdl, 0);
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// For a persistent decode grid of `ctas` out of the `slots` CTAs that fit at once: whether
// to trigger right after the wait (the grid fills the device, so the next kernel can only
// take the places of exiting CTAs) rather than once the last loads are issued.
inline bool EarlyTrigger(int64_t ctas, int64_t slots) { return ctas * 10 >= slots * 9; }

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DEPENDENT_LAUNCH_H_
