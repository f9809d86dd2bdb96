"""qmm_client.Client: qmm's API from Python, with NumPy arrays for tensors.

Errors the server returns arrive as grpc.RpcError (its code() and details() carry the
status the server chose: INVALID_ARGUMENT naming the field and the limit, NOT_FOUND, and
so on); arguments this module can tell are wrong before sending raise ValueError.
"""
import hashlib

import grpc
import numpy as np

from qmm.v1 import qmm_pb2
from qmm.v1 import qmm_pb2_grpc
from qmm_client import checkpoint
from qmm_client.tensors import dtype_value, from_tensor, to_tensor

SCHEMES = {
    "fp16": qmm_pb2.SCHEME_FP16,
    "bf16": qmm_pb2.SCHEME_BF16,
    "w8a16": qmm_pb2.SCHEME_W8A16,
    "w4a16": qmm_pb2.SCHEME_W4A16,
    "w2a8": qmm_pb2.SCHEME_W2A8,
}

# The largest upload chunk the protocol allows (UploadWeightRequest.chunk).
CHUNK_BYTES = 1 << 20
# Requests' and replies' size limit on the channel: the server's default limit
# (qmm-server --max_message_bytes) rather than gRPC's 4 MiB.
MAX_MESSAGE_BYTES = 64 << 20


def _scheme_value(scheme):
    if isinstance(scheme, str):
        if scheme.lower() not in SCHEMES:
            raise ValueError(f"scheme {scheme!r} is not one of {sorted(SCHEMES)}")
        return SCHEMES[scheme.lower()]
    return scheme


def _int32_matrix(a, what):
    a = np.asarray(a)
    if a.ndim != 2 or a.dtype.kind not in "iu" or a.dtype.itemsize != 4:
        raise ValueError(f"{what} must be a 2-D int32 array, got {a.dtype} {a.shape}")
    return np.ascontiguousarray(a, "<i4" if a.dtype.kind == "i" else "<u4")


def _scales(a, what):
    """A checkpoint's scales as little-endian bytes' array and their wire dtype."""
    a = np.asarray(a)
    if a.ndim != 2 or a.dtype not in (np.float16, np.float32):
        raise ValueError(f"{what} must be a 2-D float16 or float32 array, got {a.dtype} "
                         f"{a.shape}")
    if a.dtype == np.float16:
        return np.ascontiguousarray(a, "<f2"), qmm_pb2.DTYPE_FP16
    return np.ascontiguousarray(a, "<f4"), qmm_pb2.DTYPE_FP32


def _zeros_and_scales(qzeros, scales, n, qweight_shape):
    """GPTQ's and AWQ's qzeros (int32 [G, N/8]) and scales ([G, N]) checked against N:
    (qzeros, scales, the scales' wire dtype)."""
    scales, scale_dtype = _scales(scales, "scales")
    if scales.shape[1] != n:
        raise ValueError(f"scales is {scales.shape}, expected [G, {n}] for qweight "
                         f"{qweight_shape}")
    qzeros = _int32_matrix(qzeros, "qzeros")
    if qzeros.shape != (scales.shape[0], n // 8) or n % 8:
        raise ValueError(f"qzeros is {qzeros.shape}, expected {(scales.shape[0], n // 8)} "
                         f"(N = {n} must be a multiple of 8)")
    return qzeros, scales, scale_dtype


def _group_index(a, what, k):
    a = np.asarray(a)
    if a.shape != (k,) or a.dtype.kind not in "iu":
        raise ValueError(f"{what} must be an integer array of shape ({k},), got {a.dtype} "
                         f"{a.shape}")
    return np.ascontiguousarray(a, "<i4")


def _in_act_order(g_idx, k, groups):
    """Whether a group index scatters the groups (desc_act, actorder "group"): the layer
    then uploads with act_order, the server storing its columns sorted by group."""
    return g_idx is not None and groups > 1 and bool(
        np.any(g_idx != np.arange(k, dtype=np.int64) // 128))


def _group_size(k, groups):
    """W4A16's group_size for `groups` scale groups along k: 128, or 0 for one a row."""
    if groups > 0 and k == 128 * groups:
        return 128
    if groups == 1:
        return 0
    raise ValueError(f"{groups} scale groups over K = {k} inputs: W4A16 takes groups of 128 "
                     "or one group a row")


class Client:
    """A connection to one qmm-server.

    target: "host:port". credentials: grpc.ssl_channel_credentials(...) for TLS (mutual
    TLS with a client key and certificate), or None for plaintext. timeout: the default
    deadline of each call, in seconds (None: none).
    """

    def __init__(self, target, credentials=None, timeout=None, options=()):
        channel_options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            *options,
        ]
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=channel_options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=channel_options)
        self._stub = qmm_pb2_grpc.QmmStub(self._channel)
        self._timeout = timeout

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call_timeout(self, timeout):
        return self._timeout if timeout is None else timeout

    def _unary(self, method, request, timeout):
        """`method` of the stub on `request`, with the call's deadline or the client's."""
        return method(request, timeout=self._call_timeout(timeout))

    # ---- Weights -----------------------------------------------------------------------

    def upload_weight(self, name, weight, scheme, group_size=None, zero_points=False,
                      timeout=None):
        """Uploads float values [N, K] (float32, float16, or anything NumPy turns into
        float32) for the server to quantize into `scheme` ("w8a16", "w4a16", "w2a8",
        "fp16", "bf16"). group_size: W4A16 only, 128 (the default) or 0 (one group a row).
        zero_points: W4A16 only, a zero point per group (quantized over each group's range,
        as AWQ and GPTQ with sym=False do). Returns the WeightInfo."""
        weight = np.asarray(weight)
        if weight.ndim != 2:
            raise ValueError(f"the weight must be 2-D [N, K], got shape {weight.shape}")
        if weight.dtype == np.float16:
            source_dtype, payload = qmm_pb2.DTYPE_FP16, np.ascontiguousarray(weight, "<f2")
        else:
            source_dtype, payload = qmm_pb2.DTYPE_FP32, np.ascontiguousarray(weight, "<f4")
        return self._upload(name, weight.shape, scheme, qmm_pb2.SOURCE_ENCODING_FLOAT,
                            payload.tobytes(), group_size, source_dtype, timeout, zero_points)

    def upload_packed(self, name, n, k, scheme, payload, group_size=None, encoding="packed",
                      zero_points=False, act_order=False, scale_multiplies=False, timeout=None):
        """Uploads bytes already in the scheme's canonical packed form (qmm.proto, at each
        Scheme value; zero_points: W4A16's form with zero points after the scales;
        act_order: W4A16's form in activation order, ending with the order), or for W2A8 in
        a BitNet checkpoint's packing (encoding "bitnet_hf" or "bitnet_liger", followed by
        0, 1 or N fp32 scales that divide, w = t / scale, as BitLinear's do, or with
        scale_multiplies multiply, w = t * scale, as AutoBitLinear's do). Returns the
        WeightInfo."""
        encodings = {
            "packed": qmm_pb2.SOURCE_ENCODING_PACKED,
            "bitnet_hf": qmm_pb2.SOURCE_ENCODING_BITNET_HF,
            "bitnet_liger": qmm_pb2.SOURCE_ENCODING_BITNET_LIGER,
        }
        if encoding not in encodings:
            raise ValueError(f"encoding {encoding!r} is not one of {sorted(encodings)}")
        return self._upload(name, (n, k), scheme, encodings[encoding], bytes(payload),
                            group_size, qmm_pb2.DTYPE_UNSPECIFIED, timeout, zero_points,
                            act_order, scale_multiplies)

    def upload_bitnet(self, name, weight, weight_scale=None, scale_multiplies=False,
                      timeout=None):
        """Uploads one linear layer of a Hugging Face BitNet b1.58 checkpoint as it is, as a
        W2A8 weight: its weight (uint8 [R, K], N = 4R out_features: ternary codes t + 1,
        four per byte, planar along N, bits 2i..2i+1 of byte [r][k] holding row r + i*R)
        and weight_scale (None for scale 1, or 1 (per tensor) or N float16 or float32
        values; bf16 ones, which read_safetensors returns as float32, are exact in float32).
        The scales divide, w = t / scale, as BitLinear's (linear_class "bitlinear") do; with
        scale_multiplies they multiply, w = t * scale, as AutoBitLinear's
        ("autobitlinear", microsoft/bitnet-b1.58-2B-4T) do. Returns the WeightInfo."""
        weight = np.asarray(weight)
        if weight.ndim != 2 or weight.dtype != np.uint8:
            raise ValueError(f"weight must be a 2-D uint8 array [N/4, K], got {weight.dtype} "
                             f"{weight.shape}")
        n, k = 4 * weight.shape[0], weight.shape[1]
        tensors = [np.ascontiguousarray(weight)]
        scale_dtype = qmm_pb2.DTYPE_UNSPECIFIED
        if weight_scale is not None:
            scale = np.asarray(weight_scale)
            if (scale.ndim > 1 or scale.size not in (1, n)
                    or scale.dtype not in (np.float16, np.float32)):
                raise ValueError(f"weight_scale must be 1 or {n} float16 or float32 values "
                                 f"(a 0-D or 1-D array) for weight {weight.shape}, got "
                                 f"{scale.dtype} {scale.shape}")
            scale, scale_dtype = _scales(scale.reshape(1, -1), "weight_scale")
            tensors.append(scale)
        return self._upload(name, (n, k), "w2a8", qmm_pb2.SOURCE_ENCODING_BITNET_HF,
                            b"".join(t.tobytes() for t in tensors), 0, scale_dtype, timeout,
                            scale_multiplies=scale_multiplies)

    def upload_gptq(self, name, qweight, qzeros, scales, g_idx=None, checkpoint_format="gptq",
                    sym=True, timeout=None):
        """Uploads one linear layer of a GPTQ checkpoint as it is, as a W4A16 weight: its
        qweight (int32 [K/8, N]), qzeros (int32 [G, N/8]), scales ([G, N], float16 or
        float32) and optionally g_idx (int32 [K]). G = K/128 (group_size 128) or 1
        (group_size -1, one group a row). checkpoint_format: "gptq" (AutoGPTQ's and
        transformers', zero points stored minus one) or "gptq_v2". sym: the checkpoint's
        quantize_config "sym"; False makes a weight with zero points, True needs every zero
        point to be 8. A g_idx that is not k / 128 (desc_act: activation order) uploads the
        weight in activation order. The server says which value it cannot take. Returns the
        WeightInfo."""
        encodings = {"gptq": qmm_pb2.SOURCE_ENCODING_GPTQ,
                     "gptq_v2": qmm_pb2.SOURCE_ENCODING_GPTQ_V2}
        if checkpoint_format not in encodings:
            raise ValueError(f"checkpoint_format {checkpoint_format!r} is not one of "
                             f"{sorted(encodings)}")
        qweight = _int32_matrix(qweight, "qweight")
        k, n = 8 * qweight.shape[0], qweight.shape[1]
        qzeros, scales, scale_dtype = _zeros_and_scales(qzeros, scales, n, qweight.shape)
        groups = scales.shape[0]
        tensors = [qweight, qzeros, scales]
        if g_idx is not None:
            g_idx = _group_index(g_idx, "g_idx", k)
            tensors.append(g_idx)
        return self._upload(name, (n, k), "w4a16", encodings[checkpoint_format],
                            b"".join(t.tobytes() for t in tensors), _group_size(k, groups),
                            scale_dtype, timeout, not sym, _in_act_order(g_idx, k, groups))

    def upload_awq(self, name, qweight, qzeros, scales, timeout=None):
        """Uploads one linear layer of an AWQ checkpoint (AutoAWQ's "gemm" version,
        transformers' AwqConfig) as it is, as a W4A16 weight with zero points: its qweight
        (int32 [K, N/8], columns interleaved 0, 2, 4, 6, 1, 3, 5, 7 in each word), qzeros
        (int32 [G, N/8], likewise) and scales ([G, N], float16 or float32); G = K/128 or 1.
        Returns the WeightInfo."""
        qweight = _int32_matrix(qweight, "qweight")
        k, n = qweight.shape[0], 8 * qweight.shape[1]
        qzeros, scales, scale_dtype = _zeros_and_scales(qzeros, scales, n, qweight.shape)
        groups = scales.shape[0]
        return self._upload(name, (n, k), "w4a16", qmm_pb2.SOURCE_ENCODING_AWQ,
                            b"".join(t.tobytes() for t in (qweight, qzeros, scales)),
                            _group_size(k, groups), scale_dtype, timeout, True)

    def upload_pack_quantized(self, name, weight_packed, weight_scale, weight_g_idx=None,
                              weight_zero_point=None, timeout=None):
        """Uploads one linear layer of a compressed-tensors checkpoint in its pack-quantized
        format (llm-compressor's W4A16 schemes) as it is, as a W4A16 weight: its
        weight_packed (int32 [N, K/8]), weight_scale ([N, G], float16 or float32),
        optionally weight_g_idx (int32 [K]) and, for an asymmetric layer (W4A16_ASYM),
        weight_zero_point (int32 [N/8, G]), which makes a weight with zero points;
        G = K/128 or 1. A weight_g_idx that is not k / 128 (actorder "group") uploads the
        weight in activation order. Returns the WeightInfo."""
        packed = _int32_matrix(weight_packed, "weight_packed")
        n, k = packed.shape[0], 8 * packed.shape[1]
        scales, scale_dtype = _scales(weight_scale, "weight_scale")
        if scales.shape[0] != n:
            raise ValueError(f"weight_scale is {scales.shape}, expected [{n}, G] for "
                             f"weight_packed {packed.shape}")
        tensors = [packed, scales]
        if weight_zero_point is not None:
            zeros = _int32_matrix(weight_zero_point, "weight_zero_point")
            if zeros.shape != (n // 8, scales.shape[1]) or n % 8:
                raise ValueError(f"weight_zero_point is {zeros.shape}, expected "
                                 f"{(n // 8, scales.shape[1])} (N = {n} must be a multiple "
                                 "of 8)")
            tensors.insert(1, zeros)
        if weight_g_idx is not None:
            weight_g_idx = _group_index(weight_g_idx, "weight_g_idx", k)
            tensors.append(weight_g_idx)
        groups = scales.shape[1]
        return self._upload(name, (n, k), "w4a16", qmm_pb2.SOURCE_ENCODING_PACK_QUANTIZED,
                            b"".join(t.tobytes() for t in tensors), _group_size(k, groups),
                            scale_dtype, timeout, weight_zero_point is not None,
                            _in_act_order(weight_g_idx, k, groups))

    def upload_checkpoint(self, directory, prefix="", layer=None, timeout=None):
        """Uploads every linear layer of a Hugging Face checkpoint directory quantized with
        GPTQ, AWQ or compressed-tensors (int4, W4A16) or BitNet (ternary, W2A8), as its
        settings say (qmm_client.checkpoint: which are taken), each as weight prefix + its
        layer's name; with `layer` only that one, as weight `prefix`. A BitNet checkpoint's
        layers are its 2-D uint8 tensors LAYER.weight, each with its LAYER.weight_scale if
        it has one, whose scales divide or (linear_class "autobitlinear") multiply. Returns
        the WeightInfos in the order uploaded."""
        settings = checkpoint.read_settings(directory)
        method = settings["method"]
        suffix = {"compressed-tensors": ".weight_packed",
                  "bitnet": ".weight"}.get(method, ".qweight")
        paths = checkpoint.shards(directory)
        infos = []
        for path in paths:
            tensors = checkpoint.read_safetensors(path)
            for codes in sorted(n for n in tensors if n.endswith(suffix)):
                base = codes[:-len(suffix)]
                if layer is not None and base != layer:
                    continue
                if method == "bitnet" and (tensors[codes].dtype != np.uint8
                                           or tensors[codes].ndim != 2):
                    continue  # a float tensor: an embedding, a norm, an unquantized layer

                def need(s):
                    if base + s not in tensors:
                        raise ValueError(f"{path}: layer {base!r} has no {s[1:]}")
                    return tensors[base + s]

                weight = prefix if layer is not None else prefix + base
                if method == "gptq":
                    info = self.upload_gptq(weight, need(".qweight"), need(".qzeros"),
                                            need(".scales"), tensors.get(base + ".g_idx"),
                                            settings["checkpoint_format"], settings["sym"],
                                            timeout)
                elif method == "awq":
                    info = self.upload_awq(weight, need(".qweight"), need(".qzeros"),
                                           need(".scales"), timeout)
                elif method == "bitnet":
                    info = self.upload_bitnet(weight, need(".weight"),
                                              tensors.get(base + ".weight_scale"),
                                              settings["scale_multiplies"], timeout)
                else:
                    info = self.upload_pack_quantized(
                        weight, need(".weight_packed"), need(".weight_scale"),
                        tensors.get(base + ".weight_g_idx"),
                        tensors.get(base + ".weight_zero_point"), timeout)
                infos.append(info)
        if not infos:
            tensor = "2-D U8 tensor LAYER.weight" if method == "bitnet" else f"tensor LAYER{suffix}"
            what = f"no layer {layer!r}" if layer is not None else f"no {tensor}"
            raise ValueError(f"{directory}: {what} in its {len(paths)} .safetensors files")
        return infos

    def _upload(self, name, shape, scheme, encoding, payload, group_size, source_dtype,
                timeout, zero_points=False, act_order=False, scale_multiplies=False):
        scheme = _scheme_value(scheme)
        if group_size is None:
            group_size = 128 if scheme == qmm_pb2.SCHEME_W4A16 else 0
        header = qmm_pb2.WeightHeader(
            name=name, n=shape[0], k=shape[1], scheme=scheme, group_size=group_size,
            encoding=encoding, source_dtype=source_dtype, total_bytes=len(payload),
            sha256=hashlib.sha256(payload).digest(), zero_points=zero_points,
            act_order=act_order, scale_multiplies=scale_multiplies)

        def requests():
            yield qmm_pb2.UploadWeightRequest(header=header)
            view = memoryview(payload)
            for start in range(0, len(payload), CHUNK_BYTES):
                yield qmm_pb2.UploadWeightRequest(chunk=bytes(view[start:start + CHUNK_BYTES]))

        reply = self._stub.UploadWeight(requests(), timeout=self._call_timeout(timeout))
        return reply.weight

    def get_weight(self, name, timeout=None):
        return self._unary(self._stub.GetWeight, qmm_pb2.GetWeightRequest(name=name), timeout)

    def list_weights(self, timeout=None):
        return list(self._unary(self._stub.ListWeights, qmm_pb2.ListWeightsRequest(),
                                timeout).weights)

    def delete_weight(self, name, timeout=None):
        self._unary(self._stub.DeleteWeight, qmm_pb2.DeleteWeightRequest(name=name), timeout)

    def statistics(self, name="", timeout=None):
        """The server's statistics of the weight or model `name`, or of all of them when
        empty: the Open Inference Protocol's ModelStatisticsResponse (its model_stats, one
        a weight or model: rows, launches, successes and failures with their times in the
        server, and the launches by batch size), asked on the same connection. Needs the
        generated `inference` package, which the build writes beside qmm.v1."""
        from inference import open_inference_pb2, open_inference_pb2_grpc
        stub = open_inference_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return self._unary(stub.ModelStatistics,
                           open_inference_pb2.ModelStatisticsRequest(name=name), timeout)

    def server_info(self, timeout=None):
        return self._unary(self._stub.ServerInfo, qmm_pb2.ServerInfoRequest(), timeout)

    # ---- MatMul ------------------------------------------------------------------------

    @staticmethod
    def _matmul_request(weight, x, dtype=None, output_dtype=None):
        return qmm_pb2.MatMulRequest(weight=weight, input=to_tensor(x, dtype),
                                     output_dtype=dtype_value(output_dtype))

    def matmul(self, weight, x, dtype=None, output_dtype=None, timeout=None):
        """y = x W^T for x [M, K] against the weight named `weight`: an array [M, N].
        dtype: the activations' type on the wire ("fp32", "fp16", "bf16"; by default fp16
        for float16 arrays, else fp32); output_dtype: the result's (default: dtype's).
        Results come back as float32 (fp32, bf16) or float16 (fp16) arrays."""
        reply = self._unary(self._stub.MatMul,
                            self._matmul_request(weight, x, dtype, output_dtype), timeout)
        return from_tensor(reply.output)

    def matmul_stream(self, calls, timeout=None):
        """One MatMulStream for many products: `calls` yields (weight, x) pairs, or
        (weight, x, dtype, output_dtype); the results come back in the same order, as they
        arrive. The stream's deadline is `timeout` for the whole of it."""

        def requests():
            for weight, x, *types in calls:
                if len(types) > 2:
                    raise ValueError("a stream call is (weight, x[, dtype[, output_dtype]])")
                yield self._matmul_request(weight, x, *types)

        for reply in self._stub.MatMulStream(requests(), timeout=self._call_timeout(timeout)):
            yield from_tensor(reply.output)

    # ---- Models ------------------------------------------------------------------------

    def create_model(self, name, layers, timeout=None):
        """Registers a chain of layers (qmm_pb2.Layer messages; see linear() and friends in
        qmm_client.layers) over uploaded weights. Returns the ModelInfo."""
        request = qmm_pb2.CreateModelRequest(name=name, layers=list(layers))
        return self._unary(self._stub.CreateModel, request, timeout)

    def get_model(self, name, timeout=None):
        return self._unary(self._stub.GetModel, qmm_pb2.GetModelRequest(name=name), timeout)

    def list_models(self, timeout=None):
        return list(self._unary(self._stub.ListModels, qmm_pb2.ListModelsRequest(),
                                timeout).models)

    def delete_model(self, name, timeout=None):
        self._unary(self._stub.DeleteModel, qmm_pb2.DeleteModelRequest(name=name), timeout)

    def forward(self, model, x=None, token_ids=None, dtype=None, output_dtype=None,
                timeout=None):
        """Runs x [M, in_features] (or, for a model that starts with an embedding, M
        token ids) through the model: an array [M, out_features]."""
        if (x is None) == (token_ids is None):
            raise ValueError("forward takes either x or token_ids")
        request = qmm_pb2.ForwardRequest(model=model, output_dtype=dtype_value(output_dtype))
        if x is not None:
            request.input.CopyFrom(to_tensor(x, dtype))
        else:
            request.token_ids.extend(int(t) for t in np.asarray(token_ids).ravel())
        reply = self._unary(self._stub.Forward, request, timeout)
        return from_tensor(reply.output)
