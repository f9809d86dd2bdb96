// The common contract of every CUDA matmul kernel in qmm (one header per scheme beside
// this one declares its Repack/Launch pair):
//
//   // Host, once at upload: canonical packed form -> the kernel's device layout bytes.
//   std::vector<uint8_t> Repack<Scheme>(const PackedWeight& packed);
//   // Device scratch a launch needs for m rows (0 if none).
//   size_t <Scheme>WorkspaceBytes(const WeightShape& shape, int64_t m);
//   // Enqueues y = x * W^T on args.stream; returns the launch's error, never syncs.
//   cudaError_t Launch<Scheme>(const GemmArgs& args);
//
// Kernels accept any M >= 1 and any shape that ValidateShape() accepts (K is a multiple
// of KAlignment(scheme); N is arbitrary), so the server never sees a kernel-specific
// constraint.
#ifndef QMM_KERNELS_CUDA_GEMM_ARGS_H_
#define QMM_KERNELS_CUDA_GEMM_ARGS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::cuda {

// DyT applied to a matmul's input on the way in: x[k] -> gamma[k] * tanh(alpha * x[k]) +
// beta[k] in fp32 (gamma and beta device fp32 [K]; beta may be nullptr: zero). Off while
// gamma is nullptr.
struct InputDyT {
  float alpha = 0.0f;
  const float* gamma = nullptr;
  const float* beta = nullptr;
};

// RMSNorm applied to a matmul's input on the way in: x[k] -> weight[k] * x[k] /
// sqrt(mean(x^2) + epsilon) over each row's K values (weight device fp32 [K], 16-byte
// aligned; epsilon > 0). Off while weight is nullptr.
struct InputRmsNorm {
  const float* weight = nullptr;
  float epsilon = 0.0f;
};

// Bytes of GemmArgs::sync.
inline constexpr int64_t kSyncBytes = int64_t{2} << 20;

struct GemmArgs {
  const void* weight = nullptr;  // device layout from Repack<Scheme>()
  WeightShape shape;
  DType x_dtype = DType::kF16;  // kF16 or kBF16; W2A8 also takes kF32 (it quantizes x itself)
  const void* x = nullptr;      // device, [m, k] row-major
  int64_t m = 0;
  DType y_dtype = DType::kF16;  // kF32, kF16 or kBF16
  void* y = nullptr;            // device, [m, n] row-major
  void* workspace = nullptr;    // device, <Scheme>WorkspaceBytes(shape, m) bytes
  // Optional, device, kSyncBytes bytes, all zero, 8-byte aligned: where the CTAs of one
  // grid hand each other data, which a kernel leaves zero again when it completes, so
  // that one zeroed allocation serves every launch on a stream (a launch never overlaps
  // the previous one's use of it). Without it the kernels that would use it (the W4A16
  // and W2A8 decode kernels' stream-K grids) take another grid.
  void* sync = nullptr;
  // Optional, device [m, n] in residual_dtype: y = x * W^T + residual, added in fp32
  // before y is rounded. Only for kernels whose registry entry says they take one
  // (KernelOps::takes_residual); nullptr otherwise.
  const void* residual = nullptr;
  DType residual_dtype = DType::kF32;
  // Optional: the product is DyT(x) * W^T, for kernels whose registry entry says they
  // take it (KernelOps::takes_dyt); off otherwise.
  InputDyT dyt;
  // Optional: the product is RMSNorm(x) * W^T, for kernels whose registry entry says they
  // take it (KernelOps::takes_rms_norm); off otherwise. Not with dyt.
  InputRmsNorm rms_norm;
  cudaStream_t stream = nullptr;
  void* cublas = nullptr;  // cublasHandle_t bound to `stream` (dense schemes only)
};

// The checks every gated launch (a registry entry's launch_glu) makes beyond its scheme's
// own: at most max_m rows, no residual, and the up weight present and 16-byte aligned.
inline bool GluArgsOk(const GemmArgs& args, const void* up, int64_t max_m) {
  return args.m <= max_m && args.residual == nullptr && up != nullptr &&
         reinterpret_cast<uintptr_t>(up) % 16 == 0;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_GEMM_ARGS_H_
