// Dense FP16 / BF16 weights through cuBLAS (cublasGemmEx, fp32 accumulation).
//
// The device layout is the canonical packed form itself ([N, K] row-major), which cuBLAS
// reads as a column-major K x N matrix; y^T = W * x^T in column-major terms is then one
// GEMM with op(A) = T. Activations must already be in the weight's dtype (fp16 x for FP16
// weights, bf16 x for BF16): cuBLAS takes no mixed 16-bit inputs, so the backend converts.
#ifndef QMM_KERNELS_CUDA_DENSE_H_
#define QMM_KERNELS_CUDA_DENSE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm_args.h"
#include "kernels/format.h"

namespace qmm::cuda {

// Copies the packed values (kFp16 or kBf16).
std::vector<uint8_t> RepackDense(const PackedWeight& packed);

// m * N fp32: cuBLAS writes only fp32 or the inputs' dtype, so a result in the other
// 16-bit dtype (bf16 y from FP16 weights, fp16 y from BF16) goes through fp32 here and is
// converted once. cuBLAS's own scratch is the workspace attached to its handle.
size_t DenseWorkspaceBytes(const WeightShape& shape, int64_t m);

// Enqueue y = x * W^T on args.stream through the cublasHandle_t in args.cublas (which
// must be bound to that stream). x_dtype must be kF16 (LaunchDenseFp16) or kBF16
// (LaunchDenseBf16), else cudaErrorInvalidValue; y_dtype kF32, kF16 or kBF16. A cuBLAS
// failure is returned as cudaErrorLaunchFailure after the CUDA error, if any, is read.
cudaError_t LaunchDenseFp16(const GemmArgs& args);
cudaError_t LaunchDenseBf16(const GemmArgs& args);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DENSE_H_
