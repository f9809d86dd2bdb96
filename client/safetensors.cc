#include "client/safetensors.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace qmm {
namespace {

using Json = nlohmann::json;

constexpr int64_t kLengthBytes = 8;
// The reference implementation refuses headers above 100 MB; so do we, before reading.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

struct DTypeEntry {
  std::string_view name;
  ElementType type;
};

constexpr DTypeEntry kDTypes[] = {
    {"F16", ElementType::kF16}, {"BF16", ElementType::kBF16}, {"F32", ElementType::kF32},
    {"F64", ElementType::kF64}, {"I8", ElementType::kI8},     {"I16", ElementType::kI16},
    {"I32", ElementType::kI32}, {"I64", ElementType::kI64},   {"U8", ElementType::kU8},
    {"U16", ElementType::kU16}, {"U32", ElementType::kU32},   {"U64", ElementType::kU64},
};

std::optional<ElementType> DTypeFromName(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.type;
  }
  return std::nullopt;
}

std::string_view DTypeToName(ElementType type) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.type == type) return entry.name;
  }
  return "";
}

std::optional<int64_t> AsInt64(const Json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;
}

absl::Status TensorError(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors tensor '", name, "': ", what));
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Json& j,
                                            int64_t data_bytes) {
  if (!j.is_object()) return TensorError(name, "is not a JSON object");
  SafetensorsEntry entry;
  entry.name = name;

  const auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string()) return TensorError(name, "missing string 'dtype'");
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  const std::optional<ElementType> type = DTypeFromName(dtype_name);
  if (!type) {
    return TensorError(name, absl::StrCat("unsupported dtype '", dtype_name,
                                          "' (supported: F16 BF16 F32 F64 I8 I16 I32 I64 U8 U16 "
                                          "U32 U64)"));
  }
  entry.type = *type;

  const auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array()) return TensorError(name, "missing array 'shape'");
  for (const Json& dim : *shape) {
    const std::optional<int64_t> d = AsInt64(dim);
    if (!d || *d < 0) return TensorError(name, "'shape' must hold non-negative integers");
    entry.shape.push_back(*d);
  }

  const auto offsets = j.find("data_offsets");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2) {
    return TensorError(name, "missing 'data_offsets' [begin, end]");
  }
  const std::optional<int64_t> begin = AsInt64((*offsets)[0]);
  const std::optional<int64_t> end = AsInt64((*offsets)[1]);
  if (!begin || !end || *begin < 0 || *end < 0) {
    return TensorError(name, "'data_offsets' must be non-negative integers");
  }
  if (*begin > *end) {
    return TensorError(
        name, absl::StrCat("data_offsets [", *begin, ", ", *end, "] end before they begin"));
  }
  if (*end > data_bytes) {
    return TensorError(name, absl::StrCat("data_offsets [", *begin, ", ", *end,
                                          "] pass the end of the data section (", data_bytes,
                                          " bytes; the file is truncated or the header wrong)"));
  }
  entry.begin = *begin;
  entry.end = *end;

  absl::StatusOr<int64_t> count = CheckedElementCount(entry.shape, ElementSize(entry.type));
  if (!count.ok()) return TensorError(name, count.status().message());
  const int64_t expected = *count * static_cast<int64_t>(ElementSize(entry.type));
  if (entry.end - entry.begin != expected) {
    return TensorError(
        name, absl::StrCat("data_offsets [", *begin, ", ", *end, "] span ", entry.end - entry.begin,
                           " bytes but its shape of ", dtype_name, " needs ", expected));
  }
  return entry;
}

absl::Status WithPath(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json,
                                                         int64_t data_bytes) {
  const Json root = Json::parse(json.begin(), json.end(), /*cb=*/nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError("safetensors header is not valid JSON");
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError("safetensors header is not a JSON object");
  }
  SafetensorsHeader header;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return absl::InvalidArgumentError("safetensors '__metadata__' is not a JSON object");
      }
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("safetensors '__metadata__' value of '", meta_key, "' is not a string"));
        }
        header.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<SafetensorsEntry> entry = ParseEntry(key, value, data_bytes);
    if (!entry.ok()) return entry.status();
    header.tensors.push_back(*std::move(entry));
  }

  // Overlapping tensors would alias each other's bytes: a corrupt or hostile file.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors tensors '",
                                                     by_offset[i - 1]->name, "' and '",
                                                     by_offset[i]->name, "' overlap"));
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return header;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<InputFile> file = InputFile::Open(path);
  if (!file.ok()) return file.status();
  if (file->size() < kLengthBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors file is ", file->size(),
                                                   " bytes, shorter than its 8-byte header"));
  }
  absl::StatusOr<std::vector<uint8_t>> length_bytes = file->ReadAt(0, kLengthBytes);
  if (!length_bytes.ok()) return length_bytes.status();
  uint64_t header_length = 0;
  for (int i = kLengthBytes - 1; i >= 0; --i)
    header_length = (header_length << 8) | (*length_bytes)[i];
  if (header_length > static_cast<uint64_t>(kMaxHeaderBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors header length ",
                                                   header_length, " exceeds the limit of ",
                                                   kMaxHeaderBytes, " bytes"));
  }
  const int64_t header_bytes = static_cast<int64_t>(header_length);
  if (header_bytes > file->size() - kLengthBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": safetensors header length ", header_bytes, " passes the end of the file (",
        file->size() - kLengthBytes, " bytes follow the length)"));
  }
  absl::StatusOr<std::vector<uint8_t>> json = file->ReadAt(kLengthBytes, header_bytes);
  if (!json.ok()) return json.status();
  const int64_t data_start = kLengthBytes + header_bytes;
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(
      std::string_view(reinterpret_cast<const char*>(json->data()), json->size()),
      file->size() - data_start);
  if (!header.ok()) return WithPath(header.status(), path);
  return SafetensorsFile(*std::move(file), data_start, *std::move(header));
}

absl::StatusOr<NdArray> SafetensorsFile::Read(std::string_view name) const {
  for (const SafetensorsEntry& entry : header_.tensors) {
    if (entry.name != name) continue;
    absl::StatusOr<std::vector<uint8_t>> data =
        file_.ReadAt(data_start_ + entry.begin, entry.end - entry.begin);
    if (!data.ok()) return data.status();
    return NdArray{entry.type, entry.shape, *std::move(data)};
  }
  std::vector<std::string> names;
  for (const SafetensorsEntry& entry : header_.tensors) names.push_back(entry.name);
  return absl::NotFoundError(absl::StrCat(file_.path(), ": no tensor '", std::string(name),
                                          "'; the file has: ", absl::StrJoin(names, ", ")));
}

bool SafetensorsFile::Has(std::string_view name) const {
  for (const SafetensorsEntry& entry : header_.tensors) {
    if (entry.name == name) return true;
  }
  return false;
}

absl::StatusOr<NdArray> SafetensorsFile::Read(std::string_view name, size_t rank,
                                              std::initializer_list<ElementType> types) const {
  absl::StatusOr<NdArray> a = Read(name);
  if (!a.ok()) return a.status();
  bool type_ok = false;
  for (ElementType t : types) type_ok = type_ok || a->type == t;
  if (!type_ok || a->shape.size() != rank) {
    std::vector<std::string> names;
    for (ElementType t : types) names.emplace_back(ElementTypeName(t));
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", std::string(name), "' is ", std::string(ElementTypeName(a->type)), " ",
        ShapeText(a->shape), "; expected a ", rank, "-D tensor of ", absl::StrJoin(names, " or ")));
  }
  return a;
}

absl::StatusOr<std::vector<uint8_t>> SerializeSafetensors(
    const std::vector<std::pair<std::string, NdArray>>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string_view> names;
  int64_t offset = 0;
  for (const auto& [name, a] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is taken"));
    }
    const std::string_view dtype = DTypeToName(a.type);
    absl::StatusOr<int64_t> count = CheckedElementCount(a.shape, ElementSize(a.type));
    if (!count.ok()) return count.status();
    const int64_t bytes = *count * static_cast<int64_t>(ElementSize(a.type));
    if (static_cast<uint64_t>(bytes) != a.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has ", a.data.size(),
                                                     " bytes of data but its shape needs ", bytes));
    }
    header[name] = {{"dtype", std::string(dtype)},
                    {"shape", a.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  std::vector<uint8_t> out;
  out.reserve(kLengthBytes + json.size() + static_cast<size_t>(offset));
  for (int i = 0; i < kLengthBytes; ++i) {
    out.push_back(static_cast<uint8_t>((static_cast<uint64_t>(json.size()) >> (8 * i)) & 0xff));
  }
  out.insert(out.end(), json.begin(), json.end());
  for (const auto& [name, a] : tensors) out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, NdArray>>& tensors) {
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeSafetensors(tensors);
  if (!bytes.ok()) return WithPath(bytes.status(), path);
  return WriteFile(path, *bytes);
}

}  // namespace qmm
