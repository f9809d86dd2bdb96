"""The local transport's client (proto/local/local_layout.h, the format written down byte by
byte): MatMul through shared memory with a qmm-server on the same host
(--local_listen=PATH), without gRPC's round trip. Linux only.

Errors are raised as LocalError, a grpc.RpcError with the code and message a gRPC MatMul
would get. One request at a time per slot; threads use different slots.
"""
import ctypes
import mmap
import os
import platform
import socket
import struct
import time

import grpc
import numpy as np

from qmm.v1 import qmm_pb2
from qmm_client.tensors import dtype_value, from_tensor, to_tensor

_MAGIC = 0x4C4D4D51  # "QMML"
_VERSION = 2
_HELLO = struct.Struct("<IIIIQ")
_WELCOME = struct.Struct("<IIiIQ256s")
_HEADER_BYTES = 64
_CONTROL_BYTES = 128
_ALIGN = 64
# SlotControl's fields, by offset within the slot's control block.
_REQUEST_SEQ, _REQUEST_BYTES, _TIMEOUT_NS, _INPUT_BYTES = 0, 4, 8, 16
_RESPONSE_SEQ, _CLIENT_WAITING, _CODE, _RESPONSE_BYTES, _OUTPUT_BYTES = 64, 68, 72, 76, 80
_SERVER_SLEEPING = 24  # in the segment header


def _message_offset(rows_bytes):
    """Where a message starts after rows_bytes of rows: the next 64-byte boundary."""
    return (rows_bytes + _ALIGN - 1) // _ALIGN * _ALIGN

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class LocalError(grpc.RpcError):
    """A refused session or request: code() and details() as a gRPC error's."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self):
        return self._code

    def details(self):
        return self._details


class _Fence:
    """A full memory barrier: a lock taken and released by the C library (its atomic
    read-modify-write orders every load and store around it), which Python has no other
    way to issue. The transport needs it where a store must be seen before a load."""

    def __init__(self):
        self._mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER: zeros

    def __call__(self):
        _libc.pthread_mutex_lock(self._mutex)
        _libc.pthread_mutex_unlock(self._mutex)


class LocalChannel:
    """A session with the server listening at `path`: `slots` requests in flight at once,
    each request and answer up to `slot_bytes` serialized. spin: seconds a caller polls for
    its answer before it sleeps until the server wakes it. One thread may keep several
    slots busy (send on each, then receive on each): the server batches them together."""

    def __init__(self, path, slots=1, slot_bytes=1 << 20, spin=0.0):
        if _SYS_FUTEX is None:
            raise OSError(f"the local transport has no futex number for {platform.machine()}")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.connect(path)
        except OSError as e:
            self._socket.close()
            raise LocalError(grpc.StatusCode.UNAVAILABLE, f"cannot connect to unix:{path}: {e}")
        self._socket.sendall(_HELLO.pack(_MAGIC, _VERSION, slots, 0, slot_bytes))
        data, fds = b"", []
        while len(data) < _WELCOME.size:
            chunk, more, _, _ = socket.recv_fds(self._socket, _WELCOME.size - len(data), 2)
            if not chunk:
                self.close()
                raise LocalError(grpc.StatusCode.UNAVAILABLE, "the server closed the session")
            data += chunk
            fds += more
        magic, _, code, _, segment_bytes, message = _WELCOME.unpack(data)
        if magic != _MAGIC or code != 0:
            for fd in fds:
                socket.close(fd)
            self.close()
            if magic != _MAGIC:
                raise LocalError(grpc.StatusCode.UNAVAILABLE, f"unix:{path} is not qmm's")
            raise LocalError(_CODES.get(code, grpc.StatusCode.UNKNOWN),
                             message.split(b"\0", 1)[0].decode("utf-8", "replace"))
        segment, self._doorbell = fds
        self._map = mmap.mmap(segment, segment_bytes)
        socket.close(segment)
        self._slots = slots
        self._slot_bytes = slot_bytes
        self._spin = spin
        self._fence = _Fence()
        self._sent = {}  # slot: (request_seq, give_up, timeout) until its answer is received

    def close(self):
        if getattr(self, "_map", None) is not None:
            self._map.close()
            self._map = None
            socket.close(self._doorbell)
        self._socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def slots(self):
        return self._slots

    def _control(self, slot):
        return _HEADER_BYTES + slot * _CONTROL_BYTES

    def _area(self, slot):
        return _HEADER_BYTES + self._slots * _CONTROL_BYTES + slot * 2 * self._slot_bytes

    def _u32(self, offset):
        return ctypes.c_uint32.from_buffer(self._map, offset)

    def matmul(self, weight, x, dtype=None, output_dtype=None, slot=0, timeout=30.0):
        """y = x W^T, as Client.matmul, through slot `slot`. timeout: the request's
        deadline in seconds (None: none); the caller waits at most a second longer."""
        request = qmm_pb2.MatMulRequest(weight=weight, input=to_tensor(np.asarray(x), dtype),
                                        output_dtype=dtype_value(output_dtype))
        return from_tensor(self.call(request, slot, timeout).output)

    def call(self, request, slot=0, timeout=30.0):
        """One qmm.v1 MatMulRequest through slot `slot`: its MatMulResponse."""
        self.send(request, slot, timeout)
        return self.receive(slot)

    def _check_slot(self, slot):
        if not 0 <= slot < self._slots:
            raise ValueError(f"slot = {slot} must be in [0, {self._slots})")
        if self._map is None:
            raise ValueError("the channel is closed")

    def send(self, request, slot=0, timeout=30.0):
        """Hands a qmm.v1 MatMulRequest to the server on slot `slot` without waiting for
        its answer, which receive(slot) takes. timeout: the request's deadline in seconds
        (None: none)."""
        self._check_slot(slot)
        if slot in self._sent:
            raise ValueError(f"local slot {slot} still holds a request: receive its answer first")
        # The rows go beside the message, where the server reads them in place; a request
        # without rows goes inline, for the server to refuse as gRPC would.
        rows = request.input.data
        header = request
        if rows:
            header = qmm_pb2.MatMulRequest()
            header.CopyFrom(request)
            header.input.ClearField("data")
        body = header.SerializeToString()
        at = _message_offset(len(rows))
        if at + len(body) > self._slot_bytes:
            raise LocalError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"the request's {at + len(body)} bytes exceed the session's "
                             f"slot_bytes = {self._slot_bytes}")
        control, area = self._control(slot), self._area(slot)
        self._map[area:area + len(rows)] = rows
        self._map[area + at:area + at + len(body)] = body
        struct.pack_into("<IqI", self._map, control + _REQUEST_BYTES, len(body),
                         0 if timeout is None else int(timeout * 1e9), len(rows))
        # The client alone writes request_seq: the last value it wrote is there to read.
        request_seq = self._u32(control + _REQUEST_SEQ)
        seq = (request_seq.value + 1) & 0xFFFFFFFF
        request_seq.value = seq
        # Ringing every time spares the fence before reading server_sleeping.
        os.write(self._doorbell, struct.pack("<Q", 1))
        self._sent[slot] = (seq, None if timeout is None else time.monotonic() + timeout + 1.0,
                            timeout)

    def receive(self, slot=0):
        """The MatMulResponse to the request sent on slot `slot`, waited for at most its
        timeout and a second more (then DEADLINE_EXCEEDED, and the slot is free again)."""
        self._check_slot(slot)
        if slot not in self._sent:
            raise ValueError(f"local slot {slot} has no request to answer: send one first")
        seq, give_up, timeout = self._sent.pop(slot)
        control, area = self._control(slot), self._area(slot)
        answered = self._u32(control + _RESPONSE_SEQ)
        waiting = self._u32(control + _CLIENT_WAITING)
        spin_until = time.monotonic() + self._spin
        while answered.value != seq and time.monotonic() < spin_until:
            pass
        while answered.value != seq:
            waiting.value = 1
            self._fence()
            now = answered.value
            if now == seq:
                break
            ts = (ctypes.c_long * 2)(0, 50_000_000)
            _libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(ctypes.addressof(answered)),
                          ctypes.c_long(_FUTEX_WAIT), ctypes.c_long(now), ts, None,
                          ctypes.c_long(0))
            if answered.value == seq:
                break
            if self._server_gone():
                waiting.value = 0
                raise LocalError(grpc.StatusCode.UNAVAILABLE, "the server ended the local session")
            if give_up is not None and time.monotonic() >= give_up:
                waiting.value = 0
                raise LocalError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                 f"no answer on local slot {slot} within {timeout} s")
        waiting.value = 0
        code, size, output_bytes = struct.unpack_from("<iII", self._map, control + _CODE)
        answer = area + self._slot_bytes
        if code != 0:
            text = self._map[answer:answer + min(size, self._slot_bytes)]
            raise LocalError(_CODES.get(code, grpc.StatusCode.UNKNOWN),
                             text.decode("utf-8", "replace"))
        at = _message_offset(output_bytes) if output_bytes else 0
        if at + size > self._slot_bytes:
            raise LocalError(grpc.StatusCode.DATA_LOSS, "the local answer overruns its slot")
        response = qmm_pb2.MatMulResponse()
        response.ParseFromString(self._map[answer + at:answer + at + size])
        if output_bytes:
            response.output.data = self._map[answer:answer + output_bytes]
        return response

    def _server_gone(self):
        try:
            return self._socket.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
