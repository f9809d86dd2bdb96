// Batching through the whole in-process server, over gRPC: many concurrent unary and
// streaming callers on one weight, each result checked row by row; the batch statistics
// of ServerInfo; and every way a request can leave a queue without launching (a full
// queue, its deadline, its client cancelling, its weight deleted).
//
// The backend sits behind a gate (tests/server/gated_backend.h) so that a launch is
// running while the requests under test arrive. Built twice: with the CPU backend (label
// `cpu`), where a batched result must equal the request run alone bit for bit, and with
// QMM_BATCHING_TEST_CUDA (label `gpu`) on the CUDA backend, where results are held to the
// float64 reference within the fp16-activation tolerance.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/reference.h"
#include "server/backend.h"
#include "server/cpu_backend.h"
#include "server/ordered_stream_reactor.h"
#include "server/proto_convert.h"
#include "server/server.h"
#include "tests/server/gated_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);
constexpr int64_t kN = 40;
constexpr int64_t kK = 256;

std::unique_ptr<Backend> MakeBackend(int workers) {
  BackendOptions options;
  options.num_workers = workers;
#ifdef QMM_BATCHING_TEST_CUDA
  options.kind = BackendOptions::Kind::kCuda;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
#else
  options.kind = BackendOptions::Kind::kCpu;
  options.cpu_threads = 1;
  return CreateCpuBackend(options);
#endif
}

// One request: what was sent and what came back.
struct Sent {
  v1::MatMulRequest request;
  std::vector<float> x;  // wire values
  int64_t m = 0;
  DType x_dtype = DType::kF32;
  DType y_dtype = DType::kF32;
  grpc::Status status;
  v1::MatMulResponse response;
};

class BatchingServerTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options, int workers = 2) {
    std::unique_ptr<Backend> backend = MakeBackend(workers);
    ASSERT_NE(backend, nullptr);
    auto gated = std::make_unique<GatedBackend>(std::move(backend));
    gate_ = gated.get();
    options.listen_address = "127.0.0.1:0";
    server_ = std::make_unique<QmmServer>(std::move(gated), options);
    absl::StatusOr<int> port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    for (int i = 0; i < kConnections; ++i) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(64 << 20);
      // A distinct argument gives each channel a connection of its own.
      args.SetInt("qmm.test.connection", i);
      stubs_.push_back(v1::Qmm::NewStub(grpc::CreateCustomChannel(
          absl::StrCat("127.0.0.1:", *port), grpc::InsecureChannelCredentials(), args)));
    }
    stub_ = stubs_.front().get();
  }

  void UploadWeight(const std::string& name, Scheme scheme = Scheme::kW8A16) {
    const WeightShape shape{kN, kK, scheme == Scheme::kW4A16 ? 128 : 0};
    const std::vector<float> values = RandomFloats(kN * kK, 42);
    const std::string payload = ToBytes(DType::kF32, values);
    const grpc::Status status =
        Upload(*stub_,
               MakeHeader(name, SchemeToProto(scheme), kN, kK, shape.group_size,
                          v1::SOURCE_ENCODING_FLOAT, v1::DTYPE_FP32, payload),
               payload);
    ASSERT_TRUE(status.ok()) << status.error_message();
    scheme_ = scheme;
    shape_ = shape;
    packed_ = PackLocally(scheme, shape, DType::kF32, values);
  }

  std::unique_ptr<Sent> MakeRequest(const std::string& weight, int64_t m,
                                    DType x_dtype = DType::kF32, DType y_dtype = DType::kF32) {
    auto sent = std::make_unique<Sent>();
    sent->m = m;
    sent->x_dtype = x_dtype;
    sent->y_dtype = y_dtype;
    uint32_t seed;
    {
      absl::MutexLock lock(&seed_mu_);
      seed = next_seed_++;
    }
    sent->request = MakeMatMulRequest(weight, x_dtype, m, kK, RandomFloats(m * kK, seed),
                                      DTypeToProto(y_dtype));
    sent->x = FromBytes(x_dtype, sent->request.input().data());
    return sent;
  }

  void Call(Sent& sent, absl::Duration timeout = kWait, grpc::ClientContext* context = nullptr,
            int connection = 0) {
    grpc::ClientContext own;
    if (context == nullptr) context = &own;
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    sent.status = stubs_[connection]->MatMul(context, sent.request, &sent.response);
  }

  // The request succeeded and its rows are right: on the CPU exactly what the request
  // gets alone, and within tolerance of the float64 reference everywhere.
  void ExpectCorrect(const Sent& sent) {
    ASSERT_TRUE(sent.status.ok()) << sent.status.error_message();
    const v1::Tensor& out = sent.response.output();
    ASSERT_EQ(out.shape_size(), 2);
    ASSERT_EQ(out.shape(0), sent.m);
    ASSERT_EQ(out.shape(1), kN);
    ASSERT_EQ(out.dtype(), DTypeToProto(sent.y_dtype));
    const PackedWeight w = *ViewPacked(scheme_, shape_, packed_);
    const std::vector<float> y = FromBytes(sent.y_dtype, out.data());
#ifdef QMM_BATCHING_TEST_CUDA
    // Each row against the reference: fp32 accumulation, activations in fp16 (bf16 for the
    // bf16 scheme or bf16 input), then the output rounding; W2A8 rounds to int8 per row.
    double tolerance = scheme_ == Scheme::kBf16 || sent.x_dtype == DType::kBF16 ? 1.6e-2 : 2e-3;
    if (scheme_ == Scheme::kW2A8) tolerance = 5e-3;
    if (sent.y_dtype == DType::kF16) tolerance += 0x1p-10;
    if (sent.y_dtype == DType::kBF16) tolerance += 0x1p-7;
    const std::vector<double> ref = ReferenceMatMul(w, sent.x.data(), sent.m);
    for (int64_t r = 0; r < sent.m; ++r) {
      double error = 0, scale = 0;
      for (int64_t c = 0; c < kN; ++c) {
        error = std::max(error, std::abs(y[r * kN + c] - ref[r * kN + c]));
        scale = std::max(scale, std::abs(ref[r * kN + c]));
      }
      EXPECT_LE(error, tolerance * scale) << "row " << r << " of an M=" << sent.m << " request";
    }
#else
    absl::StatusOr<std::unique_ptr<BackendWeight>> alone_weight = lone_->Load(w);
    ASSERT_TRUE(alone_weight.ok());
    std::string alone(out.data().size(), '\x7f');
    const MatMulCall call{.weight = alone_weight->get(),
                          .x_dtype = sent.x_dtype,
                          .x = sent.request.input().data().data(),
                          .m = sent.m,
                          .y_dtype = sent.y_dtype,
                          .y = alone.data()};
    ASSERT_TRUE(lone_->MatMul(0, call).ok());
    EXPECT_TRUE(out.data() == alone) << "a batched result differs from the request run alone";
    ExpectMatchesReference(w, sent.x, sent.m, y, sent.y_dtype);
#endif
  }

  v1::BatchingStats Stats() {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    const grpc::Status status = stub_->ServerInfo(&context, v1::ServerInfoRequest(), &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return info.batching();
  }

  // Polls ServerInfo until `done` holds for its batching statistics.
  template <typename Predicate>
  bool WaitForStats(Predicate done) {
    const absl::Time until = absl::Now() + kWait;
    while (absl::Now() < until) {
      if (done(Stats())) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }

  bool WaitForWaiting(int64_t requests) {
    return WaitForStats(
        [&](const v1::BatchingStats& s) { return s.waiting_requests() == requests; });
  }

  std::vector<int64_t> CallRows() const {
    std::vector<int64_t> rows;
    for (const GatedBackend::Call& c : gate_->calls()) rows.push_back(c.m);
    return rows;
  }

#ifndef QMM_BATCHING_TEST_CUDA
  // Runs requests alone, for the bit-for-bit comparison.
  std::unique_ptr<Backend> lone_ = [] {
    BackendOptions options;
    options.kind = BackendOptions::Kind::kCpu;
    options.num_workers = 1;
    return CreateCpuBackend(options);
  }();
#endif
  GatedBackend* gate_ = nullptr;  // owned by server_
  std::unique_ptr<QmmServer> server_;
  // Callers spread over several connections, as many clients of a real server would be.
  static constexpr int kConnections = 8;
  std::vector<std::unique_ptr<v1::Qmm::Stub>> stubs_;
  v1::Qmm::Stub* stub_ = nullptr;  // stubs_[0]
  Scheme scheme_ = Scheme::kW8A16;
  WeightShape shape_;
  std::vector<uint8_t> packed_;
  absl::Mutex seed_mu_;
  uint32_t next_seed_ ABSL_GUARDED_BY(seed_mu_) = 1000;
};

TEST_F(BatchingServerTest, SixtyFourCallersUnaryAndStreamingEachGetTheirOwnRows) {
  Start({});
  UploadWeight("w", Scheme::kW4A16);
  constexpr int kCallers = 64;
  constexpr int kStreams = 16;  // callers 0..15 use one MatMulStream each
  constexpr int kRequests = 4;
  // Three dtype pairs, so that launches must keep them apart.
  const DType kX[] = {DType::kF32, DType::kF16, DType::kBF16};
  const DType kY[] = {DType::kF32, DType::kF16, DType::kF32};
  std::vector<std::vector<std::unique_ptr<Sent>>> sent(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    for (int r = 0; r < kRequests; ++r) {
      sent[c].push_back(MakeRequest("w", 1 + (c + r) % 3, kX[c % 3], kY[c % 3]));
    }
  }
  // The first launch holds until every caller's first request waits behind it.
  gate_->Close();
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      if (c >= kStreams) {
        for (auto& s : sent[c]) Call(*s, kWait, nullptr, c % kConnections);
        return;
      }
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
      auto stream = stubs_[c % kConnections]->MatMulStream(&context);
      for (auto& s : sent[c]) {
        if (!stream->Write(s->request) || !stream->Read(&s->response)) break;
        s->status = grpc::Status::OK;
      }
      stream->WritesDone();
      const grpc::Status end = stream->Finish();
      EXPECT_TRUE(end.ok()) << end.error_message();
      for (auto& s : sent[c]) {
        if (s->response.output().data().empty())
          s->status = end.ok() ? grpc::Status::CANCELLED : end;
      }
    });
  }
  // Every caller's first request is in: launched (held at the gate) or waiting.
  int64_t first_rows = 0;
  for (const auto& requests : sent) first_rows += requests.front()->m;
  ASSERT_TRUE(WaitForStats([&](const v1::BatchingStats& s) {
    int64_t launched = 0;
    for (int64_t m : CallRows()) launched += m;
    return s.waiting_rows() + launched == first_rows;
  }));
  gate_->Open();
  for (std::thread& t : callers) t.join();

  for (const auto& requests : sent) {
    for (const auto& s : requests) ExpectCorrect(*s);
  }
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.requests(), kCallers * kRequests);
  EXPECT_GE(s.multi_request_launches(), 3);  // at least the three dtype groups after the gate
  EXPECT_GE(s.max_requests_per_launch(), 2);
  EXPECT_LT(s.launches(), s.requests());
  EXPECT_EQ(s.launches(), std::ssize(gate_->calls()));
  EXPECT_EQ(s.waiting_requests(), 0);
  EXPECT_EQ(s.max_batch_rows(), 64);
  EXPECT_EQ(s.dropped_deadline() + s.dropped_cancelled() + s.rejected_queue_full() +
                s.dropped_weight_deleted(),
            0);
}

// A stream reads ahead: requests a client sends without waiting for the answers are in
// flight together (batched in one launch), answered in order, at most kMaxStreamInFlight
// of them at a time.
TEST_F(BatchingServerTest, OneStreamsRequestsSentAheadGoTogetherInOrder) {
  Start(ServerOptions{}, /*workers=*/1);
  UploadWeight("w");
  gate_->Close();
  const absl::Cleanup open = [this] { gate_->Open(); };
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto stream = stub_->MatMulStream(&context);
  constexpr int64_t kWindow = static_cast<int64_t>(kMaxStreamInFlight);
  constexpr int kSent = kWindow + 8;
  std::vector<std::unique_ptr<Sent>> sent;
  for (int i = 0; i < kSent; ++i) {
    sent.push_back(MakeRequest("w", 1));
    ASSERT_TRUE(stream->Write(sent.back()->request)) << i;
  }
  ASSERT_TRUE(gate_->WaitForCalls(1));       // the first launch (of one or more requests) is held
  const int64_t held = gate_->calls()[0].m;  // one row a request
  // The stream read a window's worth ahead: the rest of it waits behind that launch...
  ASSERT_TRUE(WaitForWaiting(kWindow - held)) << held << " held";
  // ...and no more.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Stats().waiting_requests(), kWindow - held);
  gate_->Open();
  for (int i = 0; i < kSent; ++i) {
    ASSERT_TRUE(stream->Read(&sent[i]->response)) << i;
    sent[i]->status = grpc::Status::OK;
    ExpectCorrect(*sent[i]);
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.requests(), kSent);
  // The held launch and the next one share the window's requests.
  EXPECT_GE(s.max_requests_per_launch(), kWindow / 2);
  EXPECT_LT(s.launches(), kSent);
}

// A failed request ends the stream with its status after the answers before it, once the
// requests after it that were in flight have run (they are not answered).
TEST_F(BatchingServerTest, AStreamEndsAtAFailedRequestAfterTheAnswersBeforeIt) {
  Start(ServerOptions{}, /*workers=*/1);
  UploadWeight("w");
  gate_->Close();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto stream = stub_->MatMulStream(&context);
  const absl::Cleanup open = [this] { gate_->Open(); };
  std::unique_ptr<Sent> first = MakeRequest("w", 2);
  std::unique_ptr<Sent> bad = MakeRequest("nope", 1);
  std::unique_ptr<Sent> third = MakeRequest("w", 1);
  ASSERT_TRUE(stream->Write(first->request));
  ASSERT_TRUE(gate_->WaitForCalls(1));  // held
  ASSERT_TRUE(stream->Write(bad->request));
  ASSERT_TRUE(stream->Write(third->request));
  ASSERT_TRUE(WaitForWaiting(1));  // the third, queued behind the held launch
  gate_->Open();
  ASSERT_TRUE(stream->Read(&first->response));
  first->status = grpc::Status::OK;
  ExpectCorrect(*first);
  v1::MatMulResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("nope"), std::string::npos) << status.error_message();
  EXPECT_EQ(Stats().requests(), 2);  // the third ran; its answer was not sent
}

TEST_F(BatchingServerTest, ARequestLargerThanMaxBatchRowsRunsAloneAndRight) {
  ServerOptions options;
  options.max_batch_rows = 8;
  Start(options, /*workers=*/1);
  UploadWeight("w", Scheme::kW2A8);
  std::vector<std::unique_ptr<Sent>> sent;
  for (int64_t m : {1, 20, 1, 2}) sent.push_back(MakeRequest("w", m));
  gate_->Close();
  std::vector<std::thread> callers;
  callers.emplace_back([&] { Call(*sent[0]); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  for (size_t i = 1; i < sent.size(); ++i) {
    callers.emplace_back([&, i] { Call(*sent[i]); });
    ASSERT_TRUE(WaitForWaiting(static_cast<int64_t>(i)));
  }
  gate_->Open();
  for (std::thread& t : callers) t.join();
  for (const auto& s : sent) ExpectCorrect(*s);
  EXPECT_EQ(CallRows(), (std::vector<int64_t>{1, 20, 3}));
  EXPECT_EQ(Stats().max_rows_per_launch(), 20);
}

TEST_F(BatchingServerTest, AFullQueueAnswersResourceExhausted) {
  ServerOptions options;
  options.max_queue_rows = 4;
  Start(options, /*workers=*/1);
  UploadWeight("w");
  std::unique_ptr<Sent> running = MakeRequest("w", 1);
  std::unique_ptr<Sent> waiting = MakeRequest("w", 3);
  std::unique_ptr<Sent> refused = MakeRequest("w", 2);
  gate_->Close();
  std::thread first([&] { Call(*running); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  std::thread second([&] { Call(*waiting); });
  ASSERT_TRUE(WaitForWaiting(1));
  Call(*refused);
  EXPECT_EQ(refused->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused->status.error_message(),
                                "queue for weight \"w\" holds 3 rows, limit 4"))
      << refused->status.error_message();
  gate_->Open();
  first.join();
  second.join();
  ExpectCorrect(*running);
  ExpectCorrect(*waiting);
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.rejected_queue_full(), 1);
  EXPECT_EQ(s.max_queue_rows(), 4);
  EXPECT_EQ(s.requests(), 2);
}

TEST_F(BatchingServerTest, ARequestWhoseDeadlinePassesWhileQueuedNeverLaunches) {
  Start({}, /*workers=*/1);
  UploadWeight("w");
  std::unique_ptr<Sent> running = MakeRequest("w", 2);
  std::unique_ptr<Sent> late = MakeRequest("w", 3);
  gate_->Close();
  std::thread first([&] { Call(*running); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  Call(*late, absl::Milliseconds(200));
  EXPECT_EQ(late->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's copy of the deadline started when the request arrived, a little later.
  absl::SleepFor(absl::Milliseconds(100));
  gate_->Open();
  first.join();
  ExpectCorrect(*running);
  ASSERT_TRUE(WaitForStats([](const v1::BatchingStats& s) { return s.dropped_deadline() == 1; }));
  EXPECT_EQ(CallRows(), std::vector<int64_t>{2});
  EXPECT_EQ(Stats().waiting_requests(), 0);
}

TEST_F(BatchingServerTest, ARequestCancelledWhileQueuedNeverLaunches) {
  Start({}, /*workers=*/1);
  UploadWeight("w");
  std::unique_ptr<Sent> running = MakeRequest("w", 2);
  std::unique_ptr<Sent> cancelled = MakeRequest("w", 3);
  gate_->Close();
  std::thread first([&] { Call(*running); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  grpc::ClientContext context;
  std::thread second([&] { Call(*cancelled, kWait, &context); });
  ASSERT_TRUE(WaitForWaiting(1));
  context.TryCancel();
  second.join();
  EXPECT_EQ(cancelled->status.error_code(), grpc::StatusCode::CANCELLED);
  // The cancellation reaches the server asynchronously; give it time before the launch.
  absl::SleepFor(absl::Milliseconds(300));
  gate_->Open();
  first.join();
  ExpectCorrect(*running);
  ASSERT_TRUE(WaitForStats([](const v1::BatchingStats& s) { return s.dropped_cancelled() == 1; }));
  EXPECT_EQ(CallRows(), std::vector<int64_t>{2});
}

TEST_F(BatchingServerTest, DeletingAWeightFinishesTheLaunchAndFailsTheQueue) {
  Start({}, /*workers=*/1);
  UploadWeight("w");
  std::unique_ptr<Sent> running = MakeRequest("w", 2);
  std::vector<std::unique_ptr<Sent>> queued;
  for (int64_t m : {1, 3, 2}) queued.push_back(MakeRequest("w", m));
  gate_->Close();
  std::vector<std::thread> callers;
  callers.emplace_back([&] { Call(*running); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  for (auto& q : queued) callers.emplace_back([&, sent = q.get()] { Call(*sent); });
  ASSERT_TRUE(WaitForWaiting(3));
  {
    grpc::ClientContext context;
    v1::DeleteWeightRequest request;
    request.set_name("w");
    v1::DeleteWeightResponse response;
    const grpc::Status status = stub_->DeleteWeight(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  gate_->Open();
  for (std::thread& t : callers) t.join();
  ExpectCorrect(*running);
  for (const auto& q : queued) {
    EXPECT_EQ(q->status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_TRUE(
        absl::StrContains(q->status.error_message(), "was deleted while the request waited"))
        << q->status.error_message();
  }
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.dropped_weight_deleted(), 3);
  EXPECT_EQ(s.launches(), 1);
  // The weight's memory is given back once the last reference is dropped.
  const absl::Time until = absl::Now() + kWait;
  int64_t used = -1;
  while (absl::Now() < until) {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    ASSERT_TRUE(stub_->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
    used = info.memory_used_bytes();
    if (used == 0) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(used, 0);
}

// A shutdown whose grace runs out with one unary call launched and one queued behind it:
// both are cancelled, the launch still completes, and the shutdown ends without a crash
// or a hang (the batcher goes only after every request it held has finished).
TEST_F(BatchingServerTest, ShutdownEndsUnaryCallsLaunchedAndQueued) {
  ServerOptions options;
  options.shutdown_grace = absl::Milliseconds(200);
  Start(options, /*workers=*/1);
  UploadWeight("w");
  std::unique_ptr<Sent> running = MakeRequest("w", 2);
  std::unique_ptr<Sent> queued = MakeRequest("w", 3);
  gate_->Close();
  std::thread first([&] { Call(*running); });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  std::thread second([&] { Call(*queued); });
  ASSERT_TRUE(WaitForWaiting(1));
  std::thread shutdown([&] { server_->Shutdown(); });
  absl::SleepFor(absl::Milliseconds(500));  // past the grace: both calls cancelled
  gate_->Open();
  shutdown.join();
  first.join();
  second.join();
  EXPECT_FALSE(running->status.ok());
  EXPECT_FALSE(queued->status.ok());
  EXPECT_EQ(CallRows(), std::vector<int64_t>{2});
}

TEST(BatchingServerOptionsTest, BadBatchingOptionsStopTheStart) {
  auto start = [](void (*change)(ServerOptions&)) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    change(options);
    QmmServer server(MakeBackend(1), options);
    return server.Start().status();
  };
  absl::Status s = start([](ServerOptions& o) { o.max_batch_rows = 0; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_batch_rows = 0")) << s;
  s = start([](ServerOptions& o) { o.max_queue_delay = absl::Seconds(11); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_queue_delay = 11s")) << s;
  s = start([](ServerOptions& o) { o.max_queue_rows = -1; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_queue_rows = -1")) << s;
}

}  // namespace
}  // namespace qmm::testing
