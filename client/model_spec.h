// A model description file for `qmmctl create-model`: JSON in, a CreateModelRequest out.
//
//   {
//     "name": "llama-block",
//     "layers": [
//       {"embedding": "tok_embeddings"},
//       {"dyt": {"alpha": 0.5, "gamma": 1.0, "beta": [0.1, ...], "features": 4096}},
//       {"rms_norm": {"weight": [1.02, ...], "epsilon": 1e-5}},
//       {"rms_norm": {"weight": {"safetensors": "model.safetensors",
//                                "tensor": "model.layers.0.post_attention_layernorm.weight"},
//                     "epsilon": 1e-5}},
//       {"gated_mlp": {"gate": "w1", "up": "w3", "down": "w2"}},
//       {"gated_mlp": {"gate": "g", "up": "u", "down": "d", "activation": "gelu_tanh"}},
//       {"gated_mlp": {"gate": "g", "up": "u", "down": "d", "activation": "relu2",
//                      "sub_norm": {"weight": [1.0, ...], "epsilon": 1e-5}}},
//       {"residual": 1},
//       {"activation": "gelu_tanh"},
//       {"linear": {"weight": "head", "bias": [0.5, ...]}}
//     ]
//   }
//
// Each layer is an object with exactly one key, the layer kind (names as in the proto).
// "embedding" and "linear" take a weight name or an object; "residual" takes block_start
// or {"block_start": i}; "activation" takes "silu", "gelu_tanh" (or "gelu"), "relu" or
// "relu2" (or "relu_squared"), and so does "gated_mlp"'s optional "activation" (silu when
// absent: SwiGLU); "gated_mlp"'s optional "sub_norm" is a "rms_norm" layer's object
// (BitNet b1.58's ffn_sub_norm).
// A parameter vector (bias, gamma, beta, weight) is a list of numbers, one number repeated
// "features" times (then "features" must be given in the same object), or a one-dimensional
// float tensor (f16, bf16, f32, f64) read from a file: {"npy": FILE} or
// {"safetensors": FILE, "tensor": NAME}, a relative FILE taken from `spec_dir` (qmmctl
// passes the spec file's folder), so a checkpoint's normalization weights need no copying.
#ifndef QMM_CLIENT_MODEL_SPEC_H_
#define QMM_CLIENT_MODEL_SPEC_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm {

// INVALID_ARGUMENT naming the JSON path (e.g. "layers[2].dyt.gamma") for malformed input,
// and a vector file's read error prefixed with its path in the spec. The server checks the
// rest (weights exist, features line up).
absl::StatusOr<v1::CreateModelRequest> ParseModelSpec(std::string_view json_text,
                                                      const std::string& spec_dir = "");

}  // namespace qmm

#endif  // QMM_CLIENT_MODEL_SPEC_H_
