// cuBLAS, loaded with dlopen on first use instead of linked.
//
// Why: libcublasLt alone carries 94 KB of static thread-local storage, and glibc makes
// every thread's stack hold the whole static TLS block. A process that links cuBLAS can
// therefore not start threads with small fixed stacks: civetweb (under prometheus-cpp's
// exposer, which serves qmm-server's /metrics) asks for 100 KB and its pthread_create
// fails. Loaded with dlopen, cuBLAS's TLS is allocated per thread on demand instead.
#ifndef QMM_KERNELS_CUDA_CUBLAS_API_H_
#define QMM_KERNELS_CUDA_CUBLAS_API_H_

#include <cublas_v2.h>

#include <string>

namespace qmm::cuda {

// The cuBLAS entry points qmm uses.
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  // Spelled out: cublas_api.h overloads cublasGemmEx for C++ callers.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType a_type, int lda,
                            const void* b, cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
};

// Loads libcublas.so.<major> once (by its soname, then beside the CUDA runtime library);
// nullptr when that fails, with the reason in *error if error is not null. Thread-safe.
const CublasApi* Cublas(std::string* error = nullptr);

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_CUBLAS_API_H_
