// The wgmma GEMM's CTA fits on the H200, as its plan sees them (cudaOccupancyMaxActive*,
// printed on the device in sessions 22 and 53): 132 SMs; tiles of one CTA an SM fit
// clusters of 2, 4 and 8 CTAs 66, 30 and 15 at once, one-group tiles of two CTAs an SM
// (W2A8's up to 64 tokens, the others' of 32) 132, 62 and 30. Clusters of 3, 5, 6 and 7
// (39, 22, 17, 15 and 79, 47, 39, 32) were printed on an H100 of 132 SMs in session 74,
// whose counts for 2, 4 and 8 are these. For the CPU tests of the plan (cluster_fit_test,
// gemm_groups_test).
#ifndef QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_
#define QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_

#include "kernels/cuda/cluster_fit.h"

namespace qmm::cuda {

inline constexpr int kH200Sms = 132;
inline const KernelFit kOneCtaAnSm = {1, {0, 0, 66, 39, 30, 22, 17, 15, 15}};
inline const KernelFit kTwoCtasAnSm = {2, {0, 0, 132, 79, 62, 47, 39, 32, 30}};

}  // namespace qmm::cuda

#endif  // QMM_TESTS_KERNELS_CUDA_H200_GEMM_FITS_H_
