#include "client/qmmctl/verify.h"

#include <algorithm>
#include <cmath>

#include "client/random_data.h"
#include "kernels/quantize.h"
#include "kernels/reference.h"

namespace qmm::ctl {

double DefaultTolerance(Scheme scheme, DType output_dtype, std::string_view backend) {
  double tolerance = 1e-4;
  if (output_dtype == DType::kF16) tolerance += 0x1p-10;
  if (output_dtype == DType::kBF16) tolerance += 0x1p-7;
  if (backend == "cuda" && scheme != Scheme::kW2A8) {
    tolerance += scheme == Scheme::kBf16 ? 1.6e-2 : 2e-3;
  }
  if (scheme == Scheme::kW2A8) tolerance += 5e-3;
  return tolerance;
}

absl::StatusOr<std::vector<uint8_t>> PackRandomWeight(Scheme scheme, const WeightShape& shape,
                                                      uint64_t seed) {
  if (absl::Status status = ValidateShape(scheme, shape); !status.ok()) return status;
  const std::vector<float> w = RandomWeightValues(shape.n, shape.k, seed);
  return QuantizeWeight(
      scheme, shape, DType::kF32,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4));
}

absl::StatusOr<std::vector<double>> ReferenceForRandomWeight(Scheme scheme,
                                                             const WeightShape& shape,
                                                             uint64_t seed,
                                                             std::span<const float> x, int64_t m) {
  if (static_cast<int64_t>(x.size()) != m * shape.k) {
    return absl::InvalidArgumentError("activations do not match [m, k]");
  }
  absl::StatusOr<std::vector<uint8_t>> packed = PackRandomWeight(scheme, shape, seed);
  if (!packed.ok()) return packed.status();
  absl::StatusOr<PackedWeight> view = ViewPacked(scheme, shape, *packed);
  if (!view.ok()) return view.status();
  return ReferenceMatMul(*view, x.data(), m);
}

Comparison CompareWithReference(std::span<const float> y, std::span<const double> reference,
                                double tolerance) {
  Comparison c;
  const size_t count = std::min(y.size(), reference.size());
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(y[i])) {
      ++c.non_finite;
      continue;
    }
    c.max_abs_error = std::max(c.max_abs_error, std::abs(static_cast<double>(y[i]) - reference[i]));
    c.max_abs_reference = std::max(c.max_abs_reference, std::abs(reference[i]));
  }
  // A zero reference admits only an exact zero result.
  c.relative_error = c.max_abs_reference > 0 ? c.max_abs_error / c.max_abs_reference
                     : c.max_abs_error > 0   ? INFINITY
                                             : 0;
  c.passed = c.non_finite == 0 && y.size() == reference.size() && c.relative_error <= tolerance;
  return c;
}

}  // namespace qmm::ctl
