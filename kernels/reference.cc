#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dtype.h"

namespace qmm {
namespace {

// Straight from the proto's byte layouts, element by element, in double.
double WeightAt(const PackedWeight& w, int64_t n, int64_t k) {
  const int64_t row_len = w.shape.k;
  const int64_t index = n * row_len + k;
  const uint8_t* v = w.values();
  switch (w.scheme) {
    case Scheme::kFp16:
    case Scheme::kBf16: {
      const uint16_t bits = static_cast<uint16_t>(v[2 * index] | (v[2 * index + 1] << 8));
      return w.scheme == Scheme::kFp16 ? HalfToFloat(bits) : Bf16ToFloat(bits);
    }
    case Scheme::kW8A16: {
      float s;
      std::memcpy(&s, w.scales() + 4 * n, 4);
      const int q = v[index] < 128 ? v[index] : v[index] - 256;
      return q * static_cast<double>(s);
    }
    case Scheme::kW4A16: {
      const int64_t g = w.shape.group_size == 0 ? row_len : w.shape.group_size;
      const int64_t scale_index = n * (row_len / g) + k / g;
      const uint8_t* sp = w.scales() + 2 * scale_index;
      const double s = HalfToFloat(static_cast<uint16_t>(sp[0] | (sp[1] << 8)));
      const int nibble = (v[index / 2] >> (index % 2 == 0 ? 0 : 4)) & 0xf;
      const int q = nibble < 8 ? nibble : nibble - 16;
      const int z = w.zero_points() == nullptr ? 0 : w.zero_points()[scale_index];
      return (q - z) * s;
    }
    case Scheme::kW2A8: {
      float s;
      std::memcpy(&s, w.scales() + 4 * n, 4);
      const int code = (v[index / 4] >> (2 * (index % 4))) & 3;
      return (code - 1) * static_cast<double>(s);
    }
  }
  return 0.0;
}

std::vector<double> DenseProduct(const PackedWeight& w, const float* x, int64_t m) {
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  std::vector<double> y(m * n_rows, 0.0);
  std::vector<double> row(k);
  for (int64_t n = 0; n < n_rows; ++n) {
    // An act_order weight's stored column j multiplies input feature perm[j].
    for (int64_t c = 0; c < k; ++c) {
      row[w.permutation() == nullptr ? c : w.Input(c)] = WeightAt(w, n, c);
    }
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) sum += static_cast<double>(x[i * k + c]) * row[c];
      y[i * n_rows + n] = sum;
    }
  }
  return y;
}

// y = a * s * sum(xq * t), with a and xq computed in double by the proto's rule.
std::vector<double> TernaryProduct(const PackedWeight& w, const float* x, int64_t m) {
  const int64_t n_rows = w.shape.n;
  const int64_t k = w.shape.k;
  std::vector<double> a(m);
  std::vector<double> xq(m * k);
  for (int64_t i = 0; i < m; ++i) {
    double max_abs = 0.0;
    for (int64_t c = 0; c < k; ++c) max_abs = std::max(max_abs, std::abs(double{x[i * k + c]}));
    a[i] = max_abs / 127.0;
    for (int64_t c = 0; c < k; ++c) {
      xq[i * k + c] = a[i] == 0.0 ? 0.0 : std::round(x[i * k + c] / a[i]);
    }
  }
  std::vector<double> y(m * n_rows, 0.0);
  std::vector<double> t(k);
  for (int64_t n = 0; n < n_rows; ++n) {
    float s;
    std::memcpy(&s, w.scales() + 4 * n, 4);
    for (int64_t c = 0; c < k; ++c) {
      const int64_t index = n * k + c;
      t[c] = ((w.values()[index / 4] >> (2 * (index % 4))) & 3) - 1;
    }
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) sum += xq[i * k + c] * t[c];
      y[i * n_rows + n] = a[i] * s * sum;
    }
  }
  return y;
}

}  // namespace

std::vector<double> ReferenceMatMul(const PackedWeight& w, const float* x, int64_t m) {
  return w.scheme == Scheme::kW2A8 ? TernaryProduct(w, x, m) : DenseProduct(w, x, m);
}

}  // namespace qmm
