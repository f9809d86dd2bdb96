// The element-wise activations a model's layers apply. Shared by the CPU kernels, the
// CUDA kernels and the float64 reference so that all three name the same functions.
#ifndef QMM_KERNELS_ACTIVATION_H_
#define QMM_KERNELS_ACTIVATION_H_

#include <cstdint>
#include <string_view>

namespace qmm {

enum class Activation : uint8_t {
  kIdentity,     // y = x (a bias add alone)
  kSilu,         // x * sigmoid(x)
  kGeluTanh,     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kRelu,         // max(x, 0)
  kReluSquared,  // max(x, 0)^2 (BitNet b1.58 2B4T's "relu2")
};

constexpr std::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kIdentity:
      return "identity";
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kReluSquared:
      return "relu2";
  }
  return "unknown";
}

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of GELU.
inline constexpr double kGeluTanhScale = 0.7978845608028654;
inline constexpr double kGeluTanhCubic = 0.044715;

}  // namespace qmm

#endif  // QMM_KERNELS_ACTIVATION_H_
