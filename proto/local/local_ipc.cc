#include "proto/local/local_ipc.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm::local {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int Fd::Release() { return std::exchange(fd_, -1); }

void Fd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<Segment> Segment::Map(Fd fd, uint64_t slots, uint64_t slot_bytes) {
  const uint64_t bytes = SegmentBytes(slots, slot_bytes);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno("fstat of the local segment");
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::DataLossError(
        absl::StrCat("the local segment holds ", st.st_size, " bytes, its geometry needs ", bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Errno("mmap of the local segment");
  Segment segment;
  segment.fd_ = std::move(fd);
  segment.base_ = static_cast<std::byte*>(base);
  segment.bytes_ = bytes;
  segment.slots_ = slots;
  segment.slot_bytes_ = slot_bytes;
  return segment;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    slots_ = std::exchange(other.slots_, 0);
    slot_bytes_ = std::exchange(other.slot_bytes_, 0);
  }
  return *this;
}

absl::StatusOr<Fd> ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local socket path \"", path, "\" must hold 1 to ", sizeof(addr.sun_path) - 1, " bytes"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() ||
      connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to unix:", path, ": ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<Fd> CreateSealedMemfd(const char* name, uint64_t bytes) {
  Fd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Errno("memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size a local segment of ", bytes, " bytes: ", std::strerror(errno)));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno("sealing the local segment");
  }
  return fd;
}

absl::Status SendWithFds(int socket, std::span<const std::byte> data, std::span<const int> fds) {
  size_t sent = 0;
  while (sent < data.size()) {
    iovec iov{.iov_base = const_cast<std::byte*>(data.data() + sent),
              .iov_len = data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    if (sent == 0 && !fds.empty() && fds.size() <= 4) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
    }
    const ssize_t n = sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("sending on the local socket");
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReceiveWithFds(int socket, std::span<std::byte> data, std::span<Fd> fds) {
  size_t got = 0;
  int received = 0;
  while (got < data.size()) {
    iovec iov{.iov_base = data.data() + got, .iov_len = data.size() - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("receiving on the local socket");
    }
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
      if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
        if (static_cast<size_t>(received) < fds.size()) {
          fds[received++] = Fd(fd);
        } else {
          close(fd);
        }
      }
    }
    if (n == 0) return absl::UnavailableError("the local socket was closed by its peer");
    got += static_cast<size_t>(n);
  }
  return received;
}

void FutexWait(uint32_t& word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, &word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(uint32_t& word) {
  syscall(SYS_futex, &word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace qmm::local
