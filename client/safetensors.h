// .safetensors files: an 8-byte little-endian header length, a JSON header mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// data that follows the header), an optional "__metadata__" map of strings, then the data.
//
// Read: dtypes F16 BF16 F32 F64 I8 I16 I32 I64 U8 U16 U32 U64. Each tensor's offsets are
// checked against its shape and dtype and against the file size, and tensors may not
// overlap; a malformed file is INVALID_ARGUMENT naming the tensor and what is wrong.
// Tensors are read one at a time, so a large checkpoint is never loaded whole.
#ifndef QMM_CLIENT_SAFETENSORS_H_
#define QMM_CLIENT_SAFETENSORS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/file_io.h"
#include "client/nd_array.h"

namespace qmm {

struct SafetensorsEntry {
  std::string name;
  ElementType type = ElementType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};

// Parses and checks a header's JSON text against a data section of `data_bytes` bytes.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, int64_t data_bytes);

class SafetensorsFile {
 public:
  // Reads and checks the header; the data stays on disk until Read(). Messages name the
  // path.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const SafetensorsHeader& header() const { return header_; }

  bool Has(std::string_view name) const;

  // NOT_FOUND (listing the names there are) when the file has no tensor `name`.
  absl::StatusOr<NdArray> Read(std::string_view name) const;
  // Read(), then INVALID_ARGUMENT naming the tensor, its type and shape unless it has
  // `rank` dimensions and one of `types`.
  absl::StatusOr<NdArray> Read(std::string_view name, size_t rank,
                               std::initializer_list<ElementType> types) const;

 private:
  SafetensorsFile(InputFile file, int64_t data_start, SafetensorsHeader header)
      : file_(std::move(file)), data_start_(data_start), header_(std::move(header)) {}

  InputFile file_;
  int64_t data_start_;
  SafetensorsHeader header_;
};

// The bytes of a .safetensors file holding `tensors` in the given order (header padded
// with spaces to a multiple of 8 bytes, as the reference writer does). INVALID_ARGUMENT
// when an array's data does not match its shape or a name repeats.
absl::StatusOr<std::vector<uint8_t>> SerializeSafetensors(
    const std::vector<std::pair<std::string, NdArray>>& tensors);
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, NdArray>>& tensors);

}  // namespace qmm

#endif  // QMM_CLIENT_SAFETENSORS_H_
