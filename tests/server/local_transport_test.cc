// The local transport (server/local_transport.h) through its client (client/local_channel.h)
// and through raw segment writes: results against gRPC's and the float64 reference, many
// callers batched together, one thread's requests in flight on many slots, every refusal of a Hello
// and of a request, a client that goes away, deadlines, and shutdown with sessions open.
#include "server/local_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/local_channel.h"
#include "proto/local/local_ipc.h"
#include "server/cpu_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm::testing {
namespace {

// `text` contains `part`.
void ExpectSays(absl::string_view text, absl::string_view part) {
  EXPECT_TRUE(absl::StrContains(text, part)) << "\"" << text << "\" lacks \"" << part << "\"";
}

constexpr int64_t kN = 96;
constexpr int64_t kK = 256;

std::string SocketPath(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("qmm-local-", getpid(), "-", tag, ".sock"))
      .string();
}

// A connection that speaks the protocol by hand, for what LocalChannel never sends.
struct RawSession {
  local::Fd socket;
  local::Welcome welcome{};
  local::Fd fds[2];
  int received = 0;
};

local::Fd ConnectRaw(const std::string& path) {
  absl::StatusOr<local::Fd> fd = local::ConnectUnix(path);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? *std::move(fd) : local::Fd();
}

RawSession Handshake(const std::string& path, const local::Hello& hello) {
  RawSession s;
  s.socket = ConnectRaw(path);
  EXPECT_TRUE(local::SendWithFds(s.socket.get(), std::as_bytes(std::span(&hello, 1)), {}).ok());
  absl::StatusOr<int> n = local::ReceiveWithFds(
      s.socket.get(), std::as_writable_bytes(std::span(&s.welcome, 1)), s.fds);
  EXPECT_TRUE(n.ok()) << n.status();
  s.received = n.value_or(0);
  return s;
}

local::Hello GoodHello(uint32_t slots = 1, uint64_t slot_bytes = 1 << 16) {
  return {.magic = local::kMagic,
          .version = local::kVersion,
          .slots = slots,
          .reserved = 0,
          .slot_bytes = slot_bytes};
}

class LocalTransportTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(ServerOptions options) {
    path_ = SocketPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    options.local_listen = path_;
    options.max_message_bytes = 4 << 20;
    options.max_rows = 512;
    server_ = StartGatedServer(std::move(options), &port_, &gate_, /*workers=*/1);
    ASSERT_NE(server_, nullptr);
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    stub_ = v1::Qmm::NewStub(channel_);
    weight_ = &weights_.Upload(*stub_, "w", Scheme::kW4A16, {.n = kN, .k = kK}, 7);
  }

  std::unique_ptr<LocalChannel> Connect(int slots = 1, int64_t slot_bytes = 1 << 16) {
    absl::StatusOr<std::unique_ptr<LocalChannel>> channel =
        LocalChannel::Connect(path_, {.slots = slots, .slot_bytes = slot_bytes});
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? *std::move(channel) : nullptr;
  }

  v1::MatMulRequest Request(int64_t m, uint32_t seed, DType dtype = DType::kF16,
                            const std::string& weight = "w") {
    return MakeMatMulRequest(weight, dtype, m, kK, RandomFloats(m * kK, seed),
                             v1::DTYPE_UNSPECIFIED);
  }

  // Closes the gate and has `channel` send a request on `slot` from a thread of its own,
  // which takes the worker (one) until the gate opens; that request must succeed.
  std::thread HoldTheWorker(LocalChannel& channel, int slot) {
    gate_->Close();
    std::thread holder([this, &channel, slot] {
      v1::MatMulResponse response;
      const absl::Status s = channel.MatMul(slot, Request(1, 100 + slot), &response);
      EXPECT_TRUE(s.ok()) << s;
    });
    EXPECT_TRUE(gate_->WaitForCalls(1));
    return holder;
  }

  // The request's result checked against the float64 reference.
  void ExpectCorrect(const v1::MatMulRequest& request, const v1::MatMulResponse& response,
                     DType dtype) {
    const int64_t m = request.input().shape(0);
    ASSERT_EQ(response.output().shape_size(), 2);
    EXPECT_EQ(response.output().shape(0), m);
    EXPECT_EQ(response.output().shape(1), kN);
    ExpectMatchesReference(*weight_, FromBytes(dtype, request.input().data()), m,
                           FromBytes(dtype, response.output().data()), dtype);
  }

  std::string path_;
  int port_ = 0;
  GatedBackend* gate_ = nullptr;
  std::unique_ptr<QmmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Qmm::Stub> stub_;
  ReferenceWeights weights_;
  const PackedWeight* weight_ = nullptr;
};

TEST_F(LocalTransportTest, AnswersAsGrpcDoesForEveryDtypeAndShape) {
  std::unique_ptr<LocalChannel> channel = Connect(1, 1 << 20);
  ASSERT_NE(channel, nullptr);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t m : {1, 5, 64}) {
      const v1::MatMulRequest request = Request(m, static_cast<uint32_t>(m) * 3 + 1, dtype);
      v1::MatMulResponse local;
      local.mutable_output()->set_data("poison");
      const absl::Status s = channel->MatMul(0, request, &local);
      ASSERT_TRUE(s.ok()) << s;
      ExpectCorrect(request, local, dtype);
      EXPECT_GT(local.compute_ns(), 0);
      grpc::ClientContext context;
      v1::MatMulResponse remote;
      ASSERT_TRUE(stub_->MatMul(&context, request, &remote).ok());
      EXPECT_EQ(local.output().data(), remote.output().data()) << DTypeName(dtype) << " m=" << m;
      EXPECT_EQ(local.output().dtype(), remote.output().dtype());
    }
  }
}

TEST_F(LocalTransportTest, SixtyFourCallersGetTheirOwnRowsFromSharedLaunches) {
  constexpr int kCallers = 64;
  constexpr int kSessions = 4;
  std::vector<std::unique_ptr<LocalChannel>> sessions;
  for (int i = 0; i < kSessions; ++i) sessions.push_back(Connect(kCallers / kSessions));
  // The first launch is held while every caller queues its first request.
  gate_->Close();
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 8; ++i) {
        const int64_t m = 1 + (c + i) % 3;
        const v1::MatMulRequest request = Request(m, 1000 + c * 8 + i);
        v1::MatMulResponse response;
        const absl::Status s = sessions[c % kSessions]->MatMul(c / kSessions, request, &response);
        if (!s.ok()) {
          ++failures;
          ADD_FAILURE() << s;
          continue;
        }
        ExpectCorrect(request, response, DType::kF16);
      }
    });
  }
  ASSERT_TRUE(gate_->WaitForCalls(1));
  absl::SleepFor(absl::Milliseconds(200));
  gate_->Open();
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
  const BatchStats stats = server_->batcher().stats();
  EXPECT_EQ(stats.requests, kCallers * 8);
  EXPECT_GT(stats.multi_request_launches, 0);
  EXPECT_GT(stats.max_requests_per_launch, 8);
}

TEST_F(LocalTransportTest, OneThreadKeepsManySlotsInFlight) {
  constexpr int kSlots = 12;
  std::unique_ptr<LocalChannel> channel = Connect(kSlots);
  ASSERT_NE(channel, nullptr);
  v1::MatMulResponse response;
  EXPECT_EQ(channel->Receive(0, &response).code(), absl::StatusCode::kFailedPrecondition);
  // Every slot sent while the worker is held, so that they share the next launch; answers
  // taken in another order than the requests went.
  std::thread holder = HoldTheWorker(*channel, 0);
  std::vector<v1::MatMulRequest> requests;
  for (int slot = 1; slot < kSlots; ++slot) {
    requests.push_back(Request(1 + slot % 3, 500 + slot));
    ASSERT_TRUE(channel->Send(slot, requests.back()).ok());
  }
  const absl::Status again = channel->Send(1, requests[0]);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  ExpectSays(again.message(), "local slot 1 still holds a request");
  for (int i = 0; i < 5000 && server_->batcher().stats().waiting_requests < kSlots - 1; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  gate_->Open();
  holder.join();
  for (int slot = kSlots - 1; slot >= 1; --slot) {
    response.mutable_output()->set_data("poison");
    const absl::Status s = channel->Receive(slot, &response);
    ASSERT_TRUE(s.ok()) << s;
    ExpectCorrect(requests[slot - 1], response, DType::kF16);
  }
  const BatchStats stats = server_->batcher().stats();
  EXPECT_EQ(stats.requests, kSlots);
  EXPECT_EQ(stats.max_requests_per_launch, kSlots - 1);
  // A slot is free again once its answer was taken.
  ExpectSays(channel->Receive(3, &response).message(), "local slot 3 has no request");
  ASSERT_TRUE(channel->MatMul(3, requests[0], &response).ok());
  ExpectCorrect(requests[0], response, DType::kF16);
}

TEST_F(LocalTransportTest, RefusesBadRequestsWithGrpcsCodesAndChangesNothing) {
  std::unique_ptr<LocalChannel> channel = Connect(2, 8192);
  ASSERT_NE(channel, nullptr);
  v1::MatMulResponse response;
  absl::Status s = channel->MatMul(0, Request(1, 1, DType::kF16, "nope"), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  ExpectSays(s.message(), "nope");

  v1::MatMulRequest wrong_k = MakeMatMulRequest("w", DType::kF16, 1, kK + 1,
                                                RandomFloats(kK + 1, 2), v1::DTYPE_UNSPECIFIED);
  s = channel->MatMul(1, wrong_k, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectSays(s.message(), "257");

  // 32 fp32 rows of 96 values: 12 KB of result, more than the 8 KB slot.
  s = channel->MatMul(0, Request(32, 3, DType::kF32), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  ExpectSays(s.message(), "slot_bytes = 8192");

  // Over the slot on the client's side: never sent.
  s = channel->MatMul(0, Request(16, 4, DType::kF32), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  ExpectSays(s.message(), "exceed the session's slot_bytes");

  s = channel->MatMul(2, Request(1, 5), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectSays(s.message(), "slot = 2");

  // M above the server's max_rows (512), in a slot large enough for it.
  std::unique_ptr<LocalChannel> big = Connect(1, 1 << 20);
  s = big->MatMul(0, Request(513, 6), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectSays(s.message(), "512");

  // Nothing ran, and the sessions still serve.
  EXPECT_EQ(server_->batcher().stats().requests, 0);
  const v1::MatMulRequest good = Request(2, 7);
  ASSERT_TRUE(channel->MatMul(1, good, &response).ok());
  ExpectCorrect(good, response, DType::kF16);
}

TEST_F(LocalTransportTest, RefusesBadHellos) {
  struct Case {
    local::Hello hello;
    absl::StatusCode code;
    const char* says;
  };
  local::Hello magic = GoodHello();
  magic.magic = 0x12345678;
  local::Hello version = GoodHello();
  version.version = 3;
  local::Hello reserved = GoodHello();
  reserved.reserved = 1;
  const Case cases[] = {
      {magic, absl::StatusCode::kInvalidArgument, "Hello.magic = 0x12345678"},
      {version, absl::StatusCode::kFailedPrecondition, "Hello.version = 3"},
      {reserved, absl::StatusCode::kInvalidArgument, "Hello.reserved = 1"},
      {GoodHello(0), absl::StatusCode::kInvalidArgument, "Hello.slots = 0 must be in [1, 1024]"},
      {GoodHello(1025), absl::StatusCode::kInvalidArgument, "Hello.slots = 1025"},
      {GoodHello(1, 1024), absl::StatusCode::kInvalidArgument, "Hello.slot_bytes = 1024"},
      {GoodHello(1, 4100), absl::StatusCode::kInvalidArgument, "a multiple of 64"},
      {GoodHello(1, (4 << 20) + 64), absl::StatusCode::kInvalidArgument,
       "max_message_bytes = 4194304"},
      {GoodHello(1024, 4 << 20), absl::StatusCode::kResourceExhausted, "segment of"},
  };
  for (const Case& c : cases) {
    RawSession s = Handshake(path_, c.hello);
    EXPECT_EQ(s.welcome.magic, local::kMagic);
    EXPECT_EQ(s.welcome.code, static_cast<int32_t>(c.code)) << s.welcome.message;
    ExpectSays(std::string(s.welcome.message), c.says);
    EXPECT_EQ(s.received, 0);
  }
  // The same through the client.
  absl::StatusOr<std::unique_ptr<LocalChannel>> channel =
      LocalChannel::Connect(path_, {.slots = 0});
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->local_sessions(), 0);
  EXPECT_EQ(LocalChannel::Connect(SocketPath("nobody"), {}).status().code(),
            absl::StatusCode::kUnavailable);
}

// A session whose slots the test writes by hand.
struct MappedSession {
  MappedSession(const std::string& path, const local::Hello& hello) {
    RawSession s = Handshake(path, hello);
    EXPECT_EQ(s.welcome.code, 0) << s.welcome.message;
    EXPECT_EQ(s.received, 2);
    doorbell = std::move(s.fds[1]);
    absl::StatusOr<local::Segment> mapped =
        local::Segment::Map(std::move(s.fds[0]), hello.slots, hello.slot_bytes);
    EXPECT_TRUE(mapped.ok()) << mapped.status();
    if (mapped.ok()) segment = *std::move(mapped);
    socket = std::move(s.socket);
  }

  // Publishes what the request area of `slot` holds and waits for the answer.
  void Send(uint64_t slot, uint32_t bytes, int64_t timeout_ns, uint32_t input_bytes = 0) {
    local::SlotControl& c = segment.control(slot);
    c.request_bytes = bytes;
    c.input_bytes = input_bytes;
    c.timeout_ns = timeout_ns;
    const uint32_t seq = local::Shared(c.request_seq).load() + 1;
    local::Shared(c.request_seq).store(seq, std::memory_order_release);
    const uint64_t one = 1;
    ASSERT_EQ(write(doorbell.get(), &one, 8), 8);
    for (int i = 0; i < 5000 && local::Shared(c.response_seq).load() != seq; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(local::Shared(c.response_seq).load(), seq);
  }
  // Writes `bytes` into the request area of `slot` at `offset`.
  void Write(uint64_t slot, uint64_t offset, const std::string& bytes) {
    std::memcpy(segment.request_area(slot).data() + offset, bytes.data(), bytes.size());
  }
  // The answer's first `bytes` from `offset` (the error text, or a message).
  std::string Answer(uint64_t slot, uint64_t offset, uint64_t bytes) const {
    return std::string(reinterpret_cast<const char*>(segment.response_area(slot).data()) + offset,
                       bytes);
  }
  std::string ErrorText(uint64_t slot) const {
    return Answer(slot, 0, segment.control(slot).response_bytes);
  }

  local::Fd socket;
  local::Fd doorbell;
  local::Segment segment;
};

TEST_F(LocalTransportTest, SurvivesGarbageInTheSegment) {
  MappedSession s(path_, GoodHello(4, 8192));
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    const uint64_t slot = round % 4;
    std::span<std::byte> area = s.segment.request_area(slot);
    for (std::byte& b : area) b = static_cast<std::byte>(rng());
    // Every other round claims rows beside the message.
    s.Send(slot, static_cast<uint32_t>(rng() % 8192), 0,
           round % 2 == 0 ? 0 : static_cast<uint32_t>(rng() % 8192));
    const local::SlotControl& c = s.segment.control(slot);
    EXPECT_NE(c.code, 0);
    EXPECT_LE(c.response_bytes, 8192u);
    EXPECT_EQ(c.output_bytes, 0u);
  }
  s.Send(0, 9000, 0);
  EXPECT_EQ(s.segment.control(0).code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  ExpectSays(s.ErrorText(0), "request_bytes = 9000 exceeds the session's slot_bytes = 8192");
  const std::string valid = Request(1, 12).SerializeAsString();
  s.Write(1, 0, valid);
  s.Send(1, static_cast<uint32_t>(valid.size()), -5);
  ExpectSays(s.ErrorText(1), "timeout_ns = -5 must not be negative");
  s.Send(1, static_cast<uint32_t>(valid.size()), 0);
  EXPECT_EQ(s.segment.control(1).code, 0);
  // The server still serves everyone.
  std::unique_ptr<LocalChannel> channel = Connect();
  v1::MatMulResponse response;
  EXPECT_TRUE(channel->MatMul(0, Request(1, 13), &response).ok());
}

// `request` without input.data, as a version 2 client sends it beside its rows.
std::string MessageWithoutRows(v1::MatMulRequest request) {
  request.mutable_input()->clear_data();
  return request.SerializeAsString();
}

TEST_F(LocalTransportTest, ServesVersionOneClientsInline) {
  local::Hello hello = GoodHello(1, 8192);
  hello.version = 1;
  MappedSession s(path_, hello);
  EXPECT_EQ(s.segment.header().version, 1u);
  const v1::MatMulRequest request = Request(3, 31);
  const std::string message = request.SerializeAsString();
  s.Write(0, 0, message);
  s.Send(0, static_cast<uint32_t>(message.size()), 0);
  const local::SlotControl& c = s.segment.control(0);
  ASSERT_EQ(c.code, 0) << s.ErrorText(0);
  EXPECT_EQ(c.output_bytes, 0u);
  v1::MatMulResponse response;
  ASSERT_TRUE(response.ParseFromString(s.Answer(0, 0, c.response_bytes)));
  ExpectCorrect(request, response, DType::kF16);
}

TEST_F(LocalTransportTest, AnswersRowsBesideTheMessageBesideItsAnswer) {
  MappedSession s(path_, GoodHello(1, 8192));
  const local::SlotControl& c = s.segment.control(0);
  const v1::MatMulRequest request = Request(2, 41);
  const std::string& rows = request.input().data();  // 1024 bytes
  const std::string message = MessageWithoutRows(request);
  s.Write(0, 0, rows);
  s.Write(0, 1024, message);
  std::memset(s.segment.response_area(0).data(), 0xFF, 8192);  // poison
  s.Send(0, static_cast<uint32_t>(message.size()), 0, 1024);
  ASSERT_EQ(c.code, 0) << s.ErrorText(0);
  ASSERT_EQ(c.output_bytes, 2u * kN * 2);
  v1::MatMulResponse response;
  ASSERT_TRUE(response.ParseFromString(
      s.Answer(0, local::MessageOffset(c.output_bytes), c.response_bytes)));
  EXPECT_TRUE(response.output().data().empty());
  response.mutable_output()->set_data(s.Answer(0, 0, c.output_bytes));
  ExpectCorrect(request, response, DType::kF16);

  // The message still holding its rows; rows of the wrong size; more than the slot.
  s.Write(0, 1024, request.SerializeAsString());
  s.Send(0, static_cast<uint32_t>(request.ByteSizeLong()), 0, 1024);
  EXPECT_EQ(c.code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  ExpectSays(s.ErrorText(0), "input.data is 1024 bytes but must be empty");
  s.Write(0, 1024, message);
  s.Send(0, static_cast<uint32_t>(message.size()), 0, 1000);
  EXPECT_EQ(c.code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  ExpectSays(s.ErrorText(0), "the rows beside the message (input_bytes) is 1000 bytes");
  s.Send(0, 300, 0, 8000);
  EXPECT_EQ(c.code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  ExpectSays(s.ErrorText(0), "input_bytes = 8000 and request_bytes = 300");
  EXPECT_EQ(c.output_bytes, 0u);

  // A result that does not fit beside the answer's message: one row of a 4096-wide weight.
  weights_.Upload(*stub_, "wide", Scheme::kW4A16, {.n = 4096, .k = kK}, 8);
  const v1::MatMulRequest wide = Request(1, 42, DType::kF16, "wide");
  s.Write(0, 0, wide.input().data());
  const std::string wide_message = MessageWithoutRows(wide);
  s.Write(0, 512, wide_message);
  s.Send(0, static_cast<uint32_t>(wide_message.size()), 0, 512);
  EXPECT_EQ(c.code, static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  ExpectSays(s.ErrorText(0), "the result's 8192 bytes do not fit");
  EXPECT_EQ(server_->batcher().stats().requests, 1);
}

// A backend whose device reads host memory (the gate plays one): launches of several
// requests with fp16 rows run in place through MatMulBlocks; bf16 rows, copied out first,
// and lone requests, through MatMul. Registrations end with their sessions.
TEST_F(LocalTransportTest, RegisteredSessionsRunThroughMatMulBlocks) {
  gate_->RegistersHost(true);
  constexpr int kCallers = 32;
  constexpr int kSessions = 4;
  std::vector<std::unique_ptr<LocalChannel>> sessions;
  for (int i = 0; i < kSessions; ++i) sessions.push_back(Connect(kCallers / kSessions));
  EXPECT_EQ(gate_->registrations(), kSessions);
  gate_->Close();
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 4; ++i) {
        const DType dtype = i == 3 ? DType::kBF16 : DType::kF16;
        const v1::MatMulRequest request = Request(1 + (c + i) % 3, 2000 + c * 4 + i, dtype);
        v1::MatMulResponse response;
        const absl::Status s = sessions[c % kSessions]->MatMul(c / kSessions, request, &response);
        ASSERT_TRUE(s.ok()) << s;
        ExpectCorrect(request, response, dtype);
      }
    });
  }
  ASSERT_TRUE(gate_->WaitForCalls(1));
  absl::SleepFor(absl::Milliseconds(200));
  gate_->Open();
  for (std::thread& t : callers) t.join();
  int blocks = 0, most = 0;
  for (const GatedBackend::Call& call : gate_->calls()) {
    if (!call.blocks) continue;
    EXPECT_EQ(call.x_dtype, DType::kF16);
    ++blocks;
    most = std::max<int>(most, static_cast<int>(call.m));
  }
  EXPECT_GT(blocks, 0);
  EXPECT_GT(most, 8);  // rows of many requests in one call
  sessions.clear();
  for (int i = 0; i < 5000 && gate_->registrations() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(gate_->registrations(), 0);
}

// LocalChannel sends a request's message without its rows by copying every other field by
// name: a field added to either message must be added there too.
TEST(LocalChannelTest, KnowsEveryFieldOfTheRequest) {
  EXPECT_EQ(v1::MatMulRequest::descriptor()->field_count(), 3);
  EXPECT_EQ(v1::Tensor::descriptor()->field_count(), 3);
}

// --local_pinned_bytes bounds what sessions register; a session beyond it is served with
// host copies, and the budget comes back when a registered session ends.
TEST_F(LocalTransportTest, PinnedBytesBoundTheRegisteredSessions) {
  server_.reset();
  ServerOptions options;
  options.local_pinned_bytes = static_cast<int64_t>(local::SegmentBytes(2, 8192));
  Start(std::move(options));
  gate_->RegistersHost(true);
  std::unique_ptr<LocalChannel> first = Connect(2, 8192);
  std::unique_ptr<LocalChannel> second = Connect(2, 8192);
  EXPECT_EQ(gate_->registrations(), 1);
  v1::MatMulResponse response;
  for (LocalChannel* channel : {first.get(), second.get()}) {
    const v1::MatMulRequest request = Request(2, 51);
    ASSERT_TRUE(channel->MatMul(1, request, &response).ok());
    ExpectCorrect(request, response, DType::kF16);
  }
  first.reset();
  for (int i = 0; i < 5000 && gate_->registrations() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  std::unique_ptr<LocalChannel> third = Connect(2, 8192);
  EXPECT_EQ(gate_->registrations(), 1);
}

TEST_F(LocalTransportTest, DropsTheQueuedRequestsOfAClientThatLeft) {
  std::unique_ptr<LocalChannel> holder = Connect();
  std::thread first = HoldTheWorker(*holder, 0);
  {
    // Queued behind the held launch, then gone.
    RawSession s = Handshake(path_, GoodHello(1, 8192));
    ASSERT_EQ(s.received, 2);
    absl::StatusOr<local::Segment> segment = local::Segment::Map(std::move(s.fds[0]), 1, 8192);
    ASSERT_TRUE(segment.ok());
    const std::string request = Request(1, 21).SerializeAsString();
    std::memcpy(segment->request_area(0).data(), request.data(), request.size());
    segment->control(0).request_bytes = static_cast<uint32_t>(request.size());
    local::Shared(segment->control(0).request_seq).store(1, std::memory_order_release);
    const uint64_t one = 1;
    ASSERT_EQ(write(s.fds[1].get(), &one, 8), 8);
    for (int i = 0; i < 5000 && server_->batcher().stats().waiting_requests == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(server_->batcher().stats().waiting_requests, 1);
  }
  for (int i = 0; i < 5000 && server_->local_sessions() != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(server_->local_sessions(), 1);
  gate_->Open();
  first.join();
  // The holder's answer may come before the worker takes the next batch, which drops it.
  for (int i = 0; i < 5000 && server_->batcher().stats().dropped_cancelled == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(server_->batcher().stats().dropped_cancelled, 1);
  EXPECT_EQ(server_->batcher().stats().requests, 1);
}

TEST_F(LocalTransportTest, DropsARequestWhoseDeadlinePassedInTheQueue) {
  std::unique_ptr<LocalChannel> channel = Connect(2);
  std::thread first = HoldTheWorker(*channel, 0);
  std::thread late([&] {
    v1::MatMulResponse response;
    const absl::Status s = channel->MatMul(1, Request(1, 31), &response, absl::Milliseconds(20));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  });
  absl::SleepFor(absl::Milliseconds(100));
  gate_->Open();
  first.join();
  late.join();
  EXPECT_EQ(server_->batcher().stats().dropped_deadline, 1);
  // The slot serves again.
  v1::MatMulResponse response;
  EXPECT_TRUE(channel->MatMul(1, Request(1, 32), &response).ok());
}

TEST_F(LocalTransportTest, ShutdownAnswersWhatItTookThenEndsTheSessions) {
  std::unique_ptr<LocalChannel> channel = Connect(2);
  std::thread running = HoldTheWorker(*channel, 0);
  std::thread stopper([&] { server_->Shutdown(); });
  absl::SleepFor(absl::Milliseconds(100));
  gate_->Open();
  stopper.join();
  running.join();
  EXPECT_FALSE(std::filesystem::exists(path_));
  v1::MatMulResponse response;
  EXPECT_EQ(channel->MatMul(1, Request(1, 41), &response).code(), absl::StatusCode::kUnavailable);
}

TEST_F(LocalTransportTest, DropsAClientThatNeverSaysHello) {
  local::Fd silent = ConnectRaw(path_);
  const absl::Time start = absl::Now();
  std::unique_ptr<LocalChannel> channel = Connect();  // waits for the silent one's second
  ASSERT_NE(channel, nullptr);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  char byte;
  EXPECT_EQ(read(silent.get(), &byte, 1), 0);  // closed by the server
}

std::unique_ptr<Backend> OneWorkerCpu() {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  options.num_workers = 1;
  return CreateCpuBackend(options);
}

TEST(LocalTransportOptionsTest, RefusesBadOptions) {
  ExpectSays(CheckLocalTransportOptions({.path = "x", .threads = 0}).message(),
             "local_threads = 0");
  ExpectSays(CheckLocalTransportOptions({.path = "x", .spin = absl::Seconds(2)}).message(),
             "local_spin = 2s");
  ExpectSays(CheckLocalTransportOptions({.path = "x", .max_sessions = 0}).message(),
             "max_sessions = 0");

  ServerOptions tls;
  tls.local_listen = SocketPath("tls");
  tls.tls.cert_file = "cert.pem";
  tls.tls.key_file = "key.pem";
  QmmServer refused(OneWorkerCpu(), tls);
  absl::StatusOr<int> started = refused.Start();
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectSays(started.status().message(), "local_listen");

  const std::string file = SocketPath("file");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fclose(f);
  }
  ServerOptions taken;
  taken.local_listen = file;
  taken.listen_address = "127.0.0.1:0";
  QmmServer server(OneWorkerCpu(), taken);
  EXPECT_EQ(server.Start().status().code(), absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace qmm::testing
