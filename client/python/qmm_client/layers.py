"""Builders of the layers a model chains (qmm.proto, "Models"), for Client.create_model."""
from qmm.v1 import qmm_pb2


def _floats(values):
    """A list of floats from None (empty), a sequence or a NumPy array."""
    return [] if values is None else [float(v) for v in values]


ACTIVATIONS = {
    "silu": qmm_pb2.ACTIVATION_SILU,
    "gelu_tanh": qmm_pb2.ACTIVATION_GELU_TANH,
    "relu": qmm_pb2.ACTIVATION_RELU,
    "relu2": qmm_pb2.ACTIVATION_RELU_SQUARED,
}


def embedding(weight):
    """Row lookup in an fp16 or bf16 weight [vocab, dim]; only as layer 0."""
    return qmm_pb2.Layer(embedding=qmm_pb2.EmbeddingLayer(weight=weight))


def linear(weight, bias=None):
    """y = x W^T (+ bias, N values)."""
    return qmm_pb2.Layer(linear=qmm_pb2.LinearLayer(weight=weight, bias=_floats(bias)))


def dyt(alpha, gamma, beta=None):
    """y = gamma * tanh(alpha * x) + beta, feature by feature."""
    return qmm_pb2.Layer(dyt=qmm_pb2.DyTLayer(alpha=alpha, gamma=_floats(gamma),
                                               beta=_floats(beta)))


def rms_norm(weight, epsilon):
    """y = weight * x / sqrt(mean(x^2) + epsilon), each row over its features (Llama's
    RMSNorm; epsilon is a config.json's rms_norm_eps)."""
    return qmm_pb2.Layer(rms_norm=qmm_pb2.RmsNormLayer(weight=_floats(weight), epsilon=epsilon))


def activation(kind):
    """Element-wise "silu", "gelu_tanh", "relu" or "relu2" (max(x, 0)^2)."""
    if kind not in ACTIVATIONS:
        raise ValueError(f"activation {kind!r} is not one of {sorted(ACTIVATIONS)}")
    return qmm_pb2.Layer(activation=qmm_pb2.ActivationLayer(kind=ACTIVATIONS[kind]))


def gated_mlp(gate, up, down, activation="silu", sub_norm=None):
    """down(act(gate(x)) * up(x)): SwiGLU with "silu" (Llama), GeGLU with "gelu_tanh"
    (Gemma), ReGLU with "relu". sub_norm, a pair (weight, epsilon), normalizes
    act(gate(x)) * up(x) before down: BitNet b1.58's MLP is activation="relu2" with its
    ffn_sub_norm."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    mlp = qmm_pb2.GatedMlpLayer(gate=gate, up=up, down=down, activation=ACTIVATIONS[activation])
    if sub_norm is not None:
        weight, epsilon = sub_norm
        mlp.sub_norm.CopyFrom(qmm_pb2.RmsNormLayer(weight=_floats(weight), epsilon=epsilon))
    return qmm_pb2.Layer(gated_mlp=mlp)


def residual(block_start):
    """Adds the input of layer `block_start` (a layer before this one)."""
    return qmm_pb2.Layer(residual=qmm_pb2.ResidualLayer(block_start=block_start))
