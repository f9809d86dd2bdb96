#include "client/checkpoint_config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/file_io.h"
#include "nlohmann/json.hpp"

namespace qmm {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& file, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", problem));
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The settings' keys, read with their type checked; `keys` lists a key's other names, the
// first present one taken.
class Settings {
 public:
  Settings(const Json& object, std::string file, std::string prefix = "")
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  absl::StatusOr<std::optional<int64_t>> Int(std::initializer_list<const char*> keys) const {
    const char* key = Find(keys);
    if (key == nullptr) return std::nullopt;
    const Json& v = object_.at(key);
    if (!v.is_number_integer())
      return Bad(file_, absl::StrCat(prefix_, key, " must be an integer"));
    return v.get<int64_t>();
  }
  absl::StatusOr<std::optional<bool>> Bool(const char* key) const {
    if (Find({key}) == nullptr) return std::nullopt;
    const Json& v = object_.at(key);
    if (!v.is_boolean()) return Bad(file_, absl::StrCat(prefix_, key, " must be true or false"));
    return v.get<bool>();
  }
  // Lower-cased; nullopt where absent or null.
  absl::StatusOr<std::optional<std::string>> String(std::initializer_list<const char*> keys) const {
    const char* key = Find(keys);
    if (key == nullptr) return std::nullopt;
    const Json& v = object_.at(key);
    if (!v.is_string()) return Bad(file_, absl::StrCat(prefix_, key, " must be a string"));
    return Lower(v.get<std::string>());
  }
  // An error naming the key and its value.
  absl::Status Refuse(const char* key, absl::string_view why) const {
    return Bad(file_, absl::StrCat(prefix_, key, " = ", object_.at(key).dump(), ": ", why));
  }
  const char* Find(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (object_.contains(key) && !object_.at(key).is_null()) return key;
    }
    return nullptr;
  }
  const Json& object() const { return object_; }
  const std::string& file() const { return file_; }

 private:
  const Json& object_;
  std::string file_;
  std::string prefix_;
};

// bits (or w_bit) must be 4.
absl::Status CheckFourBits(const Settings& s, const char* method) {
  absl::StatusOr<std::optional<int64_t>> bits = s.Int({"bits", "w_bit"});
  if (!bits.ok()) return bits.status();
  if (!*bits) return Bad(s.file(), absl::StrCat("no bits: ", method, " layers must be 4-bit"));
  if (**bits != 4) {
    return s.Refuse(s.Find({"bits", "w_bit"}),
                    absl::StrCat("only 4-bit ", method, " layers are taken (W4A16)"));
  }
  return absl::OkStatus();
}

// group_size (or q_group_size): 128, or -1 for one group a row (W4A16's 0).
absl::StatusOr<int32_t> GroupSize(const Settings& s) {
  absl::StatusOr<std::optional<int64_t>> size = s.Int({"group_size", "q_group_size"});
  if (!size.ok()) return size.status();
  if (!*size) return Bad(s.file(), "no group_size");
  if (**size == kW4GroupSize) return kW4GroupSize;
  if (**size == -1) return 0;
  return s.Refuse(s.Find({"group_size", "q_group_size"}),
                  "W4A16 takes groups of 128 or -1 (one group a row)");
}

absl::StatusOr<CheckpointConfig> Gptq(const Settings& s) {
  CheckpointConfig c;
  if (absl::Status status = CheckFourBits(s, "GPTQ"); !status.ok()) return status;
  absl::StatusOr<int32_t> group_size = GroupSize(s);
  if (!group_size.ok()) return group_size.status();
  c.group_size = *group_size;
  absl::StatusOr<std::optional<bool>> sym = s.Bool("sym");
  if (!sym.ok()) return sym.status();
  c.zero_points = !sym->value_or(true);
  absl::StatusOr<std::optional<std::string>> format = s.String({"checkpoint_format", "format"});
  if (!format.ok()) return format.status();
  const std::string name = format->value_or("gptq");
  if (name == "gptq") {
    c.format = Int4Checkpoint::kGptq;
  } else if (name == "gptq_v2") {
    c.format = Int4Checkpoint::kGptqV2;
  } else {
    return s.Refuse(s.Find({"checkpoint_format", "format"}),
                    "GPTQ layers are taken in the gptq and gptq_v2 formats");
  }
  absl::StatusOr<std::optional<bool>> desc_act = s.Bool("desc_act");
  if (!desc_act.ok()) return desc_act.status();
  c.description = absl::StrCat("GPTQ (", name, ", sym=", sym->value_or(true) ? "True" : "False",
                               ", group_size ", *group_size == 0 ? -1 : *group_size,
                               desc_act->value_or(false) ? ", desc_act" : "", ")");
  return c;
}

absl::StatusOr<CheckpointConfig> Awq(const Settings& s) {
  CheckpointConfig c;
  c.format = Int4Checkpoint::kAwq;
  c.zero_points = true;
  if (absl::Status status = CheckFourBits(s, "AWQ"); !status.ok()) return status;
  absl::StatusOr<int32_t> group_size = GroupSize(s);
  if (!group_size.ok()) return group_size.status();
  c.group_size = *group_size;
  absl::StatusOr<std::optional<std::string>> version = s.String({"version"});
  if (!version.ok()) return version.status();
  if (version->value_or("gemm") != "gemm") {
    return s.Refuse("version",
                    "only the gemm version's layout is taken (GEMV and the kernel-"
                    "specific versions pack qweight otherwise)");
  }
  absl::StatusOr<std::optional<bool>> zero_point = s.Bool("zero_point");
  if (!zero_point.ok()) return zero_point.status();
  if (!zero_point->value_or(true)) {
    return s.Refuse("zero_point", "AWQ layers without zero points are not taken");
  }
  c.description = absl::StrCat("AWQ (gemm, group_size ", *group_size == 0 ? -1 : *group_size, ")");
  return c;
}

// compressed-tensors: every config group a 4-bit integer weight-only scheme in the
// pack-quantized format.
absl::StatusOr<CheckpointConfig> CompressedTensors(const Settings& s) {
  CheckpointConfig c;
  c.format = Int4Checkpoint::kPackQuantized;
  absl::StatusOr<std::optional<std::string>> top_format = s.String({"format"});
  if (!top_format.ok()) return top_format.status();
  if (!s.object().contains("config_groups") || !s.object().at("config_groups").is_object() ||
      s.object().at("config_groups").empty()) {
    return Bad(s.file(), "compressed-tensors settings without config_groups");
  }
  std::vector<std::string> schemes;
  for (const auto& [name, group] : s.object().at("config_groups").items()) {
    const std::string prefix = absl::StrCat("config_groups.", name, ".");
    if (!group.is_object()) return Bad(s.file(), absl::StrCat(prefix, " must be an object"));
    const Settings g(group, s.file(), prefix);
    absl::StatusOr<std::optional<std::string>> format = g.String({"format"});
    if (!format.ok()) return format.status();
    const std::optional<std::string> used = *format ? *format : *top_format;
    if (used != "pack-quantized") {
      return Bad(s.file(), absl::StrCat(prefix, "format = ", used.value_or("none"),
                                        ": only the pack-quantized format is taken"));
    }
    if (g.Find({"input_activations"}) != nullptr) {
      return g.Refuse("input_activations",
                      "activation quantization is not taken (W4A16 keeps activations in 16 bits)");
    }
    if (!group.contains("weights") || !group.at("weights").is_object()) {
      return Bad(s.file(), absl::StrCat(prefix, "weights must be an object"));
    }
    const Settings w(group.at("weights"), s.file(), prefix + "weights.");
    absl::StatusOr<std::optional<int64_t>> bits = w.Int({"num_bits"});
    if (!bits.ok()) return bits.status();
    if (*bits != 4) return Bad(s.file(), absl::StrCat(prefix, "weights.num_bits must be 4"));
    absl::StatusOr<std::optional<std::string>> type = w.String({"type"});
    if (!type.ok()) return type.status();
    if (type->value_or("int") != "int") return w.Refuse("type", "only integer weights are taken");
    absl::StatusOr<std::optional<std::string>> strategy = w.String({"strategy"});
    if (!strategy.ok()) return strategy.status();
    if (*strategy == "group") {
      absl::StatusOr<std::optional<int64_t>> size = w.Int({"group_size"});
      if (!size.ok()) return size.status();
      if (*size != kW4GroupSize) {
        return Bad(s.file(), absl::StrCat(prefix, "weights.group_size must be 128"));
      }
    } else if (*strategy != "channel") {
      return Bad(s.file(), absl::StrCat(prefix, "weights.strategy = ", strategy->value_or("none"),
                                        ": W4A16 takes the group (of 128) and channel strategies"));
    }
    absl::StatusOr<std::optional<bool>> symmetric = w.Bool("symmetric");
    if (!symmetric.ok()) return symmetric.status();
    c.zero_points |= !symmetric->value_or(true);
    schemes.push_back(absl::StrCat(name, ": ", symmetric->value_or(true) ? "sym" : "asym", ", ",
                                   *strategy == "group" ? "group 128" : "channel"));
  }
  c.description =
      absl::StrCat("compressed-tensors pack-quantized (", absl::StrJoin(schemes, "; "), ")");
  return c;
}

// transformers' BitNet (BitNetQuantConfig): the BitLinear layers stored packed ("offline").
absl::StatusOr<CheckpointConfig> Bitnet(const Settings& s) {
  CheckpointConfig c;
  absl::StatusOr<std::optional<std::string>> linear = s.String({"linear_class"});
  if (!linear.ok()) return linear.status();
  const std::string linear_class = linear->value_or("bitlinear");
  if (linear_class == "bitlinear") {
    c.bitnet = BitnetScale::kDivides;
  } else if (linear_class == "autobitlinear") {
    c.bitnet = BitnetScale::kMultiplies;
  } else {
    return s.Refuse("linear_class", "transformers' BitNet layers are bitlinear or autobitlinear");
  }
  absl::StatusOr<std::optional<std::string>> mode = s.String({"quantization_mode"});
  if (!mode.ok()) return mode.status();
  if (mode->value_or("offline") != "offline") {
    return s.Refuse("quantization_mode",
                    "only offline checkpoints are taken (online ones hold float weights that "
                    "the model quantizes as it runs)");
  }
  absl::StatusOr<std::optional<bool>> norm = s.Bool("use_rms_norm");
  if (!norm.ok()) return norm.status();
  if (norm->value_or(false)) {
    return s.Refuse("use_rms_norm",
                    "each layer normalizes its input by an RMSNorm of its own first, which "
                    "its weight alone leaves out");
  }
  c.description = absl::StrCat("BitNet b1.58 (", linear_class, ": the weight scale ",
                               linear_class == "bitlinear" ? "divides" : "multiplies", ")");
  return c;
}

absl::StatusOr<Json> ParseJson(std::string_view text, const std::string& file) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(file, "is not JSON");
  if (!j.is_object()) return Bad(file, "is not a JSON object");
  return j;
}

absl::StatusOr<CheckpointConfig> ParseSettings(const Json& object, const std::string& file) {
  const Settings s(object, file);
  absl::StatusOr<std::optional<std::string>> method = s.String({"quant_method"});
  if (!method.ok()) return method.status();
  // AutoGPTQ's quantize_config.json may lack quant_method; AutoAWQ's quant_config.json does.
  std::string name = method->value_or(s.Find({"w_bit", "zero_point"}) != nullptr ? "awq" : "gptq");
  constexpr char kTaken[] =
      "the checkpoints taken are gptq, awq and compressed-tensors (int4) and bitnet (ternary)";
  absl::StatusOr<CheckpointConfig> config =
      name == "gptq"                 ? Gptq(s)
      : name == "awq"                ? Awq(s)
      : name == "compressed-tensors" ? CompressedTensors(s)
      : name == "bitnet"             ? Bitnet(s)
                         : absl::StatusOr<CheckpointConfig>(s.Refuse("quant_method", kTaken));
  if (config.ok()) config->file = file;
  return config;
}

bool IsFile(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

absl::StatusOr<std::string> ReadText(const std::filesystem::path& p) {
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadFile(p.string());
  if (!bytes.ok()) return bytes.status();
  return std::string(bytes->begin(), bytes->end());
}

}  // namespace

absl::StatusOr<CheckpointConfig> ParseQuantizationConfig(std::string_view json,
                                                         const std::string& file, bool whole_file) {
  absl::StatusOr<Json> j = ParseJson(json, file);
  if (!j.ok()) return j.status();
  if (whole_file) return ParseSettings(*j, file);
  if (!j->contains("quantization_config") || !j->at("quantization_config").is_object()) {
    return absl::NotFoundError(absl::StrCat(file, ": no quantization_config"));
  }
  return ParseSettings(j->at("quantization_config"), file);
}

absl::StatusOr<CheckpointConfig> ReadCheckpointConfig(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, " is not a directory"));
  }
  const std::filesystem::path root(dir);
  for (const auto& [name, whole] : {std::pair{"config.json", false},
                                    {"quantize_config.json", true},
                                    {"quant_config.json", true}}) {
    const std::filesystem::path path = root / name;
    if (!IsFile(path)) continue;
    absl::StatusOr<std::string> text = ReadText(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<CheckpointConfig> config = ParseQuantizationConfig(*text, path.string(), whole);
    if (config.ok() || !absl::IsNotFound(config.status())) return config;
  }
  return absl::NotFoundError(
      absl::StrCat(dir,
                   " has no quantization settings (config.json's quantization_config, "
                   "quantize_config.json or quant_config.json): not a quantized checkpoint"));
}

absl::StatusOr<std::vector<std::string>> CheckpointShards(const std::string& dir) {
  const std::filesystem::path root(dir);
  std::set<std::string> names;
  const std::filesystem::path index = root / "model.safetensors.index.json";
  if (IsFile(index)) {
    absl::StatusOr<std::string> text = ReadText(index);
    if (!text.ok()) return text.status();
    absl::StatusOr<Json> j = ParseJson(*text, index.string());
    if (!j.ok()) return j.status();
    if (!j->contains("weight_map") || !j->at("weight_map").is_object()) {
      return Bad(index.string(), "has no weight_map object");
    }
    for (const auto& [tensor, file] : j->at("weight_map").items()) {
      // A file of the directory itself, never a path out of it.
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return Bad(index.string(),
                   absl::StrCat("weight_map.", tensor, " must be a file name in the directory"));
      }
      names.insert(file.get<std::string>());
    }
  } else {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file(ec) && name.ends_with(".safetensors")) names.insert(name);
    }
    if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  }
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, " has no .safetensors files"));
  }
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((root / name).string());
  return paths;
}

}  // namespace qmm
