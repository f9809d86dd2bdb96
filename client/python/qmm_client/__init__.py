"""qmm's Python client: Client, the layer builders (qmm_client.layers) and the tensor
conversions (qmm_client.tensors). Needs grpcio, protobuf, NumPy and the generated
messages (package qmm.v1; see client/python/README.md)."""
from qmm_client.client import Client

__all__ = ["Client"]
