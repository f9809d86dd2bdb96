// qmmctl bench's requests, drawn before the run (bench.h): `inputs` random sets for one
// weight (MatMul) or one model (Forward), in the messages of the protocol that carries
// them, and, when verifying, each set's float64 reference. Set i's activations come from
// seed + i (RandomActivationValues), a token model's ids likewise (RandomTokenIds).
#ifndef QMM_CLIENT_QMMCTL_BENCH_INPUTS_H_
#define QMM_CLIENT_QMMCTL_BENCH_INPUTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/qmmctl/bench.h"
#include "client/qmmctl/forward_verify.h"
#include "inference/open_inference.pb.h"
#include "kernels/format.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm::ctl {

struct BenchInputs {
  std::vector<v1::MatMulRequest> matmul;            // a weight through qmm.v1
  std::vector<v1::ForwardRequest> forward;          // a model through qmm.v1
  std::vector<inference::ModelInferRequest> infer;  // either, open_inference
  std::vector<std::vector<double>> references;      // empty unless verifying
};

// For options.weight, of `scheme`; references when options.verify_seed is set.
absl::StatusOr<BenchInputs> WeightInputs(const BenchOptions& options, const v1::WeightInfo& weight,
                                         Scheme scheme);

// For options.model; `vocab`: its embedding table's rows (token-input models); references
// from `weights` (RandomWeightsOf) when options.verify_seeds is set.
absl::StatusOr<BenchInputs> ModelInputs(
    const BenchOptions& options, const v1::ModelInfo& model, int64_t vocab,
    const std::map<std::string, RandomWeight, std::less<>>& weights);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_BENCH_INPUTS_H_
