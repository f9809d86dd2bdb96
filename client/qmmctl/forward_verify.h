// `qmmctl forward --verify_seeds`: the server's Forward result against a float64 reference
// of the whole model computed here, from weights that were uploaded with
// `qmmctl upload --random --seed` (regenerated and quantized here with the server's rules)
// and the model's layers as GetModel returns them.
#ifndef QMM_CLIENT_QMMCTL_FORWARD_VERIFY_H_
#define QMM_CLIENT_QMMCTL_FORWARD_VERIFY_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm::ctl {

// A weight as uploaded by `qmmctl upload --random`.
struct RandomWeight {
  Scheme scheme = Scheme::kFp16;
  WeightShape shape;
  uint64_t seed = 0;
};

// Each weight of `model` as its seed in `seeds` (`upload --random --seed`) regenerates it,
// with the shape the server reports (GetWeight). INVALID_ARGUMENT naming a weight without
// a seed.
absl::StatusOr<std::map<std::string, RandomWeight, std::less<>>> RandomWeightsOf(
    Client& client, const v1::ModelInfo& model, const std::map<std::string, uint64_t>& seeds);

// The float64 reference of `model` (with its parameters, as GetModel returns it) on token
// ids (a model that starts with an embedding) or on x [m, in_features] exactly as the
// server received it. Every weight the model uses must be in `weights`
// (INVALID_ARGUMENT naming the one missing).
absl::StatusOr<std::vector<double>> ReferenceForRandomModel(
    const v1::ModelInfo& model, const std::map<std::string, RandomWeight, std::less<>>& weights,
    std::span<const int32_t> ids, std::span<const float> x, int64_t m);

// The largest accepted relative error, max|y - ref| / max|ref|, of a Forward result:
//   1e-4                 fp32 math through the chain ("cpu")
//   1e-2 / 4e-2          "cuda": intermediates in fp16 / bf16, each matmul input rounded
//   + 5e-3               a W2A8 layer: int8 activation rounding at a .5 boundary may flip
//   + 2^-10 / 2^-7       rounding the result to fp16 / bf16
// `bf16_activations`: the request was bf16 or the model's embedding table is BF16.
double ForwardTolerance(bool has_w2a8, bool bf16_activations, DType output_dtype,
                        std::string_view backend);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_FORWARD_VERIFY_H_
