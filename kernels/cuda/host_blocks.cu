#include <algorithm>

#include "kernels/cuda/host_blocks.h"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
// Bytes one thread block moves: 4 words a thread, all loads issued before any store, so
// that many PCIe reads are in flight at once (each crosses the bus in about a microsecond).
constexpr int kWordsPerThread = 4;
constexpr int64_t kChunk = int64_t{kThreads} * kWordsPerThread * 16;

// blockIdx.x: a kChunk of a piece; blockIdx.y (strided): the piece.
__global__ void BlockCopyKernel(const HostBlock* __restrict__ blocks, int count, char* device,
                                bool gather) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int b = blockIdx.y; b < count; b += gridDim.y) {
    const HostBlock block = blocks[b];
    if (begin >= block.bytes) continue;
    const int64_t end = min(block.bytes, begin + kChunk);
    char* host = reinterpret_cast<char*>(block.host);
    const char* src = gather ? host : device + block.offset;
    char* dst = gather ? device + block.offset : host;
    const bool words = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                         static_cast<uint64_t>(block.bytes)) &
                        15) == 0;
    if (words) {
      const uint4* s = reinterpret_cast<const uint4*>(src + begin);
      uint4* d = reinterpret_cast<uint4*>(dst + begin);
      const int n = static_cast<int>((end - begin) / 16);
      uint4 v[kWordsPerThread];
#pragma unroll
      for (int i = 0; i < kWordsPerThread; ++i) {
        const int at = threadIdx.x + i * kThreads;
        if (at < n) v[i] = s[at];
      }
#pragma unroll
      for (int i = 0; i < kWordsPerThread; ++i) {
        const int at = threadIdx.x + i * kThreads;
        if (at < n) d[at] = v[i];
      }
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
    }
  }
}

}  // namespace

cudaError_t LaunchBlockCopy(BlockCopy direction, const HostBlock* blocks, int count,
                            int64_t max_bytes, void* device, cudaStream_t stream) {
  if (count < 0 || max_bytes < 0) return cudaErrorInvalidValue;
  if (count == 0 || max_bytes == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((max_bytes + kChunk - 1) / kChunk),
                  static_cast<unsigned>(std::min(count, 65535)));
  BlockCopyKernel<<<grid, kThreads, 0, stream>>>(blocks, count, static_cast<char*>(device),
                                                 direction == BlockCopy::kGather);
  return cudaGetLastError();
}

}  // namespace qmm::cuda
