#include "client/local_channel.h"

#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace qmm {

using local::Fd;
using local::Shared;

namespace {

// `request` without its rows, which travel beside the message: every field of MatMulRequest
// and of its input Tensor but input.data (LocalChannelTest in local_transport_test.cc checks
// there are no others).
v1::MatMulRequest WithoutRows(const v1::MatMulRequest& request) {
  v1::MatMulRequest header;
  header.set_weight(request.weight());
  header.set_output_dtype(request.output_dtype());
  header.mutable_input()->set_dtype(request.input().dtype());
  *header.mutable_input()->mutable_shape() = request.input().shape();
  return header;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalChannel>> LocalChannel::Connect(
    const std::string& path, const LocalChannelOptions& options) {
  absl::StatusOr<Fd> connected = local::ConnectUnix(path);
  if (!connected.ok()) return connected.status();
  Fd socket_fd = *std::move(connected);
  const local::Hello hello{
      .magic = local::kMagic,
      .version = local::kVersion,
      .slots = static_cast<uint32_t>(std::max(options.slots, 0)),
      .reserved = 0,
      .slot_bytes = static_cast<uint64_t>(std::max<int64_t>(options.slot_bytes, 0))};
  if (absl::Status s = local::SendWithFds(socket_fd.get(), std::as_bytes(std::span(&hello, 1)), {});
      !s.ok()) {
    return s;
  }
  local::Welcome welcome{};
  Fd fds[2];
  absl::StatusOr<int> received =
      local::ReceiveWithFds(socket_fd.get(), std::as_writable_bytes(std::span(&welcome, 1)), fds);
  if (!received.ok()) return received.status();
  if (welcome.magic != local::kMagic) {
    return absl::UnavailableError(absl::StrCat("unix:", path, " is not a qmm local transport"));
  }
  if (welcome.code != 0) {
    welcome.message[sizeof(welcome.message) - 1] = '\0';
    return absl::Status(static_cast<absl::StatusCode>(welcome.code), welcome.message);
  }
  if (*received != 2 ||
      welcome.segment_bytes != local::SegmentBytes(hello.slots, hello.slot_bytes)) {
    return absl::DataLossError("the server's Welcome does not match the Hello");
  }
  absl::StatusOr<local::Segment> segment =
      local::Segment::Map(std::move(fds[0]), hello.slots, hello.slot_bytes);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<LocalChannel>(
      new LocalChannel(std::move(socket_fd), std::move(fds[1]), *std::move(segment), options.spin));
}

LocalChannel::LocalChannel(Fd socket, Fd doorbell, local::Segment segment, absl::Duration spin)
    : socket_(std::move(socket)),
      doorbell_(std::move(doorbell)),
      segment_(std::move(segment)),
      spin_(spin),
      sent_(std::make_unique<Sent[]>(segment_.slots())) {}

absl::Status LocalChannel::CheckSlot(int slot) const {
  if (slot < 0 || slot >= slots()) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot = ", slot, " must be in [0, ", slots(), ")"));
  }
  return absl::OkStatus();
}

bool LocalChannel::ServerGone() const {
  pollfd p{.fd = socket_.get(), .events = POLLIN | POLLRDHUP, .revents = 0};
  return poll(&p, 1, 0) > 0;  // the server never writes after the Welcome
}

absl::Status LocalChannel::MatMul(int slot, const v1::MatMulRequest& request,
                                  v1::MatMulResponse* response, absl::Duration timeout) {
  if (absl::Status s = Send(slot, request, timeout); !s.ok()) return s;
  return Receive(slot, response);
}

absl::Status LocalChannel::Send(int slot, const v1::MatMulRequest& request,
                                absl::Duration timeout) {
  if (absl::Status s = CheckSlot(slot); !s.ok()) return s;
  Sent& sent = sent_[slot];
  if (sent.waiting) {
    return absl::FailedPreconditionError(
        absl::StrCat("local slot ", slot, " still holds a request: Receive its answer first"));
  }
  // The rows beside the message, where the server reads them in place; a request without
  // rows goes inline, for the server to refuse as gRPC would.
  const std::string& rows = request.input().data();
  const v1::MatMulRequest header = rows.empty() ? request : WithoutRows(request);
  const uint64_t message_at = rows.empty() ? 0 : local::MessageOffset(rows.size());
  const std::span<std::byte> area = segment_.request_area(slot);
  const size_t bytes = header.ByteSizeLong();
  if (message_at + bytes > area.size()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request's ", message_at + bytes,
        " bytes exceed the session's slot_bytes = ", area.size(), "; connect with larger slots"));
  }
  std::memcpy(area.data(), rows.data(), rows.size());
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(area.data() + message_at));
  local::SlotControl& control = segment_.control(slot);
  Shared(control.request_bytes).store(static_cast<uint32_t>(bytes), std::memory_order_relaxed);
  Shared(control.input_bytes).store(static_cast<uint32_t>(rows.size()), std::memory_order_relaxed);
  std::atomic_ref<int64_t>(control.timeout_ns)
      .store(timeout == absl::InfiniteDuration() ? 0 : absl::ToInt64Nanoseconds(timeout),
             std::memory_order_relaxed);
  // The client alone writes request_seq: the last value it wrote is there to read.
  const uint32_t seq = Shared(control.request_seq).load(std::memory_order_relaxed) + 1;
  Shared(control.request_seq).store(seq, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Shared(segment_.header().server_sleeping).load(std::memory_order_relaxed) != 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(doorbell_.get(), &one, sizeof(one));
  }
  sent = {.seq = seq,
          .waiting = true,
          .timeout = timeout,
          .give_up = timeout == absl::InfiniteDuration()
                         ? absl::InfiniteFuture()
                         : absl::Now() + timeout + absl::Seconds(1)};
  return absl::OkStatus();
}

absl::Status LocalChannel::Receive(int slot, v1::MatMulResponse* response) {
  if (absl::Status s = CheckSlot(slot); !s.ok()) return s;
  Sent& sent = sent_[slot];
  if (!sent.waiting) {
    return absl::FailedPreconditionError(
        absl::StrCat("local slot ", slot, " has no request to answer: Send one first"));
  }
  sent.waiting = false;
  const uint32_t seq = sent.seq;
  local::SlotControl& control = segment_.control(slot);
  std::atomic_ref<uint32_t> answered = Shared(control.response_seq);
  const absl::Time start = absl::Now();
  while (answered.load(std::memory_order_acquire) != seq && absl::Now() - start < spin_) {
  }
  while (true) {
    const uint32_t now_answered = answered.load(std::memory_order_acquire);
    if (now_answered == seq) break;
    Shared(control.client_waiting).store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (answered.load(std::memory_order_acquire) == seq) break;
    // In slices, to notice the server going away.
    local::FutexWait(control.response_seq, now_answered, absl::Milliseconds(50));
    if (answered.load(std::memory_order_acquire) == seq) break;
    if (ServerGone()) {
      Shared(control.client_waiting).store(0, std::memory_order_relaxed);
      return absl::UnavailableError("the server ended the local session");
    }
    if (absl::Now() >= sent.give_up) {
      Shared(control.client_waiting).store(0, std::memory_order_relaxed);
      return absl::DeadlineExceededError(absl::StrCat("no answer on local slot ", slot, " within ",
                                                      absl::FormatDuration(sent.timeout)));
    }
  }
  Shared(control.client_waiting).store(0, std::memory_order_relaxed);

  const std::span<std::byte> answer = segment_.response_area(slot);
  const int32_t code = std::atomic_ref<int32_t>(control.code).load(std::memory_order_relaxed);
  const uint64_t answer_bytes = Shared(control.response_bytes).load(std::memory_order_relaxed);
  const uint64_t output_bytes = Shared(control.output_bytes).load(std::memory_order_relaxed);
  const char* data = reinterpret_cast<const char*>(answer.data());
  if (code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(code),
                        std::string(data, std::min<uint64_t>(answer_bytes, answer.size())));
  }
  const uint64_t answer_at = output_bytes > 0 ? local::MessageOffset(output_bytes) : 0;
  if (answer_at + answer_bytes > answer.size() ||
      !response->ParseFromArray(data + answer_at, static_cast<int>(answer_bytes))) {
    return absl::DataLossError("the local answer is not a serialized qmm.v1.MatMulResponse");
  }
  if (output_bytes > 0) response->mutable_output()->set_data(data, output_bytes);
  return absl::OkStatus();
}

}  // namespace qmm
