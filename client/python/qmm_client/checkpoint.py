"""A Hugging Face int4 or BitNet checkpoint directory's layers, for
Client.upload_checkpoint.

The same rules as qmmctl upload --checkpoint (client/checkpoint_config.h): the settings
from config.json's "quantization_config", else quantize_config.json (AutoGPTQ,
GPTQModel), else quant_config.json (AutoAWQ); 4-bit GPTQ in the "gptq" or "gptq_v2"
format, AWQ's "gemm" version with zero points, compressed-tensors' "pack-quantized" 4-bit
integer weight-only schemes, groups of 128 or one a row; and BitNet b1.58 ("quant_method":
"bitnet", transformers' BitNetQuantConfig) stored offline ("quantization_mode" absent or
"offline"; "online" layers are float weights quantized as the model runs), without
"use_rms_norm" (which would normalize each layer's input by an RMSNorm of its own that an
uploaded weight leaves out), whose scales divide ("linear_class" absent or "bitlinear":
w = t / scale) or multiply ("autobitlinear": w = t * scale). Anything else raises
ValueError naming the file, the key and the value. The .safetensors files are those
model.safetensors.index.json names, else all of them in the directory, read through a
memory map so that a shard is never loaded whole.
"""
import json
import os

import numpy as np

# safetensors' dtypes that int4 and BitNet layers hold (BF16 scales come back as float32,
# exactly; U8: BitNet's packed ternary codes).
_DTYPES = {"I32": "<i4", "F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2", "U8": "u1"}


def read_safetensors(path):
    """{name: array} of the tensors of a .safetensors file whose dtype is I32, U8, F16,
    BF16 (as float32), F32 or F64 (which the uploads refuse by name rather than miss);
    others (I64, I8...) are left out. Arrays view a read-only memory map of the file (BF16
    ones excepted: they are converted)."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] not in _DTYPES:
            continue
        start, end = entry["data_offsets"]
        array = data[start:end].view(_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        if entry["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array
    return tensors


def _refuse(file, key, value, why):
    raise ValueError(f"{file}: {key} = {json.dumps(value)}: {why}")


def _first(settings, *keys):
    """(key, value) of the first key present and not null, or (None, None)."""
    for key in keys:
        if settings.get(key) is not None:
            return key, settings[key]
    return None, None


def _group_size(settings, file):
    key, size = _first(settings, "group_size", "q_group_size")
    if key is None:
        raise ValueError(f"{file}: no group_size")
    if size not in (128, -1) or isinstance(size, bool):
        _refuse(file, key, size, "W4A16 takes groups of 128 or -1 (one group a row)")
    return size


def _four_bits(settings, file, method):
    key, bits = _first(settings, "bits", "w_bit")
    if key is None:
        raise ValueError(f"{file}: no bits: {method} layers must be 4-bit")
    if bits != 4 or isinstance(bits, bool):
        _refuse(file, key, bits, f"only 4-bit {method} layers are taken (W4A16)")


def _bitnet(settings, file):
    """{"method": "bitnet", "scale_multiplies"} of BitNet settings, or ValueError."""
    linear_class = settings.get("linear_class")
    classes = {None: False, "bitlinear": False, "autobitlinear": True}
    key = None if linear_class is None else str(linear_class).lower()
    if key not in classes:
        _refuse(file, "linear_class", linear_class,
                'BitNet layers are taken as "bitlinear" (scales divide) or "autobitlinear" '
                "(scales multiply)")
    mode = settings.get("quantization_mode")
    if mode is not None and str(mode).lower() != "offline":
        _refuse(file, "quantization_mode", mode,
                'only "offline" BitNet checkpoints are taken: "online" layers are float '
                "weights quantized as the model runs")
    rms_norm = settings.get("use_rms_norm")
    if rms_norm is not None and rms_norm is not False:
        _refuse(file, "use_rms_norm", rms_norm,
                "each layer would normalize its input by an RMSNorm of its own first, which "
                "an uploaded weight leaves out")
    return {"method": "bitnet", "scale_multiplies": classes[key]}


def _settings(settings, file):
    """{"method": "gptq" | "awq" | "compressed-tensors" | "bitnet", "checkpoint_format",
    "sym", "scale_multiplies"} of a quantization settings object."""
    method = settings.get("quant_method")
    if method is None:  # AutoGPTQ's quantize_config.json may lack it; AutoAWQ's does
        method = "awq" if _first(settings, "w_bit", "zero_point")[0] else "gptq"
    method = str(method).lower()
    if method == "gptq":
        _four_bits(settings, file, "GPTQ")
        _group_size(settings, file)
        key, fmt = _first(settings, "checkpoint_format", "format")
        fmt = str(fmt or "gptq").lower()
        if fmt not in ("gptq", "gptq_v2"):
            _refuse(file, key, settings[key], "GPTQ layers are taken in the gptq and gptq_v2 formats")
        return {"method": method, "checkpoint_format": fmt, "sym": settings.get("sym", True)}
    if method == "awq":
        _four_bits(settings, file, "AWQ")
        _group_size(settings, file)
        if str(settings.get("version") or "gemm").lower() != "gemm":
            _refuse(file, "version", settings["version"],
                    "only the gemm version's layout is taken")
        if settings.get("zero_point", True) is False:
            _refuse(file, "zero_point", False, "AWQ layers without zero points are not taken")
        return {"method": method}
    if method == "compressed-tensors":
        groups = settings.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise ValueError(f"{file}: compressed-tensors settings without config_groups")
        for name, group in groups.items():
            prefix = f"config_groups.{name}."
            fmt = group.get("format") or settings.get("format")
            if str(fmt).lower() != "pack-quantized":
                raise ValueError(f"{file}: {prefix}format = {fmt}: only the pack-quantized "
                                 "format is taken")
            if group.get("input_activations") is not None:
                _refuse(file, prefix + "input_activations", group["input_activations"],
                        "activation quantization is not taken (W4A16 keeps activations in 16 "
                        "bits)")
            weights = group.get("weights") or {}
            if weights.get("num_bits") != 4 or str(weights.get("type", "int")) != "int":
                raise ValueError(f"{file}: {prefix}weights must be 4-bit integers")
            strategy = weights.get("strategy")
            if strategy == "group" and weights.get("group_size") != 128:
                raise ValueError(f"{file}: {prefix}weights.group_size must be 128")
            if strategy not in ("group", "channel"):
                raise ValueError(f"{file}: {prefix}weights.strategy = {strategy}: W4A16 takes "
                                 "the group (of 128) and channel strategies")
        return {"method": method}
    if method == "bitnet":
        return _bitnet(settings, file)
    _refuse(file, "quant_method", settings.get("quant_method"),
            "the checkpoints taken are gptq, awq and compressed-tensors (int4) and bitnet")


def read_settings(directory):
    """The quantization settings of a checkpoint directory (see the module's doc)."""
    if not os.path.isdir(directory):
        raise ValueError(f"{directory} is not a directory")
    for name, whole in (("config.json", False), ("quantize_config.json", True),
                        ("quant_config.json", True)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            config = json.load(f)
        settings = config if whole else config.get("quantization_config")
        if isinstance(settings, dict):
            return _settings(settings, path)
    raise ValueError(f"{directory} has no quantization settings (config.json's "
                     "quantization_config, quantize_config.json or quant_config.json): not a "
                     "quantized checkpoint")


def shards(directory):
    """The checkpoint's .safetensors files, in name order."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = set(json.load(f)["weight_map"].values())
        if any(os.sep in name or "/" in name for name in names):
            raise ValueError(f"{index}: a weight_map entry is not a file name in the directory")
    else:
        names = {n for n in os.listdir(directory) if n.endswith(".safetensors")}
    if not names:
        raise ValueError(f"{directory} has no .safetensors files")
    return [os.path.join(directory, n) for n in sorted(names)]
