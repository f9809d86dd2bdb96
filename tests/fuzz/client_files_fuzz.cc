// libFuzzer target: the file formats qmmctl reads from users (.npy arrays, .safetensors
// headers, model description JSON) parse any bytes into a value or an error status,
// without a crash, a sanitizer report or an unbounded allocation; and what the .npy reader
// accepts, the writer writes back to bytes that read as the same array.
//
// Built and run by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "client/model_spec.h"
#include "client/npy.h"
#include "client/safetensors.h"

namespace {

// What ParseNpy accepted survives SerializeNpy and ParseNpy unchanged (bf16 has no .npy
// form and is refused by the writer, so it never comes out of the reader).
void NpyRoundTrip(std::span<const uint8_t> bytes) {
  absl::StatusOr<qmm::NdArray> a = qmm::ParseNpy(bytes);
  if (!a.ok()) return;
  absl::StatusOr<std::vector<uint8_t>> written = qmm::SerializeNpy(*a);
  if (!written.ok()) {
    std::fprintf(stderr, "read but not written: %s\n", written.status().ToString().c_str());
    std::abort();
  }
  absl::StatusOr<qmm::NdArray> b = qmm::ParseNpy(*written);
  if (!b.ok() || b->type != a->type || b->shape != a->shape || b->data != a->data) {
    std::fprintf(stderr, "round trip changed the array\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: {
      const std::vector<uint8_t> bytes = in.ConsumeRemainingBytes<uint8_t>();
      NpyRoundTrip(bytes);
      break;
    }
    case 1: {
      const int64_t data_bytes = in.ConsumeIntegral<int64_t>();
      const std::string json = in.ConsumeRemainingBytesAsString();
      qmm::ParseSafetensorsHeader(json, data_bytes).IgnoreError();
      break;
    }
    default: {
      const std::string json = in.ConsumeRemainingBytesAsString();
      qmm::ParseModelSpec(json).IgnoreError();
      break;
    }
  }
  return 0;
}
