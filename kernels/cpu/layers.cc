#include "kernels/cpu/layers.h"

#include <cmath>

#include "kernels/dtype.h"

namespace qmm {
namespace {

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

float Apply(Activation act, float x) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return Silu(x);
    case Activation::kGeluTanh: {
      const float inner =
          static_cast<float>(kGeluTanhScale) * (x + static_cast<float>(kGeluTanhCubic) * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case Activation::kRelu:
      // NaN stays NaN (max(NaN, 0) would hide it).
      return x < 0.0f ? 0.0f : x;
    case Activation::kReluSquared:
      return x < 0.0f ? 0.0f : x * x;
  }
  return x;
}

}  // namespace

void CpuEmbedding(const PackedWeight& table, const int32_t* ids, int64_t m, float* y) {
  const int64_t dim = table.shape.k;
  const DType dtype = table.scheme == Scheme::kBf16 ? DType::kBF16 : DType::kF16;
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* row = table.values() + ids[i] * dim * 2;
    ToFloat(dtype, row, static_cast<size_t>(dim), y + i * dim);
  }
}

void CpuDyT(const float* x, int64_t m, int64_t f, float alpha, const float* gamma,
            const float* beta, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * f;
    float* yr = y + i * f;
    for (int64_t j = 0; j < f; ++j) {
      const float t = gamma[j] * std::tanh(alpha * xr[j]);
      yr[j] = beta == nullptr ? t : t + beta[j];
    }
  }
}

void CpuRmsNorm(const float* x, int64_t m, int64_t f, const float* weight, float epsilon,
                float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * f;
    float* yr = y + i * f;
    double squares = 0.0;
    for (int64_t j = 0; j < f; ++j) squares += double{xr[j]} * xr[j];
    const float scale = static_cast<float>(1.0 / std::sqrt(squares / f + epsilon));
    for (int64_t j = 0; j < f; ++j) yr[j] = weight[j] * (xr[j] * scale);
  }
}

void CpuBiasActivation(Activation act, const float* x, const float* bias, int64_t m, int64_t n,
                       float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * n;
    float* yr = y + i * n;
    for (int64_t j = 0; j < n; ++j) yr[j] = Apply(act, bias == nullptr ? xr[j] : xr[j] + bias[j]);
  }
}

void CpuGlu(Activation act, const float* gate, const float* up, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = Apply(act, gate[i]) * up[i];
}

void CpuAdd(const float* a, const float* b, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

}  // namespace qmm
