// `qmmctl matmul --verify_seed`: the server's result against a float64 reference computed
// here from the same random weight, quantized here with the server's own rules.
#ifndef QMM_CLIENT_QMMCTL_VERIFY_H_
#define QMM_CLIENT_QMMCTL_VERIFY_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::ctl {

// The largest accepted relative error, max|y - ref| / max|ref|, for a result of
// `output_dtype` computed by backend `backend` ("cpu" or "cuda"):
//   1e-4                 fp32 accumulation over K
//   + 2^-10 / 2^-7       rounding the result to fp16 / bf16
//   + 2e-3 / 1.6e-2      "cuda" only: kernels that take their activations in fp16 / bf16
//                        (bf16 for the bf16 scheme, fp16 for the other A16 schemes)
//   + 5e-3               W2A8: the per-row int8 activation rounding may flip a value that
//                        lies within float rounding of a .5 boundary, in float vs double
// Every bug in a layout or a scale gives errors of order 1, far above these.
double DefaultTolerance(Scheme scheme, DType output_dtype, std::string_view backend);

// W = RandomWeightValues(N, K, seed) quantized into `scheme` with QuantizeWeight: the
// canonical packed bytes the server stores for such an upload (view them with ViewPacked).
absl::StatusOr<std::vector<uint8_t>> PackRandomWeight(Scheme scheme, const WeightShape& shape,
                                                      uint64_t seed);

// The float64 reference y = x * W^T, [m, N], for W = RandomWeightValues(N, K, seed)
// quantized into `scheme` with QuantizeWeight (what the server stores for such an upload).
// `x` is [m, K] and must hold the activations exactly as the server received them.
absl::StatusOr<std::vector<double>> ReferenceForRandomWeight(Scheme scheme,
                                                             const WeightShape& shape,
                                                             uint64_t seed,
                                                             std::span<const float> x, int64_t m);

struct Comparison {
  double max_abs_error = 0;
  double max_abs_reference = 0;
  double relative_error = 0;  // max_abs_error / max_abs_reference
  int64_t non_finite = 0;     // NaN or Inf in y: always a failure
  bool passed = false;
};

// y and reference have the same length.
Comparison CompareWithReference(std::span<const float> y, std::span<const double> reference,
                                double tolerance);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_VERIFY_H_
