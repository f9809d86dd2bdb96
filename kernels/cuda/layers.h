// The CUDA kernels of a model's non-matmul layers: embedding gather, DyT (also fused with
// the per-row int8 quantization that a following W2A8 layer needs), RMSNorm, and one
// element-wise epilogue for bias, activation, SwiGLU's gate * up and the residual add.
//
// All math is fp32 whatever the storage dtype (kF32, kF16 or kBF16, chosen per pointer at
// run time: these kernels are memory-bound and tiny at decode sizes, so a uniform branch
// per element costs nothing next to the launch; RMSNorm alone takes its input's type as a
// template, so that a thread's loads of its row issue together). Rounding to a 16-bit
// dtype is to nearest even, once, at the store. Every function enqueues on `stream`, never
// synchronizes, and returns the launch error (cudaErrorInvalidValue for a bad argument);
// zero rows or elements enqueue nothing. Device pointers throughout.
#ifndef QMM_KERNELS_CUDA_LAYERS_H_
#define QMM_KERNELS_CUDA_LAYERS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/activation.h"
#include "kernels/dtype.h"

namespace qmm::cuda {

// y[i][:] = table[ids[i]][:] for i < m; table is [vocab, dim] of table_dtype (kF16 or
// kBF16: the device layout of an FP16/BF16 weight is its packed form). An id outside
// [0, vocab) reads nothing and yields a row of NaN (the server checks ids first; this only
// keeps a bad id from reading out of bounds). y is [m, dim] of y_dtype.
cudaError_t LaunchEmbedding(DType table_dtype, const void* table, int64_t vocab, int64_t dim,
                            const int32_t* ids, int64_t m, DType y_dtype, void* y,
                            cudaStream_t stream);

// y[i][j] = gamma[j] * tanh(alpha * x[i][j]) + beta[j] over [m, f], with gamma and beta
// fp32 [f] (beta may be nullptr: zero). y may alias x when both have one dtype size.
cudaError_t LaunchDyT(DType x_dtype, const void* x, int64_t m, int64_t f, float alpha,
                      const float* gamma, const float* beta, DType y_dtype, void* y,
                      cudaStream_t stream);

// y[i][j] = weight[j] * x[i][j] / sqrt(mean_j x[i][j]^2 + epsilon) over [m, f], with
// weight fp32 [f] and epsilon > 0; one CTA a row, its squares summed in fp32 in a fixed
// order. y may alias x when both have one dtype size.
cudaError_t LaunchRmsNorm(DType x_dtype, const void* x, int64_t m, int64_t f, const float* weight,
                          float epsilon, DType y_dtype, void* y, cudaStream_t stream);

// The element-wise tail of a layer, over [m, n]:
//   v = x[i][j] (+ bias[j]);  v = act(v);  v *= up[i][j];  v += skip[i][j];  y[i][j] = v.
// Every part but x is optional (nullptr: skipped). That covers a Linear's bias and
// activation, SwiGLU's silu(gate) * up (x = gate, act = kSilu, up = up), a standalone
// activation, and a residual add (act = kIdentity, skip = the block's input), each fused
// with what comes next to it in the chain. y may alias x, up or skip when the dtype sizes
// match.
struct EpilogueArgs {
  DType x_dtype = DType::kF32;
  const void* x = nullptr;
  int64_t m = 0;
  int64_t n = 0;
  const float* bias = nullptr;  // fp32 [n]
  Activation act = Activation::kIdentity;
  DType up_dtype = DType::kF32;
  const void* up = nullptr;  // [m, n]
  DType skip_dtype = DType::kF32;
  const void* skip = nullptr;  // [m, n]
  DType y_dtype = DType::kF32;
  void* y = nullptr;  // [m, n]
};
cudaError_t LaunchEpilogue(const EpilogueArgs& args, cudaStream_t stream);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_LAYERS_H_
