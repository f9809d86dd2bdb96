// NumPy .npy files: read (format versions 1.0, 2.0 and 3.0) and write.
//
// Only what the qmm tools exchange is supported: C-order arrays of little-endian (or
// single-byte) numbers, dtypes f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8. Everything else (Fortran
// order, big-endian data, structured or object dtypes) is INVALID_ARGUMENT with a message
// that says what was found; so is a malformed or truncated file.
#ifndef QMM_CLIENT_NPY_H_
#define QMM_CLIENT_NPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/nd_array.h"

namespace qmm {

// Parses the bytes of a whole .npy file. The data must be exactly as long as the shape
// and dtype say.
absl::StatusOr<NdArray> ParseNpy(std::span<const uint8_t> bytes);

// The bytes of a .npy file holding `a`: version 1.0 (2.0 if the header needs more than
// 64 KiB), the header padded so the data starts 64-byte aligned, as NumPy writes it.
// INVALID_ARGUMENT for bf16, which .npy cannot describe.
absl::StatusOr<std::vector<uint8_t>> SerializeNpy(const NdArray& a);

// ParseNpy/SerializeNpy on a file; messages name the path.
absl::StatusOr<NdArray> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const NdArray& a);

}  // namespace qmm

#endif  // QMM_CLIENT_NPY_H_
