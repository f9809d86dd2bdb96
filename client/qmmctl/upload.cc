// qmmctl upload: a weight from random values, a .npy or .safetensors tensor, a file of
// canonical packed bytes, or the quantized layers of a checkpoint; float values quantized
// by the server, or here with --pack_locally.
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/bitnet_checkpoint.h"
#include "client/checkpoint_config.h"
#include "client/file_io.h"
#include "client/int4_checkpoint.h"
#include "client/npy.h"
#include "client/qmmctl/commands.h"
#include "client/qmmctl/names.h"
#include "client/qmmctl/progress.h"
#include "client/random_data.h"
#include "client/safetensors.h"
#include "kernels/quantize.h"

namespace qmm::ctl {
namespace {

// What will be sent before any local packing: bytes of float values or packed bytes.
struct Payload {
  UploadSpec::Encoding encoding = UploadSpec::Encoding::kFloat;
  // kFloat: the values' dtype; the BitNet and checkpoint encodings: the scales'.
  DType dtype = DType::kF32;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<uint8_t> bytes;
  std::optional<int32_t> group_size;  // what a checkpoint's tensors say
  bool zero_points = false;           // likewise
  bool act_order = false;             // likewise (a group index that is not k / 128)
  bool scale_multiplies = false;      // a BitNet checkpoint's settings say it
};

// The upload encodings of the int4 checkpoint formats, each way.
constexpr std::pair<UploadSpec::Encoding, Int4Checkpoint> kCheckpointEncodings[] = {
    {UploadSpec::Encoding::kGptq, Int4Checkpoint::kGptq},
    {UploadSpec::Encoding::kGptqV2, Int4Checkpoint::kGptqV2},
    {UploadSpec::Encoding::kAwq, Int4Checkpoint::kAwq},
    {UploadSpec::Encoding::kPackQuantized, Int4Checkpoint::kPackQuantized}};

Int4Checkpoint CheckpointFormat(UploadSpec::Encoding e) {
  for (const auto& [encoding, format] : kCheckpointEncodings) {
    if (encoding == e) return format;
  }
  return Int4Checkpoint::kPackQuantized;  // callers pass checkpoint encodings only
}

UploadSpec::Encoding EncodingOf(Int4Checkpoint f) {
  for (const auto& [encoding, format] : kCheckpointEncodings) {
    if (format == f) return encoding;
  }
  return UploadSpec::Encoding::kPackQuantized;  // every format is in the table
}

// The tensor that makes a layer of `encoding` (a checkpoint layer's): its codes.
std::string CodesSuffix(UploadSpec::Encoding encoding) {
  if (encoding == UploadSpec::Encoding::kBitnetHf) return ".weight (uint8)";
  return encoding == UploadSpec::Encoding::kPackQuantized ? ".weight_packed" : ".qweight";
}

// The layers of `file` that `encoding` (a checkpoint layer's) reads, in the file's order of
// names: each LAYER with a tensor LAYER.qweight, LAYER.weight_packed, or (BitNet) a uint8
// LAYER.weight.
std::vector<std::string> LayersOf(const SafetensorsFile& file, UploadSpec::Encoding encoding) {
  if (encoding == UploadSpec::Encoding::kBitnetHf) return BitnetLayers(file);
  const std::string suffix = CodesSuffix(encoding);
  std::vector<std::string> layers;
  for (const SafetensorsEntry& entry : file.header().tensors) {
    if (entry.name.ends_with(suffix)) {
      layers.push_back(entry.name.substr(0, entry.name.size() - suffix.size()));
    }
  }
  return layers;
}

// A checkpoint layer's tensors as a payload of `encoding`; messages name the tensor.
absl::StatusOr<Payload> ReadLayer(const SafetensorsFile& file, std::string_view layer,
                                  UploadSpec::Encoding encoding) {
  if (encoding == UploadSpec::Encoding::kBitnetHf) {
    absl::StatusOr<BitnetLayerPayload> read = ReadBitnetLayer(file, layer);
    if (!read.ok()) return read.status();
    Payload p;
    p.encoding = encoding;
    p.dtype = read->scale_dtype;
    p.n = read->n;
    p.k = read->k;
    p.bytes = std::move(read->bytes);
    return p;
  }
  absl::StatusOr<Int4CheckpointPayload> read =
      ReadInt4Checkpoint(file, layer, CheckpointFormat(encoding));
  if (!read.ok()) return read.status();
  return Payload{encoding,
                 read->scale_dtype,
                 read->shape.n,
                 read->shape.k,
                 std::move(read->bytes),
                 read->shape.group_size,
                 read->shape.zero_points,
                 read->shape.act_order};
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  return std::vector<uint8_t>(p, p + values.size() * sizeof(float));
}

// A 2-D float array as upload bytes: f32/f16/bf16 as they are, f64 narrowed to f32.
absl::StatusOr<Payload> FromArray(NdArray array, absl::string_view what) {
  if (array.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", array.shape.size(), " dimensions; a weight is 2-D [N, K]"));
  }
  Payload p;
  p.n = array.shape[0];
  p.k = array.shape[1];
  if (std::optional<DType> wire = ToWireDType(array.type)) {
    p.dtype = *wire;
    p.bytes = std::move(array.data);
  } else if (array.type == ElementType::kF64) {
    p.bytes = FloatBytes(ToFloats(array));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " holds ", std::string(ElementTypeName(array.type)),
        "; a weight must be floating point (f16, bf16, f32, f64); use --packed for packed bytes"));
  }
  return p;
}

absl::StatusOr<Payload> LoadPayload(const UploadOptions& o) {
  switch (o.source) {
    case UploadOptions::Source::kRandom: {
      if (o.n <= 0 || o.k <= 0) {
        return absl::InvalidArgumentError("--random needs --n and --k (both at least 1)");
      }
      // Only a guard against allocating absurd amounts here; the server checks the shape.
      if (o.n > kMaxDim || o.k > kMaxDim || o.n * o.k > kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat("--n and --k must be at most ", kMaxDim,
                                                       " and n * k at most ", kMaxElements));
      }
      return Payload{UploadSpec::Encoding::kFloat,
                     DType::kF32,
                     o.n,
                     o.k,
                     FloatBytes(RandomWeightValues(o.n, o.k, o.seed)),
                     std::nullopt,
                     false};
    }
    case UploadOptions::Source::kNpy: {
      absl::StatusOr<NdArray> array = ReadNpy(o.path);
      if (!array.ok()) return array.status();
      return FromArray(*std::move(array), o.path);
    }
    case UploadOptions::Source::kSafetensors: {
      absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(o.path);
      if (!file.ok()) return file.status();
      if (IsCheckpointLayer(o.encoding)) {
        absl::StatusOr<Payload> layer = ReadLayer(*file, o.tensor, o.encoding);
        if (!layer.ok()) {
          return absl::Status(layer.status().code(),
                              absl::StrCat(o.path, ": ", layer.status().message()));
        }
        return layer;
      }
      absl::StatusOr<NdArray> array = file->Read(o.tensor);
      if (!array.ok()) return array.status();
      return FromArray(*std::move(array), absl::StrCat(o.path, ": tensor '", o.tensor, "'"));
    }
    case UploadOptions::Source::kPacked: {
      if (o.n <= 0 || o.k <= 0) {
        return absl::InvalidArgumentError("--packed needs --n and --k (both at least 1)");
      }
      absl::StatusOr<std::vector<uint8_t>> bytes = ReadFile(o.path);
      if (!bytes.ok()) return bytes.status();
      const DType default_scales =
          IsInt4Checkpoint(o.encoding) ? DType::kF16 : DType::kF32;  // as the server's
      return Payload{o.encoding,
                     o.scale_dtype.value_or(default_scales),
                     o.n,
                     o.k,
                     *std::move(bytes),
                     std::nullopt,
                     false};
    }
    case UploadOptions::Source::kCheckpoint:
      break;  // many layers: UploadCheckpoint reads them
  }
  return absl::InvalidArgumentError("unknown upload source");
}

// What the payload held, for the summary line.
std::string PayloadLabel(const UploadSpec& spec) {
  switch (spec.encoding) {
    case UploadSpec::Encoding::kFloat:
      return std::string(DTypeName(spec.source_dtype));
    case UploadSpec::Encoding::kPacked:
      return "packed";
    case UploadSpec::Encoding::kBitnetHf:
      return "BitNet (Hugging Face)";
    case UploadSpec::Encoding::kBitnetLiger:
      return "BitNet (Liger-Kernel)";
    case UploadSpec::Encoding::kGptq:
      return "GPTQ";
    case UploadSpec::Encoding::kGptqV2:
      return "GPTQ (v2)";
    case UploadSpec::Encoding::kPackQuantized:
      return "compressed-tensors pack-quantized";
    case UploadSpec::Encoding::kAwq:
      return "AWQ";
  }
  return "";
}

// Uploads `payload` as weight `name` and prints what the server holds.
absl::Status Send(Client& client, const UploadOptions& o, const std::string& name,
                  Payload payload) {
  // A shape read from a file must be the one the flags name, when they name one.
  if (o.source != UploadOptions::Source::kRandom && o.source != UploadOptions::Source::kPacked) {
    if ((o.n > 0 && o.n != payload.n) || (o.k > 0 && o.k != payload.k)) {
      return absl::InvalidArgumentError(absl::StrCat("the tensor is [", payload.n, ", ", payload.k,
                                                     "], not --n=", o.n, " --k=", o.k));
    }
  }
  if (payload.group_size && o.group_size && *o.group_size != *payload.group_size) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint's group size is ",
                                                   *payload.group_size,
                                                   ", not --group_size=", *o.group_size));
  }

  UploadSpec spec;
  spec.name = name;
  spec.scheme = o.scheme;
  spec.shape = {payload.n, payload.k,
                o.group_size.value_or(
                    payload.group_size.value_or(o.scheme == Scheme::kW4A16 ? kW4GroupSize : 0)),
                o.zero_points || payload.zero_points, o.act_order || payload.act_order};
  spec.encoding = payload.encoding;
  spec.source_dtype = payload.dtype;
  spec.scale_multiplies = o.scale_multiplies || payload.scale_multiplies;
  std::vector<uint8_t> bytes = std::move(payload.bytes);
  if (o.pack_locally) {
    absl::StatusOr<std::vector<uint8_t>> packed =
        QuantizeWeight(spec.scheme, spec.shape, spec.source_dtype, bytes);
    if (!packed.ok()) return packed.status();
    bytes = *std::move(packed);
    spec.encoding = UploadSpec::Encoding::kPacked;
  }

  UploadProgress progress;
  if (static_cast<int64_t>(bytes.size()) > kProgressThresholdBytes) {
    progress = MakeProgressPrinter(name, stderr);
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::WeightInfo> info = client.Upload(spec, bytes, progress);
  if (!info.ok()) return info.status();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double mib = static_cast<double>(bytes.size()) / (1 << 20);
  std::printf(
      "uploaded %s: scheme=%s n=%lld k=%lld group_size=%d%s%s packed_bytes=%lld "
      "device_bytes=%lld (%.1f MiB %s%s payload in %.2f s, %.0f MiB/s)\n",
      info->name().c_str(), ProtoSchemeName(info->scheme()).c_str(),
      static_cast<long long>(info->n()), static_cast<long long>(info->k()), info->group_size(),
      info->zero_points() ? " zero_points" : "", info->act_order() ? " act_order" : "",
      static_cast<long long>(info->packed_bytes()), static_cast<long long>(info->device_bytes()),
      mib, PayloadLabel(spec).c_str(), spec.scale_multiplies ? ", scales multiplying" : "", seconds,
      seconds > 0 ? mib / seconds : 0.0);
  return absl::OkStatus();
}

// Without --tensor: every layer of the checkpoint file, as weight --name + LAYER.
absl::Status UploadEveryLayer(Client& client, const UploadOptions& o) {
  if (o.n > 0 || o.k > 0 || o.group_size) {
    return absl::InvalidArgumentError(
        "--n, --k and --group_size describe one tensor; without --tensor every layer of the "
        "checkpoint is uploaded with its own");
  }
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(o.path);
  if (!file.ok()) return file.status();
  const std::vector<std::string> layers = LayersOf(*file, o.encoding);
  if (layers.empty()) {
    return absl::NotFoundError(absl::StrCat(o.path, ": no tensor named LAYER",
                                            CodesSuffix(o.encoding),
                                            ", so no layer of that format"));
  }
  for (const std::string& layer : layers) {
    absl::StatusOr<Payload> read = ReadLayer(*file, layer, o.encoding);
    if (!read.ok()) {  // its message names the layer's tensor
      return absl::Status(read.status().code(),
                          absl::StrCat(o.path, ": ", read.status().message()));
    }
    const absl::Status status = Send(client, o, o.name + layer, *std::move(read));
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat(o.path, ": layer '", layer, "': ", status.message()));
    }
  }
  std::printf("uploaded %zu layers of %s\n", layers.size(), o.path.c_str());
  return absl::OkStatus();
}

// --checkpoint: every quantized layer of every .safetensors file of the directory (or the
// one --tensor names), as its quantization settings say, each as weight --name + LAYER (or
// --name for --tensor's).
absl::Status UploadCheckpoint(Client& client, const UploadOptions& flags) {
  absl::StatusOr<CheckpointConfig> config = ReadCheckpointConfig(flags.path);
  if (!config.ok()) return config.status();
  UploadOptions o = flags;
  o.scheme = config->bitnet ? Scheme::kW2A8 : Scheme::kW4A16;
  if (flags.checkpoint_scheme && *flags.checkpoint_scheme != o.scheme) {
    return absl::InvalidArgumentError(
        absl::StrCat(config->file, " makes the layers ",
                     absl::AsciiStrToLower(std::string(SchemeName(o.scheme))), ", not --scheme=",
                     absl::AsciiStrToLower(std::string(SchemeName(*flags.checkpoint_scheme)))));
  }
  const UploadSpec::Encoding encoding =
      config->bitnet ? UploadSpec::Encoding::kBitnetHf : EncodingOf(config->format);
  absl::StatusOr<std::vector<std::string>> shards = CheckpointShards(o.path);
  if (!shards.ok()) return shards.status();
  std::printf("%s: %s\n", config->file.c_str(), config->description.c_str());
  int64_t uploaded = 0;
  for (const std::string& shard : *shards) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(shard);
    if (!file.ok()) return file.status();
    for (const std::string& layer : LayersOf(*file, encoding)) {
      if (!o.tensor.empty() && layer != o.tensor) continue;
      absl::StatusOr<Payload> read = ReadLayer(*file, layer, encoding);
      if (!read.ok()) {
        return absl::Status(read.status().code(),
                            absl::StrCat(shard, ": ", read.status().message()));
      }
      if (config->group_size && *config->group_size != read->group_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard, ": layer '", layer, "' has groups of ",
            read->group_size == 0 ? read->k : *read->group_size, ", not the ",
            *config->group_size == 0 ? "one a row" : "128", " that ", config->file, " says"));
      }
      // GPTQ's tensors do not say whether it is symmetric, nor BitNet's what their scales
      // do; the settings do.
      if (config->bitnet) {
        read->scale_multiplies = *config->bitnet == BitnetScale::kMultiplies;
      } else if (config->format != Int4Checkpoint::kPackQuantized) {
        read->zero_points = config->zero_points;
      }
      const std::string name = o.tensor.empty() ? o.name + layer : o.name;
      const absl::Status status = Send(client, o, name, *std::move(read));
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat(shard, ": layer '", layer, "': ", status.message()));
      }
      ++uploaded;
    }
  }
  if (uploaded == 0) {
    return absl::NotFoundError(
        absl::StrCat(o.path, ": ",
                     o.tensor.empty() ? absl::StrCat("no tensor named LAYER", CodesSuffix(encoding))
                                      : absl::StrCat("no layer '", o.tensor, "'"),
                     " in its ", shards->size(), " .safetensors files"));
  }
  std::printf("uploaded %lld layers of %s\n", static_cast<long long>(uploaded), o.path.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunUpload(Client& client, const UploadOptions& o) {
  if (o.source == UploadOptions::Source::kCheckpoint) return UploadCheckpoint(client, o);
  if (o.pack_locally &&
      (o.source == UploadOptions::Source::kPacked || IsCheckpointLayer(o.encoding))) {
    return absl::InvalidArgumentError(
        "--pack_locally takes float values, not --packed bytes or a checkpoint's quantized "
        "tensors");
  }
  if (o.source == UploadOptions::Source::kSafetensors && IsCheckpointLayer(o.encoding) &&
      o.tensor.empty()) {
    return UploadEveryLayer(client, o);  // --name, if any, prefixes each layer's name
  }
  if (o.name.empty()) return absl::InvalidArgumentError("upload needs --name");
  absl::StatusOr<Payload> payload = LoadPayload(o);
  if (!payload.ok()) return payload.status();
  return Send(client, o, o.name, *std::move(payload));
}

}  // namespace qmm::ctl
