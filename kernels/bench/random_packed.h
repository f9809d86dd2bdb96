// Random weights straight in a scheme's canonical packed form (every byte pattern the
// proto allows, never zeros), so that the benchmark skips the float -> quantize path on
// multi-hundred-megabyte layers.
#ifndef QMM_KERNELS_BENCH_RANDOM_PACKED_H_
#define QMM_KERNELS_BENCH_RANDOM_PACKED_H_

#include <cstdint>
#include <vector>

#include "kernels/format.h"

namespace qmm::bench {

// PackedBytes(scheme, shape) bytes: values uniformly random over the scheme's valid codes
// (dense: magnitudes in [2^-6, 1)), scales random in [0.5, 1) / 128.
std::vector<uint8_t> RandomPacked(Scheme scheme, const WeightShape& shape, uint64_t seed);

// n 16-bit values of `dtype` (kF16 or kBF16), magnitudes in [2^-6, 1), random signs.
std::vector<uint16_t> RandomHalves(bool bf16, int64_t n, uint64_t seed);

}  // namespace qmm::bench

#endif  // QMM_KERNELS_BENCH_RANDOM_PACKED_H_
