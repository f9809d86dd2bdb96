#include "client/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view action, const std::string& path) {
  std::string message = absl::StrCat("cannot ", action, " ", path, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoStatus(error, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  return InputFile(path, fd, static_cast<int64_t>(st.st_size));
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::vector<uint8_t>> InputFile::ReadAt(int64_t offset, int64_t length) const {
  if (offset < 0 || length < 0 || offset > size_ || length > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read bytes [", offset, ", ",
                                                   offset + length, ") of ", path_, ": it is ",
                                                   size_, " bytes long"));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  int64_t done = 0;
  while (done < length) {
    const ssize_t got = ::pread(fd_, bytes.data() + done, static_cast<size_t>(length - done),
                                static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path_);
    }
    if (got == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, " ended at byte ", offset + done, " while being read"));
    }
    done += got;
  }
  return bytes;
}

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path) {
  absl::StatusOr<InputFile> file = InputFile::Open(path);
  if (!file.ok()) return file.status();
  return file->ReadAt(0, file->size());
}

absl::Status WriteFile(const std::string& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error, "write", path);
    }
    done += static_cast<size_t>(put);
  }
  if (::close(fd) != 0) return ErrnoStatus(errno, "close", path);
  return absl::OkStatus();
}

}  // namespace qmm
