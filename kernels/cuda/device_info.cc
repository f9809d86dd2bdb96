#include "kernels/cuda/device_info.h"

#include <array>
#include <atomic>

namespace qmm::cuda {
namespace {

constexpr int kMaxCachedDevices = 64;

// Packed (sms << 16 | major << 8 | minor) + 1 per ordinal; 0 means not read yet. Two
// threads racing on the first read both store the same value.
std::array<std::atomic<int>, kMaxCachedDevices> g_cache{};

}  // namespace

cudaError_t CurrentDeviceInfo(DeviceInfo* info) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  info->ordinal = device;
  int packed = device < kMaxCachedDevices ? g_cache[device].load(std::memory_order_relaxed) : 0;
  if (packed == 0) {
    int sms = 0, major = 0, minor = 0;
    if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        err != cudaSuccess) {
      return err;
    }
    if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        err != cudaSuccess) {
      return err;
    }
    if (cudaError_t err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
        err != cudaSuccess) {
      return err;
    }
    packed = ((sms << 16) | (major << 8) | minor) + 1;
    if (device < kMaxCachedDevices) g_cache[device].store(packed, std::memory_order_relaxed);
  }
  packed -= 1;
  info->sms = packed >> 16;
  info->cc_major = (packed >> 8) & 0xff;
  info->cc_minor = packed & 0xff;
  return cudaSuccess;
}

}  // namespace qmm::cuda
