#!/usr/bin/env python3
"""Tests of the Python client (client/python/qmm_client) against a real qmm-server on the
CPU backend, each product checked against a float64 NumPy reference, and of its tensor
conversions on their own; and of the server's Open Inference Protocol through the
generated `inference` stubs, as a Python KServe or Triton client sends it, and over HTTP
with JSON bodies.

Run by ctest (tests/client/CMakeLists.txt) with PYTHONPATH holding client/python and the
generated qmm.v1 and inference packages, and QMM_SERVER_PATH the server binary.
"""
import json
import math
import os
import re
import signal
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np

from inference import open_inference_pb2 as oip
from inference import open_inference_pb2_grpc as oip_grpc
from qmm.v1 import qmm_pb2
from qmm_client import Client, LocalChannel, LocalError, layers
from qmm_client.tensors import from_tensor, to_tensor

SERVER = os.environ.get("QMM_SERVER_PATH", "")
RNG = np.random.default_rng(20261205)


def nearest_bf16(value):
    """The bf16 bits nearest a float32 value, ties to even (None for NaN: any NaN will do),
    found by comparing the two neighbours in float64, apart from to_tensor's integer
    arithmetic. Infinity counts as 2^128, the bf16 after the largest finite one."""
    if math.isnan(value):
        return None
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if math.isinf(value):
        return bits >> 16

    def as_float(b):
        if b & 0x7FFF == 0x7F80:
            return math.copysign(2.0 ** 128, value)
        return struct.unpack("<f", struct.pack("<I", b << 16))[0]

    low, high = bits >> 16, (bits >> 16) + 1
    d_low, d_high = abs(value - as_float(low)), abs(value - as_float(high))
    if d_low != d_high:
        return low if d_low < d_high else high
    return low if low % 2 == 0 else high


def bf16_values(x):
    """x rounded to bf16 (as the wire carries it), as float64."""
    t = to_tensor(np.asarray(x, np.float32), "bf16")
    return from_tensor(t).astype(np.float64)


class TensorsTest(unittest.TestCase):
    def test_bf16_rounds_to_the_nearest_ties_to_even(self):
        edge = [0.0, -0.0, 1.0, -1.5, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9,
                3.0e38, -3.4028235e38, 1e-40, -1e-45, float("inf"), float("-inf"), float("nan")]
        # NaNs whose payloads would carry into the exponent or the sign if rounded.
        nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001], np.uint32).view(np.float32)
        values = np.concatenate([np.array(edge, np.float32), nans,
                                 RNG.standard_normal(2000).astype(np.float32) * 1e3,
                                 RNG.standard_normal(500).astype(np.float32) * 1e-38])
        x = values.reshape(1, -1)
        t = to_tensor(x, "bf16")
        self.assertEqual(t.dtype, qmm_pb2.DTYPE_BF16)
        self.assertEqual(list(t.shape), [1, len(values)])
        got = np.frombuffer(t.data, "<u2")
        for v, g in zip(values.tolist(), got.tolist()):
            want = nearest_bf16(v)
            if want is None:
                self.assertEqual(g & 0x7F80, 0x7F80, f"NaN became {g:#06x}")
                self.assertNotEqual(g & 0x7F, 0, f"NaN became {g:#06x}")
            else:
                self.assertEqual(g, want, f"{v!r}: {g:#06x} against {want:#06x}")

    def test_round_trips_and_default_dtypes(self):
        x = RNG.standard_normal((3, 40)).astype(np.float32)
        t = to_tensor(x)
        self.assertEqual(t.dtype, qmm_pb2.DTYPE_FP32)
        np.testing.assert_array_equal(from_tensor(t), x)
        h = x.astype(np.float16)
        t = to_tensor(h)
        self.assertEqual(t.dtype, qmm_pb2.DTYPE_FP16)
        back = from_tensor(t)
        self.assertEqual(back.dtype, np.float16)
        np.testing.assert_array_equal(back, h)
        # float64 goes out as fp32; fp16 on request.
        self.assertEqual(to_tensor(x.astype(np.float64)).dtype, qmm_pb2.DTYPE_FP32)
        self.assertEqual(to_tensor(x, "fp16").data, h.tobytes())
        np.testing.assert_array_equal(from_tensor(to_tensor(x, "bf16")), bf16_values(x))

    def test_rejects_what_is_not_a_matrix_or_a_dtype(self):
        for bad in (np.zeros(4, np.float32), np.zeros((1, 2, 3), np.float32),
                    np.array([["a"]]), np.zeros((2, 2), np.complex64)):
            with self.assertRaises(ValueError):
                to_tensor(bad)
        with self.assertRaisesRegex(ValueError, "fp8"):
            to_tensor(np.ones((1, 8), np.float32), "fp8")
        short = qmm_pb2.Tensor(dtype=qmm_pb2.DTYPE_FP16, shape=[2, 3], data=b"\0" * 10)
        with self.assertRaisesRegex(ValueError, r"10 bytes .* \(12 expected"):
            from_tensor(short)
        with self.assertRaisesRegex(ValueError, "unknown dtype"):
            from_tensor(qmm_pb2.Tensor(dtype=qmm_pb2.DTYPE_UNSPECIFIED, shape=[1], data=b"\0"))


def w8a16_packed(n, k):
    """A random W8A16 weight in its canonical packed form, and its values as float64."""
    q = RNG.integers(-127, 128, size=(n, k), dtype=np.int8)
    s = RNG.uniform(0.001, 0.02, size=n).astype(np.float32)
    return q.tobytes() + s.astype("<f4").tobytes(), q.astype(np.float64) * s[:, None]


def int4_checkpoint(n, k, groups):
    """Random symmetric int4 values q [N, K] and fp16 scales s [N, G], packed eight to an
    int32 as GPTQ and compressed-tensors store them (u = q + 8, value j in bits 4j..),
    and the weight's values as float64."""
    q = RNG.integers(-8, 8, size=(n, k))
    s = (RNG.uniform(0.001, 0.05, size=(n, groups)) * RNG.choice([-1, 1], (n, groups)))
    s = s.astype(np.float16)
    u = (q + 8).astype(np.uint32).reshape(n, k // 8, 8)
    along_k = np.bitwise_or.reduce(u << (4 * np.arange(8, dtype=np.uint32)), axis=2)
    w = q * np.repeat(s.astype(np.float64), k // groups, axis=1)
    return along_k.astype(np.uint32).view(np.int32), s, w


def bitnet_hf(n, k):
    """Random ternary values t [N, K] (never all zeros), and Hugging Face's BitLinear.weight
    of them written from the packing's description: uint8 [R, K], R = N/4, bits 2i..2i+1
    of byte [r][k] holding t[r + i*R][k] + 1."""
    t = RNG.integers(-1, 2, size=(n, k))
    t[0, 0] = 1
    planes = (t + 1).astype(np.uint8).reshape(4, n // 4, k)  # plane i: rows i*R .. i*R+R-1
    shifts = (2 * np.arange(4, dtype=np.uint8))[:, None, None]
    return t, np.bitwise_or.reduce(planes << shifts, axis=0).astype(np.uint8)


def bf16_like(values):
    """Values rounded to bf16: (their bits, as uint16; the values, exact in float32)."""
    bits = ((np.asarray(values, np.float32).view(np.uint32) + 0x8000) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def ternary_close_to(test, got, x, w):
    """A W2A8 result against the float64 product x w^T of its weight's values w [N, K],
    within what the server's int8 activations allow: each row's inputs are rounded to
    steps of a = max|x[m]| / 127, so each is off by at most a / 2 and y[m][n] by
    a / 2 * sum_k |w[n][k]| (plus fp32 accumulation). And, closer, against the product of
    the activations quantized by the proto's rule (xq = round(x / a), half away from
    zero), within fp32 accumulation and one step either way at a rounding tie."""
    x = np.asarray(x, np.float64)
    got = got.astype(np.float64)
    a = np.abs(x).max(axis=1, keepdims=True) / 127
    accumulation = 1e-5 * (np.abs(x) @ np.abs(w).T) + 1e-30
    want = x @ w.T
    bound = a / 2 * np.abs(w).sum(axis=1)[None, :] * (1 + 1e-5) + accumulation
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    test.assertTrue(np.all(err <= bound), f"at {worst}: got {got[worst]}, want "
                    f"{want[worst]}, bound {bound[worst]}")
    xq = np.sign(x) * np.floor(np.abs(x) / a + 0.5)
    want_q = a * (xq @ w.T)
    bound_q = 1e-4 * (np.abs(want_q) + np.abs(want_q).mean()) + 2 * a * np.abs(w).max(axis=1)
    err_q = np.abs(got - want_q)
    worst = np.unravel_index(np.argmax(err_q / bound_q), err_q.shape)
    test.assertTrue(np.all(err_q <= bound_q), f"at {worst}: got {got[worst]}, want "
                    f"{want_q[worst]} (quantized activations), bound {bound_q[worst]}")


def write_safetensors(path, tensors):
    """A .safetensors file of {name: (dtype name, array)}: the header, then the data."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, array) in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def close_to(test, got, want, x, w, rel=1e-5, out_rel=0.0):
    """|got - want| within fp32 accumulation (rel * sum |x||w|) and the result's rounding
    (out_rel * |want|), element by element."""
    bound = rel * (np.abs(x) @ np.abs(w).T) + out_rel * np.abs(want) + 1e-30
    err = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    test.assertTrue(np.all(err <= bound),
                    f"at {worst}: got {got[worst]}, want {want[worst]}, bound {bound[worst]}")


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = os.path.join(tempfile.gettempdir(), f"qmm-py-{os.getpid()}.sock")
        cls.proc = subprocess.Popen(
            [SERVER, "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
             "--http_listen=127.0.0.1:0", f"--local_listen={cls.local}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = ""
        for line in cls.proc.stdout:
            seen += line
            m = re.search(r"listening on (\S+) ", line)
            if m:
                cls.client = Client(m.group(1), timeout=60)
                cls.channel = grpc.insecure_channel(m.group(1))
                cls.oip = oip_grpc.GRPCInferenceServiceStub(cls.channel)
            m = re.search(r"HTTP on (http://\S+)", line)
            if m:
                cls.http = m.group(1)
                return
        cls.proc.wait(timeout=60)
        raise AssertionError(f"qmm-server did not start:\n{seen}")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.channel.close()
        cls.proc.send_signal(signal.SIGTERM)
        cls.proc.communicate(timeout=60)

    def assert_status(self, code, pattern, call, *args, **kwargs):
        with self.assertRaises(grpc.RpcError) as caught:
            call(*args, **kwargs)
        self.assertEqual(caught.exception.code(), code, caught.exception.details())
        if pattern:
            self.assertRegex(caught.exception.details(), pattern)

    def test_matmul_of_a_packed_weight_at_every_dtype(self):
        n, k = 96, 256
        payload, w = w8a16_packed(n, k)
        info = self.client.upload_packed("py.packed", n, k, "w8a16", payload)
        self.assertEqual((info.name, info.n, info.k, info.scheme),
                         ("py.packed", n, k, qmm_pb2.SCHEME_W8A16))
        self.assertEqual(info.packed_bytes, n * k + 4 * n)
        for m in (1, 3, 17):
            x = RNG.standard_normal((m, k)).astype(np.float32)
            y = self.client.matmul("py.packed", x)
            self.assertEqual((y.shape, y.dtype), ((m, n), np.float32))
            close_to(self, y, x.astype(np.float64) @ w.T, x, w)
            # fp16 in and out: the reference takes the rounded inputs; the result rounds once.
            h = x.astype(np.float16)
            y = self.client.matmul("py.packed", h)
            self.assertEqual(y.dtype, np.float16)
            close_to(self, y, h.astype(np.float64) @ w.T, h, w, out_rel=2.0 ** -11)
            # bf16 in, fp32 out; fp32 in, bf16 out.
            xb = bf16_values(x)
            y = self.client.matmul("py.packed", x, dtype="bf16", output_dtype="fp32")
            close_to(self, y, xb @ w.T, xb, w)
            y = self.client.matmul("py.packed", x, output_dtype="bf16")
            close_to(self, y, x.astype(np.float64) @ w.T, x, w, out_rel=2.0 ** -8)

    def test_local_transport_answers_as_grpc_does(self):
        n, k = 96, 256
        payload, w = w8a16_packed(n, k)
        self.client.upload_packed("py.local", n, k, "w8a16", payload)
        with LocalChannel(self.local, slots=2, slot_bytes=1 << 16, spin=0.0005) as local:
            self.assertEqual(local.slots, 2)
            for m, dtype, out in ((1, "fp16", None), (5, "fp32", "bf16"), (17, "bf16", "fp32")):
                x = RNG.standard_normal((m, k)).astype(np.float32)
                y = local.matmul("py.local", x, dtype=dtype, output_dtype=out, slot=m % 2)
                want = self.client.matmul("py.local", x, dtype=dtype, output_dtype=out)
                self.assertEqual((y.shape, y.dtype), (want.shape, want.dtype))
                np.testing.assert_array_equal(y, want)
            close_to(self, local.matmul("py.local", x), x.astype(np.float64) @ w.T, x, w)
            # The server's refusals, with gRPC's codes and messages; the session goes on.
            with self.assertRaises(LocalError) as caught:
                local.matmul("py.nothing", x)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("py.nothing", caught.exception.details())
            with self.assertRaises(grpc.RpcError) as caught:
                local.matmul("py.local", RNG.standard_normal((1, k + 1)).astype(np.float32))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            with self.assertRaises(LocalError) as caught:  # over the slot: never sent
                local.matmul("py.local", RNG.standard_normal((100, k)).astype(np.float32))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            with self.assertRaisesRegex(ValueError, r"slot = 2 must be in \[0, 2\)"):
                local.matmul("py.local", x, slot=2)
            self.assertEqual(local.matmul("py.local", x).shape, (17, n))
            # Both slots in flight from this one thread, answers taken in reverse order.
            xs = [RNG.standard_normal((1 + slot, k)).astype(np.float32) for slot in (0, 1)]
            for slot in (0, 1):
                local.send(qmm_pb2.MatMulRequest(weight="py.local",
                                                 input=to_tensor(xs[slot], "fp16")), slot)
            with self.assertRaisesRegex(ValueError, "local slot 1 still holds a request"):
                local.send(qmm_pb2.MatMulRequest(weight="py.local"), 1)
            for slot in (1, 0):
                np.testing.assert_array_equal(from_tensor(local.receive(slot).output),
                                              self.client.matmul("py.local", xs[slot],
                                                                 dtype="fp16"))
            with self.assertRaisesRegex(ValueError, "local slot 0 has no request to answer"):
                local.receive(0)
        with self.assertRaises(LocalError) as caught:
            LocalChannel(self.local, slot_bytes=100)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("Hello.slot_bytes = 100", caught.exception.details())
        with self.assertRaises(LocalError) as caught:
            LocalChannel(self.local + ".none")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_float_upload_in_several_chunks_is_quantized_by_the_server(self):
        # 640 x 1024 fp32 = 2.5 MiB: three chunks.
        n, k = 640, 1024
        w = RNG.standard_normal((n, k)).astype(np.float32)
        info = self.client.upload_weight("py.float", w, "w8a16")
        self.assertEqual((info.n, info.k, info.packed_bytes), (n, k, n * k + 4 * n))
        self.assertEqual(self.client.get_weight("py.float"), info)
        x = RNG.standard_normal((5, k)).astype(np.float32)
        y = self.client.matmul("py.float", x).astype(np.float64)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        # Each weight is off by at most half its row's step, max|w[n]| / 127 / 2.
        step = np.abs(w).max(axis=1).astype(np.float64) / 127
        bound = (np.abs(x) @ np.ones((k, n))) * step[None, :] / 2 * 1.001 + 1e-4
        self.assertTrue(np.all(np.abs(y - want) <= bound))
        # And not the exact product: the weights were quantized.
        self.assertGreater(np.abs(y - want).max(), 1e-4)

    def test_stream_answers_in_order_across_weights(self):
        pa, wa = w8a16_packed(32, 128)
        pb, wb = w8a16_packed(48, 64)
        self.client.upload_packed("py.sa", 32, 128, "w8a16", pa)
        self.client.upload_packed("py.sb", 48, 64, "w8a16", pb)
        calls = []
        for i in range(6):
            name, w = ("py.sa", wa) if i % 2 == 0 else ("py.sb", wb)
            calls.append((name, RNG.standard_normal((i + 1, w.shape[1])).astype(np.float32), w))
        results = list(self.client.matmul_stream((name, x) for name, x, _ in calls))
        self.assertEqual(len(results), len(calls))
        for (name, x, w), y in zip(calls, results):
            close_to(self, y, x.astype(np.float64) @ w.T, x, w)
        # Per-call dtypes: fp16 in, fp32 out.
        name, x, w = calls[0]
        (y,) = self.client.matmul_stream([(name, x, "fp16", "fp32")])
        h = x.astype(np.float16)
        self.assertEqual(y.dtype, np.float32)
        close_to(self, y, h.astype(np.float64) @ w.T, h, w)

    def test_model_forward_chains_its_layers(self):
        p1, w1 = w8a16_packed(64, 128)
        p2, w2 = w8a16_packed(32, 64)
        self.client.upload_packed("py.l1", 64, 128, "w8a16", p1)
        self.client.upload_packed("py.l2", 32, 64, "w8a16", p2)
        bias = RNG.standard_normal(64).astype(np.float32)
        norm = RNG.uniform(0.5, 1.5, 128).astype(np.float32)
        info = self.client.create_model(
            "py.mlp", [layers.rms_norm(norm, 1e-5), layers.linear("py.l1", bias),
                       layers.activation("relu"), layers.linear("py.l2")])
        self.assertEqual((info.in_features, info.out_features), (128, 32))
        self.assertEqual(list(info.weights), ["py.l1", "py.l2"])
        self.assertIn("py.mlp", [m.name for m in self.client.list_models()])
        x = RNG.standard_normal((4, 128)).astype(np.float32)
        xd = x.astype(np.float64)
        normed = norm * xd / np.sqrt(np.mean(xd * xd, axis=1, keepdims=True) + 1e-5)
        h = np.maximum(normed @ w1.T + bias, 0)
        y = self.client.forward("py.mlp", x)
        self.assertEqual(y.shape, (4, 32))
        np.testing.assert_allclose(y, h @ w2.T, rtol=1e-4, atol=1e-4)
        self.client.delete_model("py.mlp")
        self.assert_status(grpc.StatusCode.NOT_FOUND, "py.mlp", self.client.get_model, "py.mlp")

    def test_gated_mlp_takes_the_gate_activation(self):
        pg, wg = w8a16_packed(64, 128)
        pu, wu = w8a16_packed(64, 128)
        pd, wd = w8a16_packed(128, 64)
        for name, p in (("py.g", pg), ("py.u", pu), ("py.d", pd)):
            n, k = (128, 64) if name == "py.d" else (64, 128)
            self.client.upload_packed(name, n, k, "w8a16", p)
        x = RNG.standard_normal((3, 128)).astype(np.float32)
        xd = x.astype(np.float64)
        gate, up = xd @ wg.T, xd @ wu.T
        gelu = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
        silu = gate / (1 + np.exp(-gate))
        for activation, act in (("gelu_tanh", gelu), ("silu", silu)):
            self.client.create_model("py.glu", [layers.gated_mlp("py.g", "py.u", "py.d",
                                                                 activation)])
            info = self.client.get_model("py.glu")
            self.assertEqual(info.layers[0].gated_mlp.activation,
                             layers.ACTIVATIONS[activation])
            np.testing.assert_allclose(self.client.forward("py.glu", x), (act * up) @ wd.T,
                                       rtol=1e-4, atol=1e-4)
            self.client.delete_model("py.glu")
        # BitNet b1.58's MLP: relu2, then the product's RMSNorm (ffn_sub_norm) before down.
        sub = RNG.uniform(0.5, 1.5, 64).astype(np.float32)
        self.client.create_model("py.bitnet", [layers.gated_mlp("py.g", "py.u", "py.d", "relu2",
                                                                sub_norm=(sub, 1e-6))])
        info = self.client.get_model("py.bitnet")
        self.assertEqual(info.layers[0].gated_mlp.activation, layers.ACTIVATIONS["relu2"])
        self.assertEqual(len(info.layers[0].gated_mlp.sub_norm.weight), 64)
        h = np.maximum(gate, 0) ** 2 * up
        h = sub * h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(self.client.forward("py.bitnet", x), h @ wd.T, rtol=1e-4,
                                   atol=1e-4)
        self.client.delete_model("py.bitnet")
        with self.assertRaisesRegex(ValueError, "activation 'swish' is not one of"):
            layers.gated_mlp("py.g", "py.u", "py.d", "swish")

    def test_open_inference_protocol(self):
        n, k = 40, 128
        payload, w = w8a16_packed(n, k)
        self.client.upload_packed("py.oip", n, k, "w8a16", payload)
        self.assertTrue(self.oip.ServerReady(oip.ServerReadyRequest(), timeout=60).ready)
        meta = self.oip.ModelMetadata(oip.ModelMetadataRequest(name="py.oip"), timeout=60)
        self.assertEqual((meta.platform, list(meta.versions)), ("qmm_w8a16", ["1"]))
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in meta.inputs],
                         [("x", "FP16", [-1, k])])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in meta.outputs],
                         [("y", "FP16", [-1, n])])

        def request(x, datatype, raw=True):
            tensor = oip.ModelInferRequest.InferInputTensor(name="x", datatype=datatype,
                                                            shape=x.shape)
            if not raw:
                tensor.contents.fp32_contents.extend(x.ravel().tolist())
            return oip.ModelInferRequest(model_name="py.oip", id="r1", inputs=[tensor],
                                         raw_input_contents=[x.tobytes()] if raw else [])

        h = RNG.standard_normal((3, k)).astype(np.float16)
        r = self.oip.ModelInfer(request(h, "FP16"), timeout=60)
        self.assertEqual((r.model_name, r.model_version, r.id), ("py.oip", "1", "r1"))
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in r.outputs],
                         [("y", "FP16", [3, n])])
        y = np.frombuffer(r.raw_output_contents[0], "<f2").reshape(3, n)
        close_to(self, y, h.astype(np.float64) @ w.T, h, w, out_rel=2.0 ** -11)
        # FP32 in the typed field: the same product as MatMul's, bit for bit.
        x = RNG.standard_normal((2, k)).astype(np.float32)
        r = self.oip.ModelInfer(request(x, "FP32", raw=False), timeout=60)
        y = np.frombuffer(r.raw_output_contents[0], "<f4").reshape(2, n)
        close_to(self, y, x.astype(np.float64) @ w.T, x, w)
        np.testing.assert_array_equal(y, self.client.matmul("py.oip", x))

        with self.assertRaises(grpc.RpcError) as caught:
            self.oip.ModelInfer(request(x[:, :64].copy(), "FP32"), timeout=60)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn('inputs[0].shape[1] = 64, but weight "py.oip" takes 128',
                      caught.exception.details())
        # The stream answers a failed request in place and goes on.
        bad = request(h, "FP16")
        bad.model_name = "py.none"
        answers = list(self.oip.ModelStreamInfer(iter([request(h, "FP16"), bad,
                                                        request(h, "FP16")]), timeout=60))
        self.assertEqual([a.error_message for a in answers],
                         ["", 'NOT_FOUND: no model or weight named "py.none" on this server', ""])
        self.assertEqual(answers[2].infer_response.raw_output_contents[0].hex(),
                         answers[0].infer_response.raw_output_contents[0].hex())
        self.client.delete_weight("py.oip")
        self.assertFalse(self.oip.ModelReady(oip.ModelReadyRequest(name="py.oip"),
                                             timeout=60).ready)

    def test_open_inference_protocol_over_http(self):
        n, k = 24, 64
        payload, w = w8a16_packed(n, k)
        self.client.upload_packed("py.http", n, k, "w8a16", payload)

        def call(path, body=None):
            data = None if body is None else json.dumps(body).encode()
            try:
                with urllib.request.urlopen(f"{self.http}{path}", data, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        self.assertEqual(call("/health/ready"), (200, {"ready": True}))
        status, meta = call("/models/py.http")
        self.assertEqual((status, meta["platform"], meta["outputs"][0]["shape"]),
                         (200, "qmm_w8a16", [-1, n]))
        x = RNG.standard_normal((2, k)).astype(np.float32)
        status, out = call("/models/py.http/infer", {
            "id": "h1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, k],
                                    "data": x.tolist()}]})
        self.assertEqual(status, 200, out)
        self.assertEqual((out["id"], out["outputs"][0]["shape"]), ("h1", [2, n]))
        y = np.array(out["outputs"][0]["data"], np.float32).reshape(2, n)
        close_to(self, y, x.astype(np.float64) @ w.T, x, w)
        np.testing.assert_array_equal(y, self.client.matmul("py.http", x))
        status, out = call("/models/py.http/infer", {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, k - 1], "data": [1.0]}]})
        self.assertEqual(status, 400)
        self.assertIn("holds 1 values", out["error"])
        self.client.delete_weight("py.http")
        self.assertEqual(call("/models/py.http/ready"), (503, {"ready": False}))

    def test_gptq_and_pack_quantized_layers_upload_as_they_are(self):
        n, k = 64, 384
        packed, s, w = int4_checkpoint(n, k, k // 128)  # packed: [N, K/8]
        qzeros = np.full((k // 128, n // 8), 0x77777777, np.int32)  # zero points 8, minus one
        g_idx = np.arange(k, dtype=np.int32) // 128
        info = self.client.upload_gptq("py.gptq", packed.T, qzeros, s.T, g_idx)
        self.assertEqual((info.n, info.k, info.group_size, info.scheme),
                         (n, k, 128, qmm_pb2.SCHEME_W4A16))
        per_row, s_row, w_row = int4_checkpoint(n, k, 1)
        info = self.client.upload_pack_quantized("py.pq", per_row, s_row.astype(np.float32))
        self.assertEqual((info.n, info.k, info.group_size), (n, k, 0))
        x = RNG.standard_normal((3, k)).astype(np.float32)
        close_to(self, self.client.matmul("py.gptq", x), x.astype(np.float64) @ w.T, x, w)
        close_to(self, self.client.matmul("py.pq", x), x.astype(np.float64) @ w_row.T, x, w_row)

        # What the server cannot hold: an asymmetric zero point, a group index that does
        # not put 128 inputs in each group, and "gptq_v2"'s reading of "gptq" zero points;
        # none leaves a weight.
        asym = qzeros.copy()
        asym[1, 2] = 0x77777757
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT,
                           r"qzeros: group 1, column 17 has zero point 6",
                           self.client.upload_gptq, "py.bad", packed.T, asym, s.T)
        lopsided = g_idx.copy()
        lopsided[0] = 1
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT,
                           r"weight_g_idx puts 127 columns in group 0, must put 128 in each",
                           self.client.upload_pack_quantized, "py.bad", packed, s, lopsided)
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT, r"has zero point 7",
                           self.client.upload_gptq, "py.bad", packed.T, qzeros, s.T,
                           checkpoint_format="gptq_v2")
        self.assert_status(grpc.StatusCode.NOT_FOUND, None, self.client.get_weight, "py.bad")
        with self.assertRaisesRegex(ValueError, "groups of 128 or one group a row"):
            self.client.upload_pack_quantized("py.bad", packed, np.ones((n, 2), np.float16))
        with self.assertRaisesRegex(ValueError, "2-D int32"):
            self.client.upload_gptq("py.bad", packed.T.astype(np.int64), qzeros, s.T)

    def test_act_order_layers_upload_in_their_order(self):
        # desc_act: each input's group from a random dealing, 128 inputs a group; the codes
        # stay in input order and each input takes its group's scale.
        n, k = 48, 384
        packed, s, _ = int4_checkpoint(n, k, k // 128)
        g_idx = np.empty(k, np.int32)
        g_idx[RNG.permutation(k)] = np.arange(k) // 128
        q = ((packed.view(np.uint32)[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15)
        q = q.reshape(n, k).astype(np.int64) - 8
        w = q * s.astype(np.float64)[:, g_idx]
        info = self.client.upload_pack_quantized("py.pq_act", packed, s, g_idx)
        self.assertEqual((info.group_size, info.act_order, info.zero_points), (128, True, False))
        qzeros = np.full((k // 128, n // 8), 0x77777777, np.int32)
        info = self.client.upload_gptq("py.gptq_act", packed.T, qzeros, s.T, g_idx)
        self.assertTrue(info.act_order)
        self.assertEqual(info.packed_bytes, n * k // 2 + 2 * n * 3 + 4 * k)
        x = RNG.standard_normal((5, k)).astype(np.float32)
        for name in ("py.pq_act", "py.gptq_act"):
            close_to(self, self.client.matmul(name, x), x.astype(np.float64) @ w.T, x, w)
        # compressed-tensors' asymmetric layers (W4A16_ASYM): zero points [N/8, G] packed
        # along N, stored z + 8, with the order too.
        z = RNG.integers(-8, 8, size=(n, 3))
        zeros = np.bitwise_or.reduce(
            (z + 8).astype(np.uint32).T.reshape(3, n // 8, 8) << (4 * np.arange(8, dtype=np.uint32)),
            axis=2).T.astype(np.uint32).view(np.int32)  # [N/8, G]
        info = self.client.upload_pack_quantized("py.pq_asym", packed, s, g_idx,
                                                 weight_zero_point=zeros)
        self.assertEqual((info.zero_points, info.act_order), (True, True))
        w_asym = (q - z[:, g_idx]) * s.astype(np.float64)[:, g_idx]
        close_to(self, self.client.matmul("py.pq_asym", x), x.astype(np.float64) @ w_asym.T, x,
                 w_asym)
        with self.assertRaisesRegex(ValueError, "weight_zero_point is"):
            self.client.upload_pack_quantized("py.bad", packed, s, weight_zero_point=zeros.T)
        # A g_idx of k / 128 is no activation order.
        info = self.client.upload_gptq("py.gptq_ordered", packed.T, qzeros, s.T,
                                       np.arange(k) // 128)
        self.assertFalse(info.act_order)

    def test_checkpoint_directories_upload_as_their_settings_say(self):
        n, k = 32, 256
        x = RNG.standard_normal((2, k)).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            # GPTQ, sym=False, desc_act: two layers in two shards, their index, a float
            # tensor besides.
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"quantization_config": {"quant_method": "gptq", "bits": 4,
                                                   "group_size": 128, "sym": False,
                                                   "desc_act": True}}, f)
            layers, weight_map = {}, {}
            for i, name in enumerate(["model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj"]):
                packed, s, _ = int4_checkpoint(n, k, 2)
                qzeros = RNG.integers(0, 2**31 - 1, size=(2, n // 8), dtype=np.int64).astype(np.int32)
                g_idx = np.empty(k, np.int32)
                g_idx[RNG.permutation(k)] = np.arange(k) // 128
                layers[name] = (packed.T.copy(), qzeros, s.T.copy(), g_idx)
                shard = f"model-0000{i + 1}-of-00002.safetensors"
                tensors = {name + ".qweight": ("I32", packed.T), name + ".qzeros": ("I32", qzeros),
                           name + ".scales": ("F16", s.T), name + ".g_idx": ("I32", g_idx),
                           "model.norm.weight": ("F64", np.ones(k))}
                write_safetensors(os.path.join(d, shard), tensors)
                weight_map.update({t: shard for t in tensors})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": weight_map}, f)
            infos = self.client.upload_checkpoint(d, prefix="py.ck.")
            self.assertEqual([i.name for i in infos], ["py.ck." + n for n in layers])
            self.assertTrue(all(i.zero_points and i.act_order for i in infos))
            for name, (qweight, qzeros, scales, g_idx) in layers.items():
                self.client.upload_gptq("py.ck.direct", qweight, qzeros, scales, g_idx, sym=False)
                np.testing.assert_array_equal(self.client.matmul("py.ck." + name, x),
                                              self.client.matmul("py.ck.direct", x))
                self.client.delete_weight("py.ck.direct")
            info, = self.client.upload_checkpoint(d, "py.ck.one", layer="model.layers.1.mlp.up_proj")
            self.assertEqual(info.name, "py.ck.one")
            with self.assertRaisesRegex(ValueError, "no layer 'nope' in its 2 .safetensors"):
                self.client.upload_checkpoint(d, layer="nope")
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"quantization_config": {"quant_method": "gptq", "bits": 8,
                                                   "group_size": 128}}, f)
            with self.assertRaisesRegex(ValueError, "bits = 8: only 4-bit GPTQ layers"):
                self.client.upload_checkpoint(d, prefix="py.bad.")
        with tempfile.TemporaryDirectory() as d:
            # compressed-tensors W4A16_ASYM with bf16 scales, one file, no index.
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"quantization_config": {
                    "quant_method": "compressed-tensors", "format": "pack-quantized",
                    "config_groups": {"group_0": {"weights": {
                        "num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                        "group_size": 128}}}}}, f)
            packed, s, _ = int4_checkpoint(n, k, 2)
            # bf16 scales: the fp16 ones rounded to bf16 (any bf16 values would do).
            bits = (s.astype(np.float32).view(np.uint32) + 0x8000) >> 16
            s_bf16 = (bits << 16).view(np.float32)
            zeros = RNG.integers(0, 2**31 - 1, size=(n // 8, 2), dtype=np.int64).astype(np.int32)
            write_safetensors(os.path.join(d, "model.safetensors"), {
                "l.weight_packed": ("I32", packed), "l.weight_zero_point": ("I32", zeros),
                "l.weight_scale": ("BF16", bits.astype(np.uint16))})
            info, = self.client.upload_checkpoint(d, prefix="py.ct.")
            self.assertEqual((info.name, info.zero_points, info.act_order), ("py.ct.l", True, False))
            self.client.upload_pack_quantized("py.ct.direct", packed, s_bf16,
                                              weight_zero_point=zeros)
            np.testing.assert_array_equal(self.client.matmul("py.ct.l", x),
                                          self.client.matmul("py.ct.direct", x))

    def test_awq_and_asymmetric_gptq_layers_upload_with_zero_points(self):
        n, k, groups = 32, 256, 2
        q = RNG.integers(0, 16, size=(n, k))  # unsigned codes u, w = (u - z) * s
        z = RNG.integers(1, 16, size=(n, groups))
        z[0, 0], z[1, 1] = 0, 15  # the one 0: "gptq" stores it as 15, read back as 16
        s = RNG.uniform(0.001, 0.05, size=(n, groups)).astype(np.float16)
        w = (q - np.repeat(z, k // groups, axis=1)) * np.repeat(s.astype(np.float64),
                                                                 k // groups, axis=1)
        shifts = 4 * np.arange(8, dtype=np.uint32)

        def pack_n(values, order):  # [R, N] -> int32 [R, N/8], value j = column 8i + order[j]
            v = values.astype(np.uint32).reshape(values.shape[0], -1, 8)[:, :, order]
            return np.bitwise_or.reduce(v << shifts, axis=2).astype(np.uint32).view(np.int32)

        awq_order = [0, 2, 4, 6, 1, 3, 5, 7]
        info = self.client.upload_awq("py.awq", pack_n(q.T, awq_order), pack_n(z.T, awq_order),
                                      s.T)
        self.assertEqual((info.n, info.k, info.group_size, info.zero_points), (n, k, 128, True))
        along_k = np.bitwise_or.reduce(
            q.astype(np.uint32).reshape(n, k // 8, 8) << shifts, axis=2)
        qweight = along_k.astype(np.uint32).view(np.int32).T  # GPTQ's [K/8, N]
        gptq_zeros = pack_n((z - 1).T & 15, list(range(8)))  # "gptq": stored minus one
        info = self.client.upload_gptq("py.gptq_asym", qweight, gptq_zeros, s.T, sym=False)
        self.assertTrue(info.zero_points)
        x = RNG.standard_normal((3, k)).astype(np.float32)
        for name in ("py.awq", "py.gptq_asym"):
            got = self.client.matmul(name, x)
            # Its zero point 0 is 16 to "gptq" readers: that one group differs.
            want_w = w.copy()
            if name == "py.gptq_asym":
                want_w[0, :128] -= 16 * np.float64(s[0, 0])
            close_to(self, got, x.astype(np.float64) @ want_w.T, x, want_w)

        # Float values quantized with zero points: within half a step of each group's range.
        v = (RNG.standard_normal((n, k)) * 0.02 + 0.05).astype(np.float32)
        info = self.client.upload_weight("py.float_zp", v, "w4a16", zero_points=True)
        self.assertTrue(info.zero_points)
        step = (v.reshape(n, -1, 128).max(2) - np.minimum(v.reshape(n, -1, 128).min(2), 0)) / 15
        bound = np.abs(x) @ np.repeat(step, 128, axis=1).T * 0.51 + 1e-4
        err = np.abs(self.client.matmul("py.float_zp", x) - x.astype(np.float64) @ v.T)
        self.assertTrue(np.all(err <= bound), f"worst {np.max(err / bound)}")

    def test_bitnet_layers_upload_as_their_checkpoints_store_them(self):
        n, k = 64, 256
        t, packed = bitnet_hf(n, k)
        _, scale = bf16_like([RNG.uniform(1.5, 4.0)])  # per tensor, bf16 as read back
        x = RNG.standard_normal((3, k)).astype(np.float32)
        # BitLinear's scales divide, AutoBitLinear's multiply.
        info = self.client.upload_bitnet("py.bitnet_div", packed, scale)
        self.assertEqual((info.n, info.k, info.scheme, info.packed_bytes),
                         (n, k, qmm_pb2.SCHEME_W2A8, n * k // 4 + 4 * n))
        self.client.upload_bitnet("py.bitnet_mul", packed, scale, scale_multiplies=True)
        w_div = t / np.float64(scale[0])
        w_mul = t * np.float64(scale[0])
        ternary_close_to(self, self.client.matmul("py.bitnet_div", x), x, w_div)
        ternary_close_to(self, self.client.matmul("py.bitnet_mul", x), x, w_mul)
        # The same bytes through upload_packed, scale_multiplies in its header.
        self.client.upload_packed("py.bitnet_packed", n, k, "w2a8",
                                  packed.tobytes() + scale.astype("<f4").tobytes(),
                                  encoding="bitnet_hf", scale_multiplies=True)
        np.testing.assert_array_equal(self.client.matmul("py.bitnet_packed", x),
                                      self.client.matmul("py.bitnet_mul", x))
        # N fp16 scales, multiplying; none (scale 1).
        rows = RNG.uniform(0.01, 0.1, size=n).astype(np.float16)
        self.client.upload_bitnet("py.bitnet_rows", packed, rows, scale_multiplies=True)
        ternary_close_to(self, self.client.matmul("py.bitnet_rows", x), x,
                         t * rows.astype(np.float64)[:, None])
        self.client.upload_bitnet("py.bitnet_none", packed)
        ternary_close_to(self, self.client.matmul("py.bitnet_none", x), x, t.astype(np.float64))

        with self.assertRaisesRegex(ValueError, "weight must be a 2-D uint8"):
            self.client.upload_bitnet("py.bad", packed.view(np.int8), scale)
        with self.assertRaisesRegex(ValueError, "weight must be a 2-D uint8"):
            self.client.upload_bitnet("py.bad", packed.ravel(), scale)
        for bad in (np.ones(3, np.float32), scale.astype(np.float64),
                    np.ones((n, 1), np.float32)):
            with self.assertRaisesRegex(ValueError, "weight_scale must be 1 or 64"):
                self.client.upload_bitnet("py.bad", packed, bad)
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT, "scale_multiplies",
                           self.client.upload_packed, "py.bad", 16, 64, "w8a16",
                           w8a16_packed(16, 64)[0], scale_multiplies=True)
        self.assert_status(grpc.StatusCode.NOT_FOUND, None, self.client.get_weight, "py.bad")

    def test_bitnet_checkpoint_directories_upload_as_their_settings_say(self):
        n, k = 32, 256
        x = RNG.standard_normal((2, k)).astype(np.float32)
        config = {"quant_method": "bitnet", "linear_class": "autobitlinear",
                  "quantization_mode": "offline"}

        def write_config(d, settings):
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": "bitnet", "quantization_config": settings}, f)

        with tempfile.TemporaryDirectory() as d:
            write_config(d, config)
            # Two layers, a bf16 scale of shape [1] and an fp32 one of shape []; a norm and
            # an embedding (bf16, not uint8) besides.
            t_up, up = bitnet_hf(n, k)
            t_q, q = bitnet_hf(n, k)
            up_bits, up_scale = bf16_like([RNG.uniform(1.5, 4.0)])
            q_scale = np.array(RNG.uniform(1.5, 4.0), np.float32)
            write_safetensors(os.path.join(d, "model.safetensors"), {
                "model.embed_tokens.weight": ("BF16", bf16_like(RNG.standard_normal((8, k)))[0]),
                "model.layers.0.mlp.up_proj.weight": ("U8", up),
                "model.layers.0.mlp.up_proj.weight_scale": ("BF16", up_bits),
                "model.layers.0.self_attn.q_proj.weight": ("U8", q),
                "model.layers.0.self_attn.q_proj.weight_scale": ("F32", q_scale),
                "model.norm.weight": ("BF16", bf16_like(np.ones(k))[0])})
            infos = self.client.upload_checkpoint(d, prefix="py.bn.")
            self.assertEqual([(i.name, i.n, i.k, i.scheme) for i in infos],
                             [("py.bn.model.layers.0.mlp.up_proj", n, k, qmm_pb2.SCHEME_W2A8),
                              ("py.bn.model.layers.0.self_attn.q_proj", n, k,
                               qmm_pb2.SCHEME_W2A8)])
            # autobitlinear: the scales multiply.
            w_up = t_up * np.float64(up_scale[0])
            w_q = t_q * np.float64(q_scale)
            ternary_close_to(self, self.client.matmul("py.bn.model.layers.0.mlp.up_proj", x),
                             x, w_up)
            ternary_close_to(self, self.client.matmul("py.bn.model.layers.0.self_attn.q_proj",
                                                      x), x, w_q)
            info, = self.client.upload_checkpoint(d, "py.bn.one",
                                                  layer="model.layers.0.self_attn.q_proj")
            self.assertEqual(info.name, "py.bn.one")
            ternary_close_to(self, self.client.matmul("py.bn.one", x), x, w_q)
            with self.assertRaisesRegex(ValueError, "no layer 'model.norm' in its 1 .safetensors"):
                self.client.upload_checkpoint(d, layer="model.norm")
            # bitlinear (and no linear_class, no quantization_mode): the scales divide.
            write_config(d, {"quant_method": "BitNet", "linear_class": "bitlinear"})
            self.client.upload_checkpoint(d, "py.bn.div", layer="model.layers.0.mlp.up_proj")
            write_config(d, {"quant_method": "bitnet", "use_rms_norm": False})
            self.client.upload_checkpoint(d, "py.bn.plain", layer="model.layers.0.mlp.up_proj")
            for name in ("py.bn.div", "py.bn.plain"):
                ternary_close_to(self, self.client.matmul(name, x), x,
                                 t_up / np.float64(up_scale[0]))
            before = [w.name for w in self.client.list_weights()]
            for key, value, why in (
                    ("linear_class", "foo", r'linear_class = "foo": BitNet layers are taken'),
                    ("quantization_mode", "online",
                     r'quantization_mode = "online": only "offline" BitNet'),
                    ("use_rms_norm", True, r"use_rms_norm = true: each layer would normalize")):
                write_config(d, dict(config, **{key: value}))
                with self.assertRaisesRegex(ValueError, "config.json: " + why):
                    self.client.upload_checkpoint(d, prefix="py.bad.")
            self.assertEqual([w.name for w in self.client.list_weights()], before)
        with tempfile.TemporaryDirectory() as d:
            # No uint8 weight: nothing to upload.
            write_config(d, config)
            write_safetensors(os.path.join(d, "model.safetensors"),
                              {"l.weight": ("F32", np.ones((4, 128), np.float32))})
            with self.assertRaisesRegex(ValueError, "no 2-D U8 tensor LAYER.weight in its 1"):
                self.client.upload_checkpoint(d, prefix="py.bad.")
        with tempfile.TemporaryDirectory() as d:
            # A scale qmm cannot take is refused, never taken for no scale at all.
            write_config(d, config)
            write_safetensors(os.path.join(d, "model.safetensors"), {
                "l.weight": ("U8", bitnet_hf(n, k)[1]),
                "l.weight_scale": ("F64", np.array([2.0]))})
            with self.assertRaisesRegex(ValueError, "weight_scale must be 1 or 32 float16 or "
                                                    "float32 values"):
                self.client.upload_checkpoint(d, prefix="py.bad.")

    def test_statistics_count_each_weights_requests(self):
        n, k = 32, 128
        payload, _ = w8a16_packed(n, k)
        self.client.upload_packed("py.stats", n, k, "w8a16", payload)
        for m in (1, 2, 3):
            self.client.matmul("py.stats", RNG.standard_normal((m, k)).astype(np.float32))
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT, None, self.client.matmul,
                           "py.stats", np.ones((1, k + 1), np.float32))
        stats = self.client.statistics("py.stats").model_stats
        self.assertEqual([s.name for s in stats], ["py.stats"])
        self.assertEqual(stats[0].inference_count, 6)  # rows
        self.assertEqual(stats[0].inference_stats.success.count, 3)
        self.assertGreater(stats[0].inference_stats.compute_infer.ns, 0)
        self.assertGreater(stats[0].last_inference, 0)
        names = [s.name for s in self.client.statistics().model_stats]
        self.assertIn("py.stats", names)
        self.assert_status(grpc.StatusCode.NOT_FOUND, "py.nope", self.client.statistics,
                           "py.nope")

    def test_weights_are_listed_and_deleted(self):
        payload, _ = w8a16_packed(16, 64)
        self.client.upload_packed("py.del", 16, 64, "w8a16", payload)
        self.assertIn("py.del", [w.name for w in self.client.list_weights()])
        self.client.delete_weight("py.del")
        self.assertNotIn("py.del", [w.name for w in self.client.list_weights()])
        self.assert_status(grpc.StatusCode.NOT_FOUND, "py.del", self.client.delete_weight,
                           "py.del")
        info = self.client.server_info()
        self.assertEqual(info.backend, "cpu")
        self.assertGreater(info.limits.max_rows, 0)

    def test_errors_name_what_is_wrong_and_change_nothing(self):
        payload, _ = w8a16_packed(16, 64)
        self.client.upload_packed("py.err", 16, 64, "w8a16", payload)
        before = [w.name for w in self.client.list_weights()]
        x = RNG.standard_normal((2, 64)).astype(np.float32)
        self.assert_status(grpc.StatusCode.NOT_FOUND, "py.nothing", self.client.matmul,
                           "py.nothing", x)
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT, "32", self.client.matmul,
                           "py.err", x[:, :32])
        self.assert_status(grpc.StatusCode.ALREADY_EXISTS, "py.err", self.client.upload_packed,
                           "py.err", 16, 64, "w8a16", payload)
        # A payload one byte short of the scheme's packed size.
        self.assert_status(grpc.StatusCode.INVALID_ARGUMENT, "total_bytes",
                           self.client.upload_packed, "py.short", 16, 64, "w8a16", payload[:-1])
        # A deadline that passes before the stream's first request is even written.
        def late():
            time.sleep(1.0)
            yield "py.err", x

        self.assert_status(grpc.StatusCode.DEADLINE_EXCEEDED, "",
                           lambda: list(self.client.matmul_stream(late(), timeout=0.2)))
        self.assertEqual([w.name for w in self.client.list_weights()], before)
        with self.assertRaisesRegex(ValueError, "w3a16"):
            self.client.upload_weight("py.bad", np.ones((4, 8), np.float32), "w3a16")
        with self.assertRaisesRegex(ValueError, "2-D"):
            self.client.upload_weight("py.bad", np.ones(8, np.float32), "w8a16")
        with self.assertRaisesRegex(ValueError, "either x or token_ids"):
            self.client.forward("py.mlp")
        with self.assertRaisesRegex(ValueError, "2-D"):
            self.client.matmul("py.err", x[0])


if __name__ == "__main__":
    unittest.main()
