// A client of the local transport (proto/local/local_layout.h; qmm-server
// --local_listen=PATH): MatMul through shared memory with a server on the same host,
// without gRPC's round trip. The requests and answers are qmm.v1's; errors carry the
// codes and messages a gRPC MatMul would get.
//
// Threads: one request at a time per slot; different slots may be used from different
// threads at once. One thread may keep several slots busy (Send on each, then Receive on
// each), as a decode engine with many sequences would: the server batches them together,
// and only the slot being waited for costs the server a wake-up.
#ifndef QMM_CLIENT_LOCAL_CHANNEL_H_
#define QMM_CLIENT_LOCAL_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/local/local_ipc.h"
#include "qmm/v1/qmm.pb.h"

namespace qmm {

struct LocalChannelOptions {
  int slots = 1;  // requests in flight at once, one a slot
  // Room for one serialized request or response: 64 + 2 bytes a value for fp16 [M, K].
  int64_t slot_bytes = int64_t{1} << 20;
  // How long a caller polls for its answer before it sleeps until the server wakes it:
  // polling saves the wake-up (microseconds) for the price of a busy core.
  absl::Duration spin = absl::ZeroDuration();
};

class LocalChannel {
 public:
  // Opens a session with the server listening at `path`: the server's refusal (its code and
  // message, e.g. INVALID_ARGUMENT for slot_bytes beyond its max_message_bytes), or
  // UNAVAILABLE when nothing answers there.
  static absl::StatusOr<std::unique_ptr<LocalChannel>> Connect(const std::string& path,
                                                               const LocalChannelOptions& options);

  // One MatMul on `slot` (0 <= slot < slots()): Send, then Receive.
  absl::Status MatMul(int slot, const v1::MatMulRequest& request, v1::MatMulResponse* response,
                      absl::Duration timeout = absl::Seconds(30));

  // Hands `request` to the server on `slot` and returns without waiting for the answer.
  // `timeout` is the request's deadline as the server applies it (dropped with
  // DEADLINE_EXCEEDED if it has not launched by then). FAILED_PRECONDITION while the slot's
  // previous answer has not been received; RESOURCE_EXHAUSTED when the request does not
  // fit the slot. Nothing is sent on an error.
  absl::Status Send(int slot, const v1::MatMulRequest& request,
                    absl::Duration timeout = absl::Seconds(30));
  // The answer to the request sent on `slot`: waits for it at most its timeout plus a
  // second for one already running, then gets DEADLINE_EXCEEDED (the slot is free again:
  // a late answer is overwritten by the next request's). UNAVAILABLE when the server ended
  // the session; FAILED_PRECONDITION when nothing was sent on the slot.
  absl::Status Receive(int slot, v1::MatMulResponse* response);

  int slots() const { return static_cast<int>(segment_.slots()); }

 private:
  // What the client keeps of a slot's request until its answer is received.
  struct Sent {
    uint32_t seq = 0;  // request_seq of the request; its answer has this response_seq
    bool waiting = false;
    absl::Duration timeout;
    absl::Time give_up;
  };

  LocalChannel(local::Fd socket, local::Fd doorbell, local::Segment segment, absl::Duration spin);

  // INVALID_ARGUMENT unless 0 <= slot < slots().
  absl::Status CheckSlot(int slot) const;
  // Whether the server has closed the session's socket.
  bool ServerGone() const;

  local::Fd socket_;
  local::Fd doorbell_;
  local::Segment segment_;
  const absl::Duration spin_;
  const std::unique_ptr<Sent[]> sent_;  // by slot
};

}  // namespace qmm

#endif  // QMM_CLIENT_LOCAL_CHANNEL_H_
