// A model: a named chain of layers over uploaded weights (proto/qmm/v1/qmm.proto, "Models"),
// checked once at creation so that Forward only checks its input.
//
// CheckModel resolves every weight a layer names through the WeightStore and keeps a
// reference to it, so the layers stay runnable whatever happens to the store; keeping the
// store from deleting those weights is ModelStore's job (server/model_store.h).
#ifndef QMM_SERVER_MODEL_H_
#define QMM_SERVER_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/activation.h"
#include "kernels/dtype.h"
#include "kernels/layer_kind.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/limits.h"
#include "server/weight_store.h"

namespace qmm {

inline constexpr int64_t kMaxModelLayers = 256;
// Intermediate activations live in worker buffers, not in messages; bounding them at a
// few messages' worth keeps a large-M request from claiming unbounded memory while still
// letting an MLP widen its input 3.5x (Llama) in fp32.
inline constexpr int64_t kIntermediateMessageFactor = 4;

// One checked layer.
struct LayerSpec {
  LayerKind kind = LayerKind::kLinear;
  // kEmbedding: {table}; kLinear: {weight}; kGatedMlp: {gate, up, down}; else empty.
  std::vector<std::shared_ptr<const StoredWeight>> weights;
  std::vector<float> bias;  // kLinear: empty or N values
  // kDyT; kRmsNorm's weight is gamma.
  float alpha = 0.0f;
  std::vector<float> gamma;                       // in_features values
  std::vector<float> beta;                        // empty or in_features values
  float epsilon = 0.0f;                           // kRmsNorm
  Activation activation = Activation::kIdentity;  // kActivation
  // kGatedMlp: act in down(act(gate(x)) * up(x)), SiLU for SwiGLU, GELU for GeGLU; its
  // sub-norm, when gamma is set: down(rmsnorm(act(gate(x)) * up(x))), gamma [the gate's N].
  Activation gate_activation = Activation::kSilu;
  int32_t block_start = -1;  // kResidual
  int64_t in_features = 0;   // 0 for an embedding's token input
  int64_t out_features = 0;
};

struct ModelSpec {
  std::string name;
  std::vector<LayerSpec> layers;
  bool token_input = false;  // layer 0 is an embedding
  int64_t in_features = 0;   // 0 for token input
  int64_t out_features = 0;
  int64_t max_features = 0;  // widest activation anywhere in the chain (GatedMLP inside too)
  bool has_w2a8 = false;     // some layer quantizes its activations to int8
  // The layers as the client sent them, for GetModel.
  std::vector<v1::Layer> layer_protos;
  // Names of the weights used, sorted, each once.
  std::vector<std::string> weight_names;
  // Bytes of fp32 parameters held by the model itself (bias, gamma, beta, RMSNorm weight).
  int64_t param_bytes = 0;
};

// Checks the whole chain: the name, 1..kMaxModelLayers layers, one kind set per layer,
// features that line up from each layer to the next (and around each residual block),
// finite parameters of the right lengths, weights that exist (NOT_FOUND naming the
// layer's field) and fit their role (an embedding table must be FP16 or BF16). Every
// other failure is INVALID_ARGUMENT naming the field, e.g. "layers[2].linear.weight".
absl::StatusOr<ModelSpec> CheckModel(const v1::CreateModelRequest& request,
                                     const WeightStore& store);

// The layers as the backend takes them (Backend::LoadModel); they point into `spec`.
std::vector<ModelLayer> BackendLayers(const ModelSpec& spec);

// Fills `info` from `spec`; with_params = false leaves the layers' parameter values
// (bias, gamma, beta) out, as ListModels does.
void FillModelInfo(const ModelSpec& spec, bool with_params, v1::ModelInfo* info);

// A checked Forward input against its model.
struct ForwardSpec {
  int64_t m = 0;
  DType x_dtype = DType::kF32;  // float input; kF32 for token input (unused)
  DType y_dtype = DType::kF32;
  int64_t y_bytes = 0;
};

// Checks the input against the model: token_ids (M of them, each in [0, vocab)) for a
// model that starts with an embedding and no input tensor, otherwise an input tensor
// [M, in_features] of a supported dtype with the exact data size and no token ids; 1 <= M
// <= max_rows; the output fits max_message_bytes and the widest intermediate fits
// kIntermediateMessageFactor messages (RESOURCE_EXHAUSTED naming the rows that fit); and,
// when a layer quantizes activations to int8, a finite input.
absl::StatusOr<ForwardSpec> CheckForwardInput(const v1::ForwardRequest& request,
                                              const ModelSpec& model, const ServiceLimits& limits);

}  // namespace qmm

#endif  // QMM_SERVER_MODEL_H_
