// Tensor maps (TMA descriptors) over the weight layouts and the activations, for the wgmma
// GEMM's loads: one cp.async.bulk.tensor copy fetches a stage's weights of several row
// tiles (each a contiguous run of bytes, the tiles a fixed stride apart), or a token
// tile's rows of activations, where bulk copies need one instruction per tile or row. On the H200
// one copy a stage instead of eight (W8A16) or four (W2A8) took the GEMM up to 26% faster at 32-64
// tokens and 3-12% at 256 (docs/performance-log.md, session 37).
#ifndef QMM_KERNELS_CUDA_TENSOR_MAP_H_
#define QMM_KERNELS_CUDA_TENSOR_MAP_H_

#include <cuda.h>  // CUtensorMap only: the encoder comes through the runtime (no -lcuda)
#include <cuda_runtime.h>

#include <cstdint>

namespace qmm::cuda {

// *map <- a map of `rows` rows of row_bytes bytes, stride_bytes apart from base, whose box
// (one copy) is box_rows rows of box_bytes bytes; coordinates count 8-byte words along a
// row and rows. Rows past the last read as zeros (and still count in the copy's bytes).
// Needs base 16-byte aligned, row_bytes and box_bytes multiples of 8 (box_bytes at most
// 2048), stride_bytes of 16, box_rows at most 256. cudaErrorInvalidValue where the
// driver refuses the map, cudaErrorNotSupported where it has no encoder.
// `swizzle`: how the box lands in shared memory (CU_TENSOR_MAP_SWIZZLE_128B: box_bytes 128,
// the 16-byte chunks of row r at chunk ^ (r % 8), as wgmma reads a 128-byte-swizzled
// operand; the destination 1024-byte aligned).
cudaError_t EncodeRowsMap(CUtensorMap* map, const void* base, int64_t rows, int64_t row_bytes,
                          int64_t stride_bytes, int box_bytes, int box_rows,
                          CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_TENSOR_MAP_H_
