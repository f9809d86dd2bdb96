// Whole-file and ranged reads, and whole-file writes, with errno-precise statuses.
#ifndef QMM_CLIENT_FILE_IO_H_
#define QMM_CLIENT_FILE_IO_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace qmm {

// A file opened for reading; reads at explicit offsets so one open file serves many
// ranged reads (a .safetensors header, then one tensor out of many gigabytes).
class InputFile {
 public:
  // NOT_FOUND when the file does not exist, PERMISSION_DENIED, or INVALID_ARGUMENT
  // (a directory, say); messages name the path.
  static absl::StatusOr<InputFile> Open(const std::string& path);

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

  // Exactly `length` bytes from `offset`; INVALID_ARGUMENT when the range passes the end.
  absl::StatusOr<std::vector<uint8_t>> ReadAt(int64_t offset, int64_t length) const;

 private:
  InputFile(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path);

// Creates or truncates `path` and writes `bytes` to it.
absl::Status WriteFile(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace qmm

#endif  // QMM_CLIENT_FILE_IO_H_
