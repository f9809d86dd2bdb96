// The activations of kernels/activation.h in device code, fp32: the element-wise epilogue
// (layers.cu) and the gated MLP kernels that apply a gate's activation as they store.
#ifndef QMM_KERNELS_CUDA_ACTIVATION_DEVICE_CUH_
#define QMM_KERNELS_CUDA_ACTIVATION_DEVICE_CUH_

#include "kernels/activation.h"

namespace qmm::cuda {

__device__ __forceinline__ float ApplyActivation(Activation act, float v) {
  switch (act) {
    case Activation::kSilu:
      return v / (1.0f + expf(-v));
    case Activation::kGeluTanh: {
      const float inner =
          static_cast<float>(kGeluTanhScale) * (v + static_cast<float>(kGeluTanhCubic) * v * v * v);
      return 0.5f * v * (1.0f + tanhf(inner));
    }
    case Activation::kRelu:
      return v < 0.0f ? 0.0f : v;  // NaN stays NaN
    case Activation::kReluSquared:
      return v < 0.0f ? 0.0f : v * v;
    default:
      return v;
  }
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_ACTIVATION_DEVICE_CUH_
