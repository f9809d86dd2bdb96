#include "client/int4_checkpoint.h"

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace qmm {
namespace {

// The formats of qweight, qzeros and scales (GPTQ's and AWQ's).
bool IsGptq(Int4Checkpoint format) { return format != Int4Checkpoint::kPackQuantized; }

absl::Status ShapeMismatch(const std::string& name, const NdArray& a,
                           const std::vector<int64_t>& expected) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is ", ShapeText(a.shape),
                                                 "; the layer's other tensors make it ",
                                                 ShapeText(expected)));
}

// The layer a tensor name belongs to: `name` without a known tensor suffix.
std::string LayerOf(std::string_view name) {
  for (std::string_view suffix :
       {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
        ".weight_zero_point", ".weight_g_idx", ".weight_shape"}) {
    if (name.ends_with(suffix)) return std::string(name.substr(0, name.size() - suffix.size()));
  }
  return std::string(name);
}

}  // namespace

absl::StatusOr<Int4CheckpointPayload> ReadInt4Checkpoint(const SafetensorsFile& file,
                                                         std::string_view layer_name,
                                                         Int4Checkpoint format) {
  const std::string layer = LayerOf(layer_name);
  const bool gptq = IsGptq(format);
  const bool awq = format == Int4Checkpoint::kAwq;
  const std::string codes_name = layer + (gptq ? ".qweight" : ".weight_packed");
  const std::string scales_name = layer + (gptq ? ".scales" : ".weight_scale");
  const std::string g_idx_name = layer + (gptq ? ".g_idx" : ".weight_g_idx");
  absl::StatusOr<NdArray> codes = file.Read(codes_name, 2, {ElementType::kI32});
  if (!codes.ok()) return codes.status();
  // qweight is [K/8, N] (GPTQ) or [K, N/8] (AWQ), weight_packed [N, K/8].
  Int4CheckpointPayload out;
  out.shape.n = awq ? 8 * codes->shape[1] : gptq ? codes->shape[1] : codes->shape[0];
  out.shape.k = awq ? codes->shape[0] : 8 * (gptq ? codes->shape[0] : codes->shape[1]);

  absl::StatusOr<NdArray> scales =
      file.Read(scales_name, 2, {ElementType::kF16, ElementType::kBF16, ElementType::kF32});
  if (!scales.ok()) return scales.status();
  const int64_t groups = gptq ? scales->shape[0] : scales->shape[1];
  const int64_t scale_n = gptq ? scales->shape[1] : scales->shape[0];
  if (scale_n != out.shape.n || groups <= 0) {
    return ShapeMismatch(scales_name, *scales,
                         gptq ? std::vector<int64_t>{groups, out.shape.n}
                              : std::vector<int64_t>{out.shape.n, groups});
  }
  if (out.shape.k == kW4GroupSize * groups) {
    out.shape.group_size = kW4GroupSize;
  } else if (groups == 1) {
    out.shape.group_size = 0;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", scales_name, "' holds ", groups, " groups of ", out.shape.k,
                     " inputs: a group size of ", out.shape.k / groups,
                     ", where W4A16 takes groups of 128 or one group a row (", awq ? "N" : "K",
                     " is read as 8 values an int32 of '", codes_name,
                     "': a layer of other than 4 bits reads wrong)"));
  }
  out.scale_dtype = *ToWireDType(scales->type);

  if (!gptq && file.Has(layer + ".weight_shape")) {
    absl::StatusOr<NdArray> shape =
        file.Read(layer + ".weight_shape", 1, {ElementType::kI32, ElementType::kI64});
    if (!shape.ok()) return shape.status();
    const std::vector<float> dims = ToFloats(*shape);
    if (dims.size() != 2 || dims[0] != out.shape.n || dims[1] != out.shape.k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", layer, ".weight_shape' does not say [", out.shape.n, ", ", out.shape.k,
          "], the shape that '", codes_name, "' holds at 4 bits a value"));
    }
  }

  out.bytes = std::move(codes->data);
  // GPTQ's and AWQ's qzeros [G, N/8]; compressed-tensors' weight_zero_point [N/8, G], there
  // only when the layer is asymmetric.
  const std::string zeros_name = layer + (gptq ? ".qzeros" : ".weight_zero_point");
  if (gptq || file.Has(zeros_name)) {
    absl::StatusOr<NdArray> zeros = file.Read(zeros_name, 2, {ElementType::kI32});
    if (!zeros.ok()) return zeros.status();
    const std::vector<int64_t> expected = gptq ? std::vector<int64_t>{groups, out.shape.n / 8}
                                               : std::vector<int64_t>{out.shape.n / 8, groups};
    if (out.shape.n % 8 != 0 || zeros->shape != expected) {
      return ShapeMismatch(zeros_name, *zeros, expected);
    }
    out.shape.zero_points = !gptq || awq;
    out.bytes.insert(out.bytes.end(), zeros->data.begin(), zeros->data.end());
  }
  out.bytes.insert(out.bytes.end(), scales->data.begin(), scales->data.end());
  if (!awq && file.Has(g_idx_name)) {
    absl::StatusOr<NdArray> g_idx = file.Read(g_idx_name, 1, {ElementType::kI32});
    if (!g_idx.ok()) return g_idx.status();
    if (g_idx->shape[0] != out.shape.k) return ShapeMismatch(g_idx_name, *g_idx, {out.shape.k});
    // Groups that are not consecutive k are an activation order (desc_act, actorder).
    for (int64_t i = 0; i < out.shape.k && groups > 1; ++i) {
      int32_t group;
      std::memcpy(&group, g_idx->data.data() + 4 * i, 4);
      out.shape.act_order |= group != i / kW4GroupSize;
    }
    out.bytes.insert(out.bytes.end(), g_idx->data.begin(), g_idx->data.end());
  }
  return out;
}

}  // namespace qmm
