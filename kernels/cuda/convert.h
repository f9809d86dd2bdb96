// Element-wise dtype conversion on the device: activations before the A16 kernels and
// results after them.
#ifndef QMM_KERNELS_CUDA_CONVERT_H_
#define QMM_KERNELS_CUDA_CONVERT_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace qmm::cuda {

// dst[i] = to(from(src[i]) * scale) for i < count, in fp32 and rounded to nearest even
// (the rounding of FromFloat in kernels/dtype.h; NaN and Inf preserved). `scale` is meant
// to be a power of two, which keeps the product exact: the backend uses it to bring fp32
// activations into fp16 range and to undo that on the result. src and dst must not
// overlap unless they are the same buffer with DTypeSize(from) == DTypeSize(to). Enqueues
// on `stream`; returns the launch error; count == 0 enqueues nothing.
cudaError_t LaunchConvert(DType from, const void* src, DType to, void* dst, int64_t count,
                          float scale, cudaStream_t stream);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_CONVERT_H_
