// What both ends of the local transport (local_layout.h) do with the operating system: map
// a session's segment, pass its file descriptors over the Unix socket, and wait and wake on
// a shared futex. Linux only, like the transport.
#ifndef QMM_PROTO_LOCAL_LOCAL_IPC_H_
#define QMM_PROTO_LOCAL_LOCAL_IPC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/local/local_layout.h"

namespace qmm::local {

// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

// A session's segment mapped into this process (shared, read and write).
class Segment {
 public:
  // Maps `bytes` of `fd` (which it keeps); the geometry is the caller's, already checked.
  static absl::StatusOr<Segment> Map(Fd fd, uint64_t slots, uint64_t slot_bytes);
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  std::byte* data() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  SlotControl& control(uint64_t slot) const {
    return reinterpret_cast<SlotControl*>(base_ + kSlotControlOffset)[slot];
  }
  std::span<std::byte> request_area(uint64_t slot) const {
    return {base_ + RequestAreaOffset(slots_, slot_bytes_, slot), slot_bytes_};
  }
  std::span<std::byte> response_area(uint64_t slot) const {
    return {base_ + ResponseAreaOffset(slots_, slot_bytes_, slot), slot_bytes_};
  }
  const Fd& fd() const { return fd_; }

 private:
  Fd fd_;
  std::byte* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
};

// The shared words of the segment, which the other process changes under us.
inline std::atomic_ref<uint32_t> Shared(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

// A stream socket connected to the Unix socket at `path`: INVALID_ARGUMENT for a path a
// socket address cannot hold, UNAVAILABLE when nothing accepts there.
absl::StatusOr<Fd> ConnectUnix(const std::string& path);

// A new sealed memfd of `bytes`, zero-filled (neither side can shrink it under the other's
// mapping, which would turn the other's accesses into SIGBUS).
absl::StatusOr<Fd> CreateSealedMemfd(const char* name, uint64_t bytes);

// Sends all of `data` and, with its first byte, `fds` (SCM_RIGHTS).
absl::Status SendWithFds(int socket, std::span<const std::byte> data, std::span<const int> fds);
// Receives exactly data.size() bytes and up to fds.size() descriptors (the ones beyond are
// closed); returns how many descriptors came. UNAVAILABLE when the peer closed first.
absl::StatusOr<int> ReceiveWithFds(int socket, std::span<std::byte> data, std::span<Fd> fds);

// Blocks while `word` holds `expected`, at most `timeout`; spurious returns are allowed.
void FutexWait(uint32_t& word, uint32_t expected, absl::Duration timeout);
// Wakes every waiter on `word`.
void FutexWake(uint32_t& word);

}  // namespace qmm::local

#endif  // QMM_PROTO_LOCAL_LOCAL_IPC_H_
