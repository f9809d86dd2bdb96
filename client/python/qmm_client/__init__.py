"""qmm's Python client: Client, the layer builders (qmm_client.layers) and the tensor
conversions (qmm_client.tensors). Needs grpcio, protobuf, NumPy and the generated
messages (package qmm.v1; README.md, "The Python client")."""
from qmm_client.client import Client

__all__ = ["Client"]
