// The kinds of layer a model chains (proto/qmm/v1/qmm.proto, "Models"), shared by the
// server's model description and the kernels' chain runners.
#ifndef QMM_KERNELS_LAYER_KIND_H_
#define QMM_KERNELS_LAYER_KIND_H_

#include <cstdint>

namespace qmm {

enum class LayerKind : uint8_t {
  kEmbedding,
  kLinear,
  kDyT,
  kActivation,
  kGatedMlp,
  kResidual,
  kRmsNorm
};

}  // namespace qmm

#endif  // QMM_KERNELS_LAYER_KIND_H_
