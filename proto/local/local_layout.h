// The local transport's wire format: qmm.v1 MatMul requests and responses exchanged through
// shared memory with a server on the same host (qmm-server --local_listen=PATH), for
// clients to whom gRPC's round trip (65-80 us on loopback, docs/PERFORMANCE.md) costs more
// than the kernel. The messages are the serialized qmm.v1 protobufs; only their carriage
// differs, and a request may carry its tensor rows beside its message (version 2) so that
// neither side copies them in or out of a message. Everything is little-endian; offsets
// are in bytes.
//
// Session. The client connects to the server's Unix stream socket at PATH and writes one
// Hello. The server answers with one Welcome; when its code is 0 (OK) the same sendmsg
// carries two file descriptors (SCM_RIGHTS): the session's shared-memory segment (a sealed
// memfd of Welcome::segment_bytes that neither side can resize) and the server's doorbell
// (an eventfd). The session lasts as long as the connection: when the client closes it,
// its requests still queued are dropped (CANCELLED) and the segment is freed once the ones
// running have finished. Anything else on the socket after the Hello ends the session.
//
// Segment. A SegmentHeader at offset 0; SlotControl s at kSlotControlOffset + s * 128;
// slot s's request area at RequestAreaOffset(slots, s) and its response area right after,
// each Hello::slot_bytes long. Each slot carries one request at a time:
//   1. The client writes the request into the request area, in one of two forms:
//      - rows beside the message (version 2): input.shape's rows of input.dtype, row-major,
//        at offset 0, input_bytes long, and the serialized MatMulRequest, with input.data
//        empty, at MessageOffset(input_bytes);
//      - inline (input_bytes = 0, the only form of version 1): the whole serialized
//        MatMulRequest at offset 0.
//      It sets request_bytes (the message's length), input_bytes and timeout_ns, then
//      increments request_seq (release), and, when SegmentHeader::server_sleeping is then
//      non-zero (after a sequentially consistent fence), writes 1 (8 bytes) to the
//      doorbell.
//   2. The server reads the request, checks it as it would a gRPC MatMul (errors are the
//      same codes and messages), batches it with everyone else's, and writes the answer:
//      code, response_bytes, output_bytes and the response area, then sets response_seq to
//      request_seq (release), and wakes a client that set client_waiting with FUTEX_WAKE
//      on response_seq (a shared futex). The response area holds, on OK, the answer in the
//      request's form: the result rows at offset 0 (output_bytes long) and the serialized
//      MatMulResponse, output.data empty, at MessageOffset(output_bytes); or, inline
//      (output_bytes = 0), the whole serialized MatMulResponse at offset 0. On an error it
//      holds the message in UTF-8 at offset 0 (output_bytes = 0).
//   3. The client waits for response_seq to equal its request_seq, by polling it, or by
//      setting client_waiting, issuing a sequentially consistent fence, checking again and
//      FUTEX_WAIT on response_seq.
// A slot whose request_seq changes while its request is being served is served again, for
// the new value, once the answer is written; a client that writes a slot before its answer
// came only garbles its own answers. The server never reads anything of the segment but
// the request fields below and never trusts a length. It copies the message, and rows of
// any dtype but fp16, before checking them; fp16 rows beside the message it reads (and a
// GPU server's device may read) in place while the request runs, and it writes result rows
// in place: a client that changes its rows meanwhile changes only its own result, since
// the rows of one request never affect another's.
#ifndef QMM_PROTO_LOCAL_LOCAL_LAYOUT_H_
#define QMM_PROTO_LOCAL_LOCAL_LAYOUT_H_

#include <cstdint>

namespace qmm::local {

inline constexpr uint32_t kMagic = 0x4c4d4d51;  // "QMML"
// What this side speaks; a server also takes version 1 clients (inline requests only).
inline constexpr uint32_t kVersion = 2;
inline constexpr uint32_t kMinVersion = 1;

// Hello::slots and Hello::slot_bytes: 1..kMaxSlots slots of kMinSlotBytes up to the
// server's max_message_bytes (ServerInfo limits), a multiple of kAlign; the segment
// (SegmentBytes) at most kMaxSegmentBytes.
inline constexpr uint32_t kMaxSlots = 1024;
inline constexpr uint64_t kMinSlotBytes = 4096;
inline constexpr uint64_t kAlign = 64;
inline constexpr uint64_t kMaxSegmentBytes = uint64_t{4} << 30;

// Client -> server, the first 24 bytes on the socket.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t reserved;  // 0
  uint64_t slot_bytes;
};
static_assert(sizeof(Hello) == 24);

// Server -> client, the answer to the Hello.
struct Welcome {
  uint32_t magic;
  uint32_t version;  // the server's (kVersion)
  int32_t code;      // a gRPC status code; 0: the session is open and the fds came with it
  uint32_t reserved;
  uint64_t segment_bytes;
  char message[256];  // why the session was refused, NUL-terminated; empty on OK
};
static_assert(sizeof(Welcome) == 280);

struct SegmentHeader {
  uint32_t magic;
  uint32_t version;  // the session's: the Hello's
  uint32_t slots;
  uint32_t reserved;
  uint64_t slot_bytes;
  // Non-zero while the server's poller may be asleep: ring the doorbell after a request.
  uint32_t server_sleeping;
  uint8_t padding[kAlign - 28];
};
static_assert(sizeof(SegmentHeader) == kAlign);

struct SlotControl {
  // Written by the client.
  uint32_t request_seq;
  uint32_t request_bytes;  // the serialized MatMulRequest's length
  int64_t timeout_ns;      // the request's deadline from when the server takes it; 0: none
  uint32_t input_bytes;    // the rows beside the message; 0: inline (version 1 leaves it 0)
  uint8_t client_padding[kAlign - 20];
  // Written by the server, except client_waiting.
  uint32_t response_seq;
  uint32_t client_waiting;  // set by a client about to sleep on response_seq
  int32_t code;             // the answer's gRPC status code
  uint32_t response_bytes;  // the message's (or the error text's) length
  uint32_t output_bytes;    // the result rows beside the message; 0: inline or an error
  uint8_t server_padding[kAlign - 20];
};
static_assert(sizeof(SlotControl) == 2 * kAlign);

inline constexpr uint64_t kSlotControlOffset = sizeof(SegmentHeader);

// Where a message starts in its area after `rows_bytes` of rows: the next kAlign boundary.
inline constexpr uint64_t MessageOffset(uint64_t rows_bytes) {
  return (rows_bytes + kAlign - 1) / kAlign * kAlign;
}

inline constexpr uint64_t RequestAreaOffset(uint64_t slots, uint64_t slot_bytes, uint64_t slot) {
  return kSlotControlOffset + slots * sizeof(SlotControl) + slot * 2 * slot_bytes;
}
inline constexpr uint64_t ResponseAreaOffset(uint64_t slots, uint64_t slot_bytes, uint64_t slot) {
  return RequestAreaOffset(slots, slot_bytes, slot) + slot_bytes;
}
// The whole segment; the caller checks the limits above first (so that nothing overflows).
inline constexpr uint64_t SegmentBytes(uint64_t slots, uint64_t slot_bytes) {
  return RequestAreaOffset(slots, slot_bytes, slots);
}

}  // namespace qmm::local

#endif  // QMM_PROTO_LOCAL_LOCAL_LAYOUT_H_
