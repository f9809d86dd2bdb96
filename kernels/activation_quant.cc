#include "kernels/activation_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qmm {

void QuantizeRowsInt8(const float* x, int64_t m, int64_t k, int8_t* q, float* scale) {
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * k;
    int8_t* q_row = q + r * k;
    float max_abs = 0.0f;
    for (int64_t c = 0; c < k; ++c) max_abs = std::max(max_abs, std::fabs(row[c]));
    const float s = max_abs / 127.0f;
    scale[r] = s;
    // s also underflows to 0 for a row of tiny subnormals; such a row contributes nothing.
    if (s == 0.0f) {
      std::memset(q_row, 0, k);
      continue;
    }
    for (int64_t c = 0; c < k; ++c) {
      // The clamp only matters when rounding of s pushed max|x| / s just past 127.5.
      const float v = std::clamp(std::round(row[c] / s), -127.0f, 127.0f);
      q_row[c] = static_cast<int8_t>(v);
    }
  }
}

}  // namespace qmm
