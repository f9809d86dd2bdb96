#include "kernels/cuda/device_info.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>

namespace qmm::cuda {
namespace {

constexpr int kMaxCachedDevices = 64;

// Packed (sms << 16 | major << 8 | minor) + 1 per ordinal; 0 means not read yet. Two
// threads racing on the first read both store the same value. The bandwidth is stored
// before the packed value is released, so a reader that sees the latter sees it.
std::array<std::atomic<int>, kMaxCachedDevices> g_cache{};
std::array<std::atomic<int>, kMaxCachedDevices> g_dram_gbps{};

}  // namespace

cudaError_t CurrentDeviceInfo(DeviceInfo* info) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  info->ordinal = device;
  const bool cached = device < kMaxCachedDevices;
  int packed = cached ? g_cache[device].load(std::memory_order_acquire) : 0;
  int dram_gbps = cached ? g_dram_gbps[device].load(std::memory_order_relaxed) : 0;
  if (packed == 0) {
    int sms = 0, major = 0, minor = 0, memory_khz = 0, bus_bits = 0;
    for (const auto& [attr, value] : {std::pair{cudaDevAttrMultiProcessorCount, &sms},
                                      std::pair{cudaDevAttrComputeCapabilityMajor, &major},
                                      std::pair{cudaDevAttrComputeCapabilityMinor, &minor},
                                      std::pair{cudaDevAttrMemoryClockRate, &memory_khz},
                                      std::pair{cudaDevAttrGlobalMemoryBusWidth, &bus_bits}}) {
      if (cudaError_t err = cudaDeviceGetAttribute(value, attr, device); err != cudaSuccess) {
        return err;
      }
    }
    packed = ((sms << 16) | (major << 8) | minor) + 1;
    // Double data rate: two transfers a clock, bus_bits / 8 bytes each.
    dram_gbps = static_cast<int>(2 * int64_t{memory_khz} * (bus_bits / 8) / 1000000);
    if (cached) {
      g_dram_gbps[device].store(dram_gbps, std::memory_order_relaxed);
      g_cache[device].store(packed, std::memory_order_release);
    }
  }
  info->peak_dram_gbps = dram_gbps;
  packed -= 1;
  info->sms = packed >> 16;
  info->cc_major = (packed >> 8) & 0xff;
  info->cc_minor = packed & 0xff;
  return cudaSuccess;
}

}  // namespace qmm::cuda
