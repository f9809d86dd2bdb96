#include "server/local_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/limits.h"
#include "server/matmul_runner.h"
#include "server/request_clock.h"
#include "server/unix_socket.h"

namespace qmm {

using local::Fd;
using local::Shared;

// A session segment's registration with the backend, and its share of the transport's
// pinned bytes, returned when it goes.
class LocalTransport::Pinned {
 public:
  Pinned(std::unique_ptr<HostRegistration> registration, uint64_t bytes,
         std::atomic<uint64_t>& total)
      : registration_(std::move(registration)), bytes_(bytes), total_(total) {}
  ~Pinned() {
    registration_.reset();
    total_.fetch_sub(bytes_, std::memory_order_relaxed);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;

 private:
  std::unique_ptr<HostRegistration> registration_;
  const uint64_t bytes_;
  std::atomic<uint64_t>& total_;
};

struct LocalTransport::Session {
  // One request at a time per slot. `busy` is set by the poller when it takes the
  // slot's request and cleared by the thread that answers it; the rest belongs to
  // whichever of the two holds the request.
  struct Slot {
    std::atomic<bool> busy{false};
    uint32_t taken = 0;  // the request_seq last taken (poller only)
    std::string bytes;   // the request's message, copied out of the segment
    std::string rows;    // its rows beside the message, copied out unless fp16
    v1::MatMulRequest request;
    v1::MatMulResponse response;
    uint32_t output_bytes = 0;  // the result rows beside the answer's message; 0: inline
  };

  Session(Fd s, local::Segment seg, int bell, std::unique_ptr<Pinned> p)
      : socket(std::move(s)),
        segment(std::move(seg)),
        pinned(std::move(p)),
        doorbell(bell),
        slots(std::make_unique<Slot[]>(segment.slots())) {}

  const Fd socket;
  const local::Segment segment;
  // The segment registered with the backend, or null; released before it is unmapped.
  const std::unique_ptr<Pinned> pinned;
  const int doorbell;  // the poller's; rung when a slot was written while busy
  const std::unique_ptr<Slot[]> slots;
  std::atomic<bool> closed{false};  // the client has gone: drop what is queued
};

namespace {

void Ring(int doorbell) {
  const uint64_t one = 1;
  // A full counter (never, at 2^64 - 2) or EINTR loses nothing: the poller wakes either way.
  [[maybe_unused]] ssize_t n = write(doorbell, &one, sizeof(one));
}

// Writes the answer to `slot` of `session`, then lets its client see it.
void Answer(LocalTransport::Session& session, uint64_t index, uint32_t seq,
            const RequestClock& clock, absl::Status status) {
  LocalTransport::Session::Slot& slot = session.slots[index];
  local::SlotControl& control = session.segment.control(index);
  const std::span<std::byte> area = session.segment.response_area(index);
  uint64_t bytes = 0;
  uint32_t output_bytes = 0;
  if (status.ok()) {
    // The result rows, when beside the message, are already at offset 0.
    const uint64_t at = slot.output_bytes > 0 ? local::MessageOffset(slot.output_bytes) : 0;
    bytes = slot.response.ByteSizeLong();
    if (at + bytes > area.size()) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "the response's ", at + bytes, " bytes exceed the session's slot_bytes = ", area.size()));
    } else {
      slot.response.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(area.data() + at));
      output_bytes = slot.output_bytes;
    }
  }
  if (!status.ok()) {
    bytes = std::min<uint64_t>(status.message().size(), area.size());
    std::memcpy(area.data(), status.message().data(), bytes);
  }
  std::atomic_ref<int32_t>(control.code)
      .store(static_cast<int32_t>(status.code()), std::memory_order_relaxed);
  Shared(control.response_bytes).store(static_cast<uint32_t>(bytes), std::memory_order_relaxed);
  Shared(control.output_bytes).store(output_bytes, std::memory_order_relaxed);
  clock.Finish(status);
  slot.busy.store(false, std::memory_order_release);
  Shared(control.response_seq).store(seq, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Shared(control.client_waiting).load(std::memory_order_relaxed) != 0) {
    local::FutexWake(control.response_seq);
  }
  // Written again before this answer: the poller may have skipped it and gone to sleep.
  if (Shared(control.request_seq).load(std::memory_order_relaxed) != seq) Ring(session.doorbell);
}

}  // namespace

// Polls its sessions' slots on a thread of its own.
class LocalTransport::Poller {
 public:
  explicit Poller(LocalTransport& transport) : transport_(transport) {}

  absl::Status Start() {
    doorbell_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!doorbell_.valid() || !epoll_.valid()) {
      return absl::UnavailableError(absl::StrCat("local transport: ", std::strerror(errno)));
    }
    epoll_event event{.events = EPOLLIN, .data = {.ptr = nullptr}};
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, doorbell_.get(), &event) != 0) {
      return absl::UnavailableError(absl::StrCat("local transport: ", std::strerror(errno)));
    }
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  // Takes no more requests; the sessions stay until the poller is destroyed.
  void Stop() {
    if (!thread_.joinable()) return;
    stopping_.store(true, std::memory_order_relaxed);
    Ring(doorbell_.get());
    thread_.join();
  }

  ~Poller() { Stop(); }

  int doorbell() const { return doorbell_.get(); }

  void Add(std::shared_ptr<Session> session) {
    {
      absl::MutexLock lock(&mu_);
      inbox_.push_back(std::move(session));
    }
    has_inbox_.store(true, std::memory_order_release);
    Ring(doorbell_.get());
  }

 private:
  void Loop() {
    absl::Time last = absl::Now();
    for (int round = 0; !stopping_.load(std::memory_order_relaxed); ++round) {
      if (Scan()) {
        last = absl::Now();
      } else if (absl::Now() - last >= transport_.options_.spin) {
        Sleep();
        last = absl::Now();
      }
      if (has_inbox_.load(std::memory_order_acquire) || round % 64 == 0) Events(0);
    }
  }

  // Takes every request written since the last scan; true when there was one.
  bool Scan() {
    bool found = false;
    for (const std::shared_ptr<Session>& session : sessions_) {
      for (uint64_t i = 0; i < session->segment.slots(); ++i) {
        Session::Slot& slot = session->slots[i];
        if (slot.busy.load(std::memory_order_acquire)) continue;
        const uint32_t seq =
            Shared(session->segment.control(i).request_seq).load(std::memory_order_acquire);
        if (seq == slot.taken) continue;
        Take(session, i, seq);
        found = true;
      }
    }
    return found;
  }

  void Take(const std::shared_ptr<Session>& session, uint64_t index, uint32_t seq) {
    const RequestClock clock(transport_.context_.metrics, RpcMethod::kLocalMatMul);
    Session::Slot& slot = session->slots[index];
    slot.taken = seq;
    slot.output_bytes = 0;
    slot.busy.store(true, std::memory_order_relaxed);
    transport_.RequestStarted();
    auto answer = [transport = &transport_, session, index, seq, clock](const absl::Status& s) {
      Answer(*session, index, seq, clock, s);
      transport->RequestFinished();
    };

    local::SlotControl& control = session->segment.control(index);
    const uint32_t bytes = Shared(control.request_bytes).load(std::memory_order_relaxed);
    const uint32_t input_bytes = Shared(control.input_bytes).load(std::memory_order_relaxed);
    const int64_t timeout_ns =
        std::atomic_ref<int64_t>(control.timeout_ns).load(std::memory_order_relaxed);
    const std::span<std::byte> area = session->segment.request_area(index);
    const uint64_t message_at = input_bytes > 0 ? local::MessageOffset(input_bytes) : 0;
    if (input_bytes > 0 && message_at + bytes > area.size()) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("input_bytes = ", input_bytes, " and request_bytes = ", bytes,
                       " (the message from offset ", message_at,
                       ") exceed the session's slot_bytes = ", area.size())));
    }
    if (bytes > area.size()) {
      return answer(absl::InvalidArgumentError(absl::StrCat(
          "request_bytes = ", bytes, " exceeds the session's slot_bytes = ", area.size())));
    }
    if (timeout_ns < 0) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("timeout_ns = ", timeout_ns, " must not be negative (0: none)")));
    }
    // Copied before parsing: the client may write the area while it is read.
    slot.bytes.assign(reinterpret_cast<const char*>(area.data()) + message_at, bytes);
    if (!slot.request.ParseFromString(slot.bytes)) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("the request area's ", bytes, " bytes from offset ", message_at,
                       " are not a serialized qmm.v1.MatMulRequest")));
    }
    // fp16 rows are read in place: they decide nothing but their own results. Rows of other
    // dtypes are copied first, since what they hold can decide how a whole launch is scaled
    // (MatMulJob::beyond_fp16).
    const bool in_place = slot.request.input().dtype() == v1::DTYPE_FP16;
    InputRows beside{.data = {reinterpret_cast<const char*>(area.data()), input_bytes},
                     .field = "the rows beside the message (input_bytes)"};
    if (input_bytes > 0 && !in_place) {
      slot.rows.assign(beside.data.data(), beside.data.size());
      beside.data = slot.rows;
    }
    const ServiceContext& context = transport_.context_;
    absl::StatusOr<MatMulJob> job = PrepareMatMul(slot.request, *context.store, context.limits,
                                                  input_bytes > 0 ? &beside : nullptr);
    if (!job.ok()) return answer(job.status());
    const uint64_t y_bytes = static_cast<uint64_t>(job->spec.y_bytes);
    const uint64_t rows_room = input_bytes > 0 ? local::MessageOffset(y_bytes) : y_bytes;
    if (rows_room + kResponseOverheadBytes > area.size()) {
      return answer(absl::ResourceExhaustedError(absl::StrCat(
          "the result's ", y_bytes, " bytes do not fit the session's slot_bytes = ", area.size(),
          " (less ", kResponseOverheadBytes, " for the response's other fields)")));
    }
    // Rows beside the message get their results beside the answer's.
    void* output = nullptr;
    if (input_bytes > 0) {
      slot.output_bytes = static_cast<uint32_t>(y_bytes);
      output = session->segment.response_area(index).data();
    }
    const bool registered = output != nullptr && in_place && session->pinned != nullptr;
    RequestControl request_control;
    if (timeout_ns > 0) request_control.deadline = absl::Now() + absl::Nanoseconds(timeout_ns);
    request_control.cancelled = [s = session.get()] {
      return s->closed.load(std::memory_order_relaxed);
    };
    DispatchMatMul(context, RpcMethod::kLocalMatMul, std::move(request_control), *std::move(job),
                   &slot.response, std::move(answer), output, registered);
  }

  // Marks every session as possibly asleep, scans once more (a request published before
  // the mark would not ring), and sleeps until the doorbell or a socket event.
  void Sleep() {
    SetSleeping(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!Scan()) Events(-1);
    SetSleeping(0);
  }

  void SetSleeping(uint32_t value) {
    for (const std::shared_ptr<Session>& session : sessions_) {
      Shared(session->segment.header().server_sleeping).store(value, std::memory_order_relaxed);
    }
  }

  // Handles what epoll reports within `timeout_ms`: the doorbell, new sessions, and any
  // byte or hang-up on a session's socket, which ends that session.
  void Events(int timeout_ms) {
    epoll_event events[64];
    const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = read(doorbell_.get(), &count, sizeof(count));
      } else {
        Close(static_cast<Session*>(events[i].data.ptr));
      }
    }
    if (has_inbox_.exchange(false, std::memory_order_acquire)) {
      std::vector<std::shared_ptr<Session>> added;
      {
        absl::MutexLock lock(&mu_);
        added.swap(inbox_);
      }
      for (std::shared_ptr<Session>& session : added) {
        epoll_event event{.events = EPOLLIN | EPOLLRDHUP, .data = {.ptr = session.get()}};
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, session->socket.get(), &event) != 0) {
          session->closed.store(true, std::memory_order_relaxed);
          transport_.sessions_.fetch_sub(1, std::memory_order_relaxed);
          continue;
        }
        sessions_.push_back(std::move(session));
      }
    }
  }

  void Close(Session* session) {
    session->closed.store(true, std::memory_order_relaxed);
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, session->socket.get(), nullptr);
    std::erase_if(sessions_, [session](const auto& s) { return s.get() == session; });
    transport_.sessions_.fetch_sub(1, std::memory_order_relaxed);
  }

  LocalTransport& transport_;
  Fd doorbell_;
  Fd epoll_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Session>> inbox_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_inbox_{false};
  std::vector<std::shared_ptr<Session>> sessions_;  // the poller thread's
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

absl::Status CheckLocalTransportOptions(const LocalTransportOptions& o) {
  if (o.spin < absl::ZeroDuration() || o.spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_spin = ", absl::FormatDuration(o.spin), " must be in [0, 1s]"));
  }
  if (o.threads < 1 || o.threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_threads = ", o.threads, " must be in [1, 64]"));
  }
  if (o.pinned_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local pinned_bytes = ", o.pinned_bytes, " must not be negative"));
  }
  if (o.max_sessions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("local max_sessions = ", o.max_sessions, " must be at least 1"));
  }
  return absl::OkStatus();
}

absl::Status CheckHello(const local::Hello& h, int64_t max_message_bytes) {
  if (h.magic != local::kMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Hello.magic = 0x%08x is not the local transport's 0x%08x", h.magic, local::kMagic));
  }
  if (h.version < local::kMinVersion || h.version > local::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Hello.version = ", h.version, " is not supported: this server speaks versions ",
        local::kMinVersion, " to ", local::kVersion));
  }
  if (h.reserved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Hello.reserved = ", h.reserved, " must be 0"));
  }
  if (h.slots < 1 || h.slots > local::kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hello.slots = ", h.slots, " must be in [1, ", local::kMaxSlots, "]"));
  }
  const uint64_t most = static_cast<uint64_t>(max_message_bytes);
  if (h.slot_bytes < local::kMinSlotBytes || h.slot_bytes > most ||
      h.slot_bytes % local::kAlign != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hello.slot_bytes = ", h.slot_bytes, " must be a multiple of ", local::kAlign,
                     " in [", local::kMinSlotBytes, ", max_message_bytes = ", most, "]"));
  }
  const uint64_t segment = local::SegmentBytes(h.slots, h.slot_bytes);
  if (segment > local::kMaxSegmentBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("Hello.slots x slot_bytes needs a segment of ",
                                                     segment, " bytes, more than the ",
                                                     local::kMaxSegmentBytes, " allowed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalTransport>> LocalTransport::Start(
    const LocalTransportOptions& options, const ServiceContext& context) {
  if (absl::Status s = CheckLocalTransportOptions(options); !s.ok()) return s;
  const std::string address = absl::StrCat("unix:", options.path);
  if (absl::Status s = CheckUnixSocketFree(options.path); !s.ok()) return s;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());  // length checked
  unlink(options.path.c_str());  // a stale socket (CheckUnixSocketFree: nothing listens)
  Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid() ||
      bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener.get(), 128) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", address, "\": ", std::strerror(errno)));
  }
  std::unique_ptr<LocalTransport> transport(
      new LocalTransport(options, context, std::move(listener)));
  for (int i = 0; i < options.threads; ++i) {
    transport->pollers_.push_back(std::make_unique<Poller>(*transport));
    if (absl::Status s = transport->pollers_.back()->Start(); !s.ok()) return s;
  }
  transport->acceptor_ = std::thread([t = transport.get()] { t->AcceptLoop(); });
  return transport;
}

LocalTransport::LocalTransport(const LocalTransportOptions& options, const ServiceContext& context,
                               Fd listener)
    : options_(options), context_(context), listener_(std::move(listener)) {}

LocalTransport::~LocalTransport() { Shutdown(); }

void LocalTransport::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_.store(true, std::memory_order_relaxed);
  shutdown(listener_.get(), SHUT_RDWR);  // wakes accept
  if (acceptor_.joinable()) acceptor_.join();
  listener_.Reset();
  unlink(options_.path.c_str());
  for (std::unique_ptr<Poller>& poller : pollers_) poller->Stop();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* n) { return *n == 0; }, &in_flight_));
  }
  pollers_.clear();  // ends the sessions: their clients see the socket close
}

void LocalTransport::AcceptLoop() {
  while (true) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (stopping_.load(std::memory_order_relaxed)) {
      if (fd >= 0) close(fd);
      return;
    }
    if (fd < 0) {
      // Out of descriptors or memory: let the ones in use go before trying again.
      if (errno != EINTR && errno != ECONNABORTED) absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    Handshake(Fd(fd));
  }
}

void LocalTransport::Handshake(Fd socket) {
  const timeval limit{.tv_sec = 1, .tv_usec = 0};
  setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(socket.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  local::Hello hello{};
  if (!local::ReceiveWithFds(socket.get(), std::as_writable_bytes(std::span(&hello, 1)), {}).ok()) {
    return;  // gone, silent or slow: nothing to answer
  }
  local::Welcome welcome{};
  welcome.magic = local::kMagic;
  welcome.version = local::kVersion;
  absl::Status status = CheckHello(hello, context_.limits.max_message_bytes);
  if (status.ok() && sessions_.load(std::memory_order_relaxed) >= options_.max_sessions) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("the server holds its most local sessions, ", options_.max_sessions));
  }
  absl::StatusOr<local::Segment> segment = absl::UnknownError("");
  if (status.ok()) {
    absl::StatusOr<Fd> memfd =
        local::CreateSealedMemfd("qmm-local", local::SegmentBytes(hello.slots, hello.slot_bytes));
    segment = memfd.ok() ? local::Segment::Map(*std::move(memfd), hello.slots, hello.slot_bytes)
                         : memfd.status();
    status = segment.status();
  }
  Poller& poller = *pollers_[next_poller_];
  std::unique_ptr<Pinned> pinned;
  if (status.ok()) {
    pinned = Pin(*segment);
    local::SegmentHeader& header = segment->header();
    header.magic = local::kMagic;
    header.version = hello.version;
    header.slots = hello.slots;
    header.slot_bytes = hello.slot_bytes;
    welcome.segment_bytes = local::SegmentBytes(hello.slots, hello.slot_bytes);
  } else {
    welcome.code = static_cast<int32_t>(status.code());
    const size_t n = std::min(status.message().size(), sizeof(welcome.message) - 1);
    std::memcpy(welcome.message, status.message().data(), n);
  }
  const int fds[2] = {status.ok() ? segment->fd().get() : -1, poller.doorbell()};
  if (!local::SendWithFds(socket.get(), std::as_bytes(std::span(&welcome, 1)),
                          status.ok() ? std::span<const int>(fds) : std::span<const int>())
           .ok() ||
      !status.ok()) {
    return;
  }
  next_poller_ = (next_poller_ + 1) % static_cast<int>(pollers_.size());
  sessions_.fetch_add(1, std::memory_order_relaxed);
  poller.Add(std::make_shared<Session>(std::move(socket), *std::move(segment), poller.doorbell(),
                                       std::move(pinned)));
}

std::unique_ptr<LocalTransport::Pinned> LocalTransport::Pin(const local::Segment& segment) {
  const uint64_t bytes = segment.bytes();
  if (pinned_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes <=
      static_cast<uint64_t>(options_.pinned_bytes)) {
    absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
        context_.backend->RegisterHost(segment.data(), bytes);
    if (registration.ok() && *registration != nullptr) {
      return std::make_unique<Pinned>(*std::move(registration), bytes, pinned_bytes_);
    }
  }
  // Over the budget, refused, or of no use to the backend: the session's rows are staged.
  pinned_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return nullptr;
}

void LocalTransport::RequestStarted() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void LocalTransport::RequestFinished() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

}  // namespace qmm
