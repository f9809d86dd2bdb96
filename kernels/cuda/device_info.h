// Properties of the calling thread's current CUDA device that launchers need on every
// call (SM count, compute capability), read once per device and cached.
#ifndef QMM_KERNELS_CUDA_DEVICE_INFO_H_
#define QMM_KERNELS_CUDA_DEVICE_INFO_H_

#include <cuda_runtime.h>

namespace qmm::cuda {

struct DeviceInfo {
  int ordinal = 0;
  int sms = 0;
  int cc_major = 0;
  int cc_minor = 0;
  // Thread-block clusters (and so split-K through distributed shared memory): sm_90+.
  bool clusters() const { return cc_major >= 9; }
};

// Fills `info` for the current device. Thread-safe; the first call per device queries
// the driver, later calls read the cache.
cudaError_t CurrentDeviceInfo(DeviceInfo* info);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DEVICE_INFO_H_
