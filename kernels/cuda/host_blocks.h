// Copies between one contiguous device buffer and many pieces of mapped host memory, done
// by the device itself: how the backend gathers a batch's rows straight from where its
// clients wrote them, and scatters the results back, without host copies or one DMA call
// per request.
#ifndef QMM_KERNELS_CUDA_HOST_BLOCKS_H_
#define QMM_KERNELS_CUDA_HOST_BLOCKS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace qmm::cuda {

// One piece: `bytes` at `host` (mapped host memory the device can address: registered or
// allocated with cudaHostAlloc, on a system where the host pointer serves the device) and
// at `offset` into the device buffer.
struct HostBlock {
  uint64_t host;
  int64_t offset;
  int64_t bytes;
};

enum class BlockCopy { kGather, kScatter };

// kGather: device[offset, offset + bytes) = host piece, for every block; kScatter: the
// other way. `blocks` (`count` of them, in memory the device can read: mapped host memory
// is fine, it is read once per thread block) must stay valid until the copy has run.
// Pieces whose addresses and length are multiples of 16 move in 16-byte words, others
// bytewise. Enqueues on `stream`; returns the launch error.
cudaError_t LaunchBlockCopy(BlockCopy direction, const HostBlock* blocks, int count,
                            int64_t max_bytes, void* device, cudaStream_t stream);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_HOST_BLOCKS_H_
