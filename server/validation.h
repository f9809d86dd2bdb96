// Checks of client input, done on the gRPC thread before anything is queued or loaded.
// Every failure is INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a size limit) with a
// message naming the field, the value and the limit.
#ifndef QMM_SERVER_VALIDATION_H_
#define QMM_SERVER_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/bitnet_packing.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/int4_checkpoint.h"
#include "qmm/v1/qmm.pb.h"
#include "server/backend.h"
#include "server/limits.h"
#include "server/sha256.h"
#include "server/weight_store.h"

namespace qmm {

// a * b, or nullopt when it overflows int64 (callers report that as too large).
std::optional<int64_t> CheckedMul(int64_t a, int64_t b);

// 1..kMaxNameLength characters from [A-Za-z0-9._:/-]. `field` names the field in errors.
absl::Status CheckWeightName(absl::string_view name, absl::string_view field);

// A fully checked upload header.
struct UploadSpec {
  std::string name;
  WeightDesc desc;
  std::optional<DType> source_dtype;  // the float payload's dtype; nullopt when packed
  // Set for the BitNet planar encodings (W2A8 only): converted into the packed form.
  struct Bitnet {
    BitnetPackedAxis axis;
    DType scale_dtype;
    BitnetScale scale_use;
  };
  std::optional<Bitnet> bitnet;
  // Set for the GPTQ and pack-quantized encodings (W4A16 only): converted likewise.
  struct Int4 {
    Int4Checkpoint format;
    DType scale_dtype;
  };
  std::optional<Int4> int4_checkpoint;
  int64_t total_bytes = 0;
  Sha256::Digest sha256{};
};

// Checks every header field, the backend's shape constraints, and that total_bytes is
// exactly the payload size the header implies (sizes computed with overflow checks).
absl::StatusOr<UploadSpec> CheckWeightHeader(const v1::WeightHeader& header, const Backend& backend,
                                             const ServiceLimits& limits);

// A checked MatMul input against its weight.
struct MatMulSpec {
  DType x_dtype = DType::kF32;
  int64_t m = 0;
  DType y_dtype = DType::kF32;
  int64_t y_bytes = 0;
};

// A request's input rows when they travel beside its message (the local transport) rather
// than in input.data, which must then be empty.
struct InputRows {
  absl::string_view data;
  absl::string_view field;  // what messages call them
};

// Checks dtypes, shape [M, K] (1 <= M <= max_rows, K equal to the weight's), the data
// size (of `beside` when set), that the output fits max_message_bytes (RESOURCE_EXHAUSTED
// otherwise) and, for W2A8 (whose activations are quantized to int8), that every value is
// finite.
absl::StatusOr<MatMulSpec> CheckMatMulInput(const v1::MatMulRequest& request,
                                            const StoredWeight& weight, const ServiceLimits& limits,
                                            const InputRows* beside = nullptr);

}  // namespace qmm

#endif  // QMM_SERVER_VALIDATION_H_
