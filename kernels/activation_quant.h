// Per-row int8 quantization of activations, the W2A8 rule in proto/qmm/v1/qmm.proto.
// Every backend uses this exact rule so that results agree across backends.
#ifndef QMM_KERNELS_ACTIVATION_QUANT_H_
#define QMM_KERNELS_ACTIVATION_QUANT_H_

#include <cstdint>

namespace qmm {

// For each of the `m` rows of `x` ([m, k] row-major): scale[r] = max|x[r][:]| / 127 and
// q[r][c] = round(x[r][c] / scale[r]) (half away from zero), in [-127, 127]. A zero row
// gets scale 0 and q 0. `q` is [m, k], `scale` is [m]. x must be finite.
void QuantizeRowsInt8(const float* x, int64_t m, int64_t k, int8_t* q, float* scale);

}  // namespace qmm

#endif  // QMM_KERNELS_ACTIVATION_QUANT_H_
