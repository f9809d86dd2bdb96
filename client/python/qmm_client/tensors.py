"""NumPy arrays to and from the wire's Tensor messages (qmm.proto: raw little-endian
row-major elements of fp32, fp16 or bf16).

NumPy has no bfloat16, so bf16 goes out from float32 values rounded to the nearest bf16
(ties to even, as PyTorch's and the server's conversions round) and comes back as float32,
which holds every bf16 value exactly.
"""
import numpy as np

from qmm.v1 import qmm_pb2

# The names this package takes for a dtype, and the wire's values.
DTYPES = {
    "fp32": qmm_pb2.DTYPE_FP32,
    "fp16": qmm_pb2.DTYPE_FP16,
    "bf16": qmm_pb2.DTYPE_BF16,
}
_NAMES = {value: name for name, value in DTYPES.items()}
# Each one's elements as NumPy reads them off the wire (bf16 as its bits).
_ELEMENTS = {qmm_pb2.DTYPE_FP32: "<f4", qmm_pb2.DTYPE_FP16: "<f2", qmm_pb2.DTYPE_BF16: "<u2"}


def dtype_value(dtype):
    """The wire's DType for a name ("fp32", "fp16", "bf16"), a DType value, or None."""
    if dtype is None:
        return qmm_pb2.DTYPE_UNSPECIFIED
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
        return DTYPES[dtype]
    if dtype not in _NAMES:
        raise ValueError(f"dtype {dtype!r} is not a DType the server takes")
    return dtype


def _bf16_bits(values):
    """float32 values -> their nearest bf16 bit patterns (uint16); NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(values), 0x7FC0, rounded)
    return rounded.astype("<u2")


def to_tensor(x, dtype=None):
    """A 2-D array -> Tensor. dtype: the wire's element type; by default fp16 for float16
    arrays and fp32 for every other real array (float64 is rounded to float32)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"the activations must be 2-D [M, K], got shape {x.shape}")
    if x.dtype.kind not in "fiu":
        raise ValueError(f"the activations must be real numbers, got dtype {x.dtype}")
    if dtype is None:
        dtype = "fp16" if x.dtype == np.float16 else "fp32"
    value = dtype_value(dtype)
    if value == qmm_pb2.DTYPE_FP32:
        data = np.ascontiguousarray(x, dtype="<f4").tobytes()
    elif value == qmm_pb2.DTYPE_FP16:
        data = np.ascontiguousarray(x, dtype="<f2").tobytes()
    elif value == qmm_pb2.DTYPE_BF16:
        data = _bf16_bits(np.asarray(x, dtype=np.float32)).tobytes()
    else:
        raise ValueError("the activations need a dtype: fp32, fp16 or bf16")
    return qmm_pb2.Tensor(dtype=value, shape=list(x.shape), data=data)


def from_tensor(tensor):
    """Tensor -> array: float32 for fp32 and bf16, float16 for fp16."""
    shape = tuple(tensor.shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 0
    if tensor.dtype not in _ELEMENTS:
        raise ValueError(f"the server sent a tensor of unknown dtype {tensor.dtype}")
    element = _ELEMENTS[tensor.dtype]
    size = np.dtype(element).itemsize
    if len(tensor.data) != count * size:
        raise ValueError(f"the server sent {len(tensor.data)} bytes for a {_NAMES[tensor.dtype]} "
                         f"tensor of shape {list(shape)} ({count * size} expected)")
    values = np.frombuffer(tensor.data, dtype=element).reshape(shape)
    if tensor.dtype == qmm_pb2.DTYPE_BF16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(values.dtype.newbyteorder("="))
