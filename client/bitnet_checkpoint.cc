#include "client/bitnet_checkpoint.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {

absl::StatusOr<BitnetLayerPayload> ReadBitnetLayer(const SafetensorsFile& file,
                                                   std::string_view layer_name) {
  std::string layer(layer_name);
  for (std::string_view suffix : {".weight_scale", ".weight"}) {
    if (layer.ends_with(suffix)) layer.resize(layer.size() - suffix.size());
  }
  const std::string codes_name = layer + ".weight";
  absl::StatusOr<NdArray> codes = file.Read(codes_name, 2, {ElementType::kU8});
  if (!codes.ok()) return codes.status();
  BitnetLayerPayload out;
  out.n = 4 * codes->shape[0];
  out.k = codes->shape[1];
  out.bytes = std::move(codes->data);

  const std::string scale_name = layer + ".weight_scale";
  if (!file.Has(scale_name)) return out;
  absl::StatusOr<NdArray> scale = file.Read(scale_name);
  if (!scale.ok()) return scale.status();
  const std::optional<DType> dtype = ToWireDType(scale->type);
  const int64_t count = scale->NumElements();
  if (!dtype || scale->shape.size() > 1 || (count != 1 && count != out.n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", scale_name, "' is ", std::string(ElementTypeName(scale->type)), " ",
        ShapeText(scale->shape), "; expected one f16, bf16 or f32 value, or ", out.n,
        " (one a row of the ", out.n, " that '", codes_name, "' packs four to a byte)"));
  }
  out.scale_dtype = *dtype;
  out.bytes.insert(out.bytes.end(), scale->data.begin(), scale->data.end());
  return out;
}

std::vector<std::string> BitnetLayers(const SafetensorsFile& file) {
  std::vector<std::string> layers;
  for (const SafetensorsEntry& entry : file.header().tensors) {
    if (entry.name.ends_with(".weight") && entry.type == ElementType::kU8 &&
        entry.shape.size() == 2) {
      layers.push_back(entry.name.substr(0, entry.name.size() - 7));
    }
  }
  return layers;
}

}  // namespace qmm
