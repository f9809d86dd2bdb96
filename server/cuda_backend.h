// The CUDA backend: weights live in device memory in each kernel's own layout (converted
// once at upload through the kernel registry, kernels/cuda/kernels.h), and each worker
// owns a stream, a cuBLAS handle bound to it, pinned staging buffers and device buffers
// that grow on demand. A quantized kernel's result of a few rows goes straight into the
// pinned buffer, with no copy back (cuda_backend.cc, kMaxDirectRows).
//
// Activations: the A16 kernels take fp16 or bf16. fp16 and bf16 inputs go to them as they
// are; fp32 inputs are converted on the device to fp16 (more significand than bf16). If
// max|x| of the call exceeds 65504 (the fp16 limit; checked on the host while x is copied
// into the staging buffer), x is scaled by a power of two 2^-e on conversion and the fp32
// result by 2^e afterwards: exact up to fp16 rounding and underflow of the tiny values.
// Dense schemes convert x to the weight's own dtype (cuBLAS takes no mixed inputs), with
// the same scaling for FP16 weights.
//
// Errors: an allocation failure fails that call or upload alone (RESOURCE_EXHAUSTED);
// any other CUDA or cuBLAS failure is INTERNAL, and a sticky one (illegal address, lost
// context...) also turns healthy() false for good.
#ifndef QMM_SERVER_CUDA_BACKEND_H_
#define QMM_SERVER_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/backend.h"

namespace qmm {

// Opens options.device with options.num_workers workers. FAILED_PRECONDITION when there
// is no CUDA device or the ordinal is out of range, INTERNAL when the device cannot be
// initialized.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options);

}  // namespace qmm

#endif  // QMM_SERVER_CUDA_BACKEND_H_
