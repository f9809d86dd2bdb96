#include "kernels/cuda/dense.h"

#include <cublas_v2.h>

#include <limits>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublas_api.h"

namespace qmm::cuda {
namespace {

cudaDataType_t CudaType(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

cudaError_t LaunchDense(const GemmArgs& args, DType weight_dtype) {
  const CublasApi* cublas = Cublas();
  if (cublas == nullptr || args.cublas == nullptr || args.x_dtype != weight_dtype || args.m < 1 ||
      args.m > std::numeric_limits<int>::max()) {
    return cudaErrorInvalidValue;
  }
  auto handle = static_cast<cublasHandle_t>(args.cublas);
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const int n = static_cast<int>(args.shape.n);
  const int k = static_cast<int>(args.shape.k);
  const int m = static_cast<int>(args.m);
  const bool direct = args.y_dtype == DType::kF32 || args.y_dtype == weight_dtype;
  if (!direct && args.workspace == nullptr) return cudaErrorInvalidValue;
  void* c = direct ? args.y : args.workspace;
  const DType c_dtype = direct ? args.y_dtype : DType::kF32;
  // Column-major: C (N x M, ldc N) = op(A)(N x K) * B (K x M), with A = W stored K x N.
  const cublasStatus_t status =
      cublas->gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, args.weight,
                      CudaType(weight_dtype), k, args.x, CudaType(args.x_dtype), k, &beta, c,
                      CudaType(c_dtype), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? err : cudaErrorLaunchFailure;
  }
  if (direct) return cudaGetLastError();
  return LaunchConvert(DType::kF32, c, args.y_dtype, args.y, args.m * args.shape.n, 1.0f,
                       args.stream);
}

}  // namespace

std::vector<uint8_t> RepackDense(const PackedWeight& packed) {
  return std::vector<uint8_t>(packed.bytes.begin(), packed.bytes.end());
}

size_t DenseWorkspaceBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>(m) * static_cast<size_t>(shape.n) * sizeof(float);
}

cudaError_t LaunchDenseFp16(const GemmArgs& args) { return LaunchDense(args, DType::kF16); }
cudaError_t LaunchDenseBf16(const GemmArgs& args) { return LaunchDense(args, DType::kBF16); }

}  // namespace qmm::cuda
