"""qmm's Python client: Client, LocalChannel (the local transport, qmm_client.local), the
layer builders (qmm_client.layers) and the tensor conversions (qmm_client.tensors). Needs
grpcio, protobuf, NumPy and the generated messages (package qmm.v1; README.md, "The Python
client")."""
from qmm_client.client import Client
from qmm_client.local import LocalChannel, LocalError

__all__ = ["Client", "LocalChannel", "LocalError"]
