// Deterministic pseudo-random weights and activations.
//
// `qmmctl upload --random --seed S` sends RandomWeightValues(n, k, S), and `qmmctl matmul
// --verify_seed S` regenerates the very same values to compute the reference, so the two
// must never diverge: both call these functions. The values come from integer hashing and
// correctly rounded IEEE arithmetic only (+ - * / and sqrt, no transcendental functions),
// so a seed gives the same bits on every machine.
#ifndef QMM_CLIENT_RANDOM_DATA_H_
#define QMM_CLIENT_RANDOM_DATA_H_

#include <cstdint>
#include <vector>

namespace qmm {

// [n, k] row-major: each row is bell-shaped noise (mean 0) scaled by a per-row factor in
// [0.5, 1.5) divided by sqrt(k), so every row gets a different quantization scale and
// y = x * W^T stays O(1) for unit activations. Never all zeros.
std::vector<float> RandomWeightValues(int64_t n, int64_t k, uint64_t seed);

// [m, k] row-major bell-shaped noise with mean 0 and standard deviation 1 (|x| < 3.5).
std::vector<float> RandomActivationValues(int64_t m, int64_t k, uint64_t seed);

// m token ids uniform in [0, vocab) (vocab >= 1), by integer hashing (splitmix64).
std::vector<int32_t> RandomTokenIds(int64_t m, int64_t vocab, uint64_t seed);

}  // namespace qmm

#endif  // QMM_CLIENT_RANDOM_DATA_H_
