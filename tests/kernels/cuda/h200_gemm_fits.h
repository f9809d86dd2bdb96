// The wgmma GEMM's CTA fits on the H200, as its plan sees them (cudaOccupancyMaxActive*,
// printed on the device in sessions 22 and 53): 132 SMs; tiles of one CTA an SM fit
// clusters of 2, 4 and 8 CTAs 66, 30 and 15 at once, one-group tiles of two CTAs an SM
// (W2A8's up to 64 tokens, the others' of 32) 132, 62 and 30. For the CPU tests of the
// plan (cluster_fit_test, gemm_groups_test).
#ifndef QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_
#define QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_

#include "kernels/cuda/cluster_fit.h"

namespace qmm::cuda {

inline constexpr int kH200Sms = 132;
inline const KernelFit kOneCtaAnSm = {1, {0, 0, 66, 0, 30, 0, 0, 0, 15}};
inline const KernelFit kTwoCtasAnSm = {2, {0, 0, 132, 0, 62, 0, 0, 0, 30}};

}  // namespace qmm::cuda

#endif  // QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_
