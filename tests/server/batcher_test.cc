// The batcher on its own (no gRPC): a CPU backend behind a gate, so that "a launch runs
// while these requests arrive" happens exactly when a test says. Every batched result is
// checked against the same request run alone (bit for bit: the CPU kernels compute each
// row independently of the others) and against the float64 reference.
#include "server/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "server/cpu_backend.h"
#include "server/proto_convert.h"
#include "tests/server/gated_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::GatedBackend;

constexpr absl::Duration kWait = absl::Seconds(30);

struct Weight {
  std::string name;
  Scheme scheme;
  WeightShape shape;
  std::vector<uint8_t> packed;
  PackedWeight view() const { return *ViewPacked(scheme, shape, packed); }
};

// One request in flight: owns its message and response; `done` records the status.
struct Call {
  v1::MatMulRequest request;
  v1::MatMulResponse response;
  std::vector<float> x;  // the wire values, as the server sees them
  int64_t m = 0;
  DType x_dtype = DType::kF32;
  DType y_dtype = DType::kF32;
  std::atomic<bool> cancelled{false};
  absl::Status status;
  absl::Notification done;
};

class BatcherTest : public ::testing::Test {
 protected:
  void Init(const BatcherOptions& options, int workers = 2) {
    BackendOptions backend_options;
    backend_options.kind = BackendOptions::Kind::kCpu;
    backend_options.num_workers = workers;
    backend_options.cpu_threads = 1;
    backend_ = std::make_unique<GatedBackend>(CreateCpuBackend(backend_options));
    backend_options.num_workers = 1;
    lone_ = CreateCpuBackend(backend_options);
    store_ = std::make_unique<WeightStore>(int64_t{1} << 30);
    metrics_ = std::make_unique<Metrics>(MetricsOptions{});
    absl::StatusOr<std::unique_ptr<Batcher>> batcher =
        Batcher::Create(*backend_, *store_, *metrics_, options);
    ASSERT_TRUE(batcher.ok()) << batcher.status();
    batcher_ = *std::move(batcher);
  }

  Weight AddWeight(const std::string& name, Scheme scheme, WeightShape shape, uint32_t seed) {
    Weight w{name, scheme, shape,
             testing::PackLocally(scheme, shape, DType::kF32,
                                  testing::RandomFloats(shape.n * shape.k, seed))};
    absl::StatusOr<WeightStore::Reservation> reservation =
        store_->Reserve(name, static_cast<int64_t>(w.packed.size()));
    EXPECT_TRUE(reservation.ok()) << reservation.status();
    absl::StatusOr<std::unique_ptr<BackendWeight>> loaded = backend_->Load(w.view());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    const WeightDesc desc{scheme, shape, static_cast<int64_t>(w.packed.size())};
    EXPECT_TRUE(store_->Commit(*std::move(reservation), desc, *std::move(loaded)).ok());
    return w;
  }

  // Enqueues y = x W^T for random x [m, K]; the call must outlive its `done`.
  // `outlier`, when not 0, replaces the first activation.
  std::unique_ptr<Call> Submit(const Weight& w, int64_t m, DType x_dtype = DType::kF32,
                               DType y_dtype = DType::kF32,
                               absl::Time deadline = absl::InfiniteFuture(), float outlier = 0) {
    auto call = std::make_unique<Call>();
    call->m = m;
    call->x_dtype = x_dtype;
    call->y_dtype = y_dtype;
    std::vector<float> x = testing::RandomFloats(m * w.shape.k, next_seed_++);
    if (outlier != 0) x[0] = outlier;
    call->request =
        testing::MakeMatMulRequest(w.name, x_dtype, m, w.shape.k, x, DTypeToProto(y_dtype));
    call->x = testing::FromBytes(x_dtype, call->request.input().data());
    absl::StatusOr<MatMulJob> job = PrepareMatMul(call->request, *store_, ServiceLimits{});
    EXPECT_TRUE(job.ok()) << job.status();
    Call* c = call.get();
    batcher_->Enqueue(BatchRequest{
        .job = *std::move(job),
        .response = &c->response,
        .method = RpcMethod::kMatMul,
        .deadline = deadline,
        .cancelled = [c] { return c->cancelled.load(); },
        .done =
            [c](const absl::Status& status) {
              c->status = status;
              c->done.Notify();
            },
    });
    return call;
  }

  // The call finished OK with exactly what it gets run alone, which matches the reference.
  void ExpectCorrect(const Weight& w, Call& call) {
    ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(call.status.ok()) << call.status;
    const v1::Tensor& out = call.response.output();
    ASSERT_EQ(out.shape_size(), 2);
    EXPECT_EQ(out.shape(0), call.m);
    EXPECT_EQ(out.shape(1), w.shape.n);
    EXPECT_EQ(out.dtype(), DTypeToProto(call.y_dtype));
    EXPECT_GT(call.response.compute_ns(), 0);

    // The same request alone, on a backend of its own (the batcher's workers are busy).
    absl::StatusOr<std::unique_ptr<BackendWeight>> alone_weight = lone_->Load(w.view());
    ASSERT_TRUE(alone_weight.ok());
    std::string alone(out.data().size(), '\x7f');
    const MatMulCall lone{.weight = alone_weight->get(),
                          .x_dtype = call.x_dtype,
                          .x = call.request.input().data().data(),
                          .m = call.m,
                          .y_dtype = call.y_dtype,
                          .y = alone.data()};
    ASSERT_TRUE(lone_->MatMul(0, lone).ok());
    EXPECT_TRUE(out.data() == alone) << "a batched result differs from the request run alone";
    testing::ExpectMatchesReference(w.view(), call.x, call.m,
                                    testing::FromBytes(call.y_dtype, out.data()), call.y_dtype);
  }

  static void ExpectFails(Call& call, absl::StatusCode code, absl::string_view message) {
    ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(kWait));
    EXPECT_EQ(call.status.code(), code) << call.status;
    EXPECT_TRUE(absl::StrContains(call.status.message(), message)) << call.status;
    EXPECT_EQ(call.response.output().data().size(), 0u);
  }

  // Waits until `requests` requests are waiting in the batcher.
  bool WaitForWaiting(int64_t requests) {
    const absl::Time until = absl::Now() + kWait;
    while (absl::Now() < until) {
      if (batcher_->stats().waiting_requests == requests) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  // The queue gauges (qmm_queue_requests, qmm_queue_rows) as a scrape reads them.
  void ExpectQueueGauges(double requests, double rows) const {
    const testing::Exposition e = testing::Scrape(*metrics_);
    EXPECT_EQ(e.Value("qmm_queue_requests"), requests);
    EXPECT_EQ(e.Value("qmm_queue_rows"), rows);
  }

  std::vector<int64_t> CallRows() const {
    std::vector<int64_t> rows;
    for (const GatedBackend::Call& c : backend_->calls()) rows.push_back(c.m);
    return rows;
  }

  std::unique_ptr<GatedBackend> backend_;
  std::unique_ptr<Backend> lone_;
  std::unique_ptr<WeightStore> store_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Batcher> batcher_;
  uint32_t next_seed_ = 100;
};

TEST_F(BatcherTest, RejectsBadOptions) {
  EXPECT_EQ(CheckBatcherOptions({.max_batch_rows = 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBatcherOptions({.max_queue_delay = absl::Microseconds(-1)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBatcherOptions({.max_queue_rows = 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBatcherOptions({.max_queued_requests = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBatcherOptions({.worker_spin = absl::Microseconds(-1)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBatcherOptions({.completion_threads = -1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckBatcherOptions({.worker_spin = absl::Microseconds(50)}).ok());
  EXPECT_TRUE(CheckBatcherOptions({.completion_threads = 0}).ok());
  EXPECT_TRUE(CheckBatcherOptions({}).ok());
}

TEST_F(BatcherTest, AnIdleWeightLaunchesAtOnce) {
  Init({});
  const Weight w = AddWeight("w", Scheme::kW8A16, {24, 64, 0}, 1);
  std::unique_ptr<Call> call = Submit(w, 3);
  ExpectCorrect(w, *call);
  EXPECT_EQ(CallRows(), std::vector<int64_t>{3});
  const BatchStats s = batcher_->stats();
  EXPECT_EQ(s.launches, 1);
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.rows, 3);
  EXPECT_EQ(s.multi_request_launches, 0);
  EXPECT_EQ(s.waiting_requests, 0);
}

TEST_F(BatcherTest, RequestsArrivingDuringALaunchShareTheNextOne) {
  Init({}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW4A16, {40, 256, 128}, 2);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 2));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  int64_t rows = 0;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(Submit(w, 1 + i % 4));
    rows += 1 + i % 4;
  }
  ASSERT_TRUE(WaitForWaiting(12));
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  const std::vector<int64_t> launched = CallRows();
  EXPECT_EQ(launched, (std::vector<int64_t>{2, rows}));  // all twelve together
  const BatchStats s = batcher_->stats();
  EXPECT_EQ(s.launches, 2);
  EXPECT_EQ(s.requests, 13);
  EXPECT_EQ(s.multi_request_launches, 1);
  EXPECT_EQ(s.max_requests_per_launch, 12);
  EXPECT_EQ(s.max_rows_per_launch, rows);
}

TEST_F(BatcherTest, BatchesStopAtMaxBatchRowsWithoutSplittingARequest) {
  Init({.max_batch_rows = 8}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 128, 0}, 3);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 1));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  for (int64_t m : {3, 4, 2, 5, 1}) calls.push_back(Submit(w, m));
  ASSERT_TRUE(WaitForWaiting(5));
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  // 3+4 = 7 (2 more would make 9), then 2+5+1 = 8.
  const std::vector<int64_t> launched = CallRows();
  EXPECT_EQ(launched, (std::vector<int64_t>{1, 7, 8}));
  EXPECT_EQ(batcher_->stats().launches, 3);
}

// Large batches are finished in chunks on the completion threads, or by the worker
// itself without them; every request gets its own rows either way.
TEST_F(BatcherTest, EveryRequestOfABigBatchIsFinishedWithOrWithoutCompletionThreads) {
  for (int threads : {0, 3}) {
    SCOPED_TRACE(threads);
    Init({.max_batch_rows = 64, .completion_threads = threads}, /*workers=*/1);
    const Weight w = AddWeight("w", Scheme::kW8A16, {16, 128, 0}, 3);
    backend_->Close();
    std::vector<std::unique_ptr<Call>> calls;
    calls.push_back(Submit(w, 1));
    ASSERT_TRUE(backend_->WaitForCalls(1));
    for (int i = 0; i < 30; ++i) calls.push_back(Submit(w, 1 + i % 2));
    ASSERT_TRUE(WaitForWaiting(30));
    backend_->Open();
    for (auto& call : calls) ExpectCorrect(w, *call);
    EXPECT_EQ(batcher_->stats().launches, 2);
    EXPECT_EQ(batcher_->stats().max_requests_per_launch, 30);
    batcher_.reset();
  }
}

TEST_F(BatcherTest, ARequestLargerThanMaxBatchRowsRunsAlone) {
  Init({.max_batch_rows = 4}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kFp16, {8, 32, 0}, 4);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 1));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  calls.push_back(Submit(w, 9));
  calls.push_back(Submit(w, 1));
  calls.push_back(Submit(w, 2));
  ASSERT_TRUE(WaitForWaiting(3));
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  const std::vector<int64_t> launched = CallRows();
  EXPECT_EQ(launched, (std::vector<int64_t>{1, 9, 3}));
  EXPECT_EQ(batcher_->stats().max_rows_per_launch, 9);
}

TEST_F(BatcherTest, OnlyRequestsOfTheSameDtypesShareALaunch) {
  Init({}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {32, 128, 0}, 5);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 1));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  calls.push_back(Submit(w, 1, DType::kF32, DType::kF32));
  calls.push_back(Submit(w, 2, DType::kF16, DType::kF32));
  calls.push_back(Submit(w, 3, DType::kF32, DType::kF32));
  calls.push_back(Submit(w, 1, DType::kBF16, DType::kBF16));
  calls.push_back(Submit(w, 2, DType::kF16, DType::kF32));
  calls.push_back(Submit(w, 1, DType::kF32, DType::kF16));
  ASSERT_TRUE(WaitForWaiting(6));
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  // Oldest first; each launch takes the later requests of its head's dtypes.
  const std::vector<GatedBackend::Call> launched = backend_->calls();
  ASSERT_EQ(launched.size(), 5u);
  EXPECT_EQ(launched[1].m, 4);
  EXPECT_EQ(launched[1].x_dtype, DType::kF32);
  EXPECT_EQ(launched[1].y_dtype, DType::kF32);
  EXPECT_EQ(launched[2].m, 4);
  EXPECT_EQ(launched[2].x_dtype, DType::kF16);
  EXPECT_EQ(launched[3].m, 1);
  EXPECT_EQ(launched[3].x_dtype, DType::kBF16);
  EXPECT_EQ(launched[4].m, 1);
  EXPECT_EQ(launched[4].y_dtype, DType::kF16);
  EXPECT_EQ(batcher_->stats().launches, 5);
}

TEST_F(BatcherTest, ARequestWithValuesBeyondFp16RunsAlone) {
  Init({}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 18);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 1));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  const absl::Time never = absl::InfiniteFuture();
  calls.push_back(Submit(w, 1));
  calls.push_back(Submit(w, 2, DType::kF32, DType::kF32, never, 1e6f));
  calls.push_back(Submit(w, 3, DType::kBF16, DType::kF32, never, -3e5f));
  calls.push_back(Submit(w, 1, DType::kBF16, DType::kF32));
  calls.push_back(Submit(w, 4));
  // An fp16 value cannot exceed the range.
  calls.push_back(Submit(w, 1, DType::kF16, DType::kF32, never, 6e4f));
  calls.push_back(Submit(w, 1, DType::kF16, DType::kF32));
  ASSERT_TRUE(WaitForWaiting(7));
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  EXPECT_EQ(CallRows(), (std::vector<int64_t>{1, 5, 2, 3, 1, 2}));
}

TEST_F(BatcherTest, EverySchemeBatchesCorrectly) {
  Init({.max_batch_rows = 16}, /*workers=*/2);
  int seed = 10;
  for (Scheme scheme : kAllSchemes) {
    const WeightShape shape{19, 256, scheme == Scheme::kW4A16 ? 128 : 0};
    const Weight w = AddWeight(std::string(SchemeName(scheme)), scheme, shape, seed++);
    backend_->Close();
    std::vector<std::unique_ptr<Call>> calls;
    const int launched = static_cast<int>(backend_->calls().size());
    calls.push_back(Submit(w, 1));
    ASSERT_TRUE(backend_->WaitForCalls(launched + 1));
    for (int i = 0; i < 6; ++i) calls.push_back(Submit(w, 1 + i % 3, DType::kF16, DType::kF16));
    ASSERT_TRUE(WaitForWaiting(6));
    backend_->Open();
    for (auto& call : calls) ExpectCorrect(w, *call);
  }
  EXPECT_EQ(batcher_->stats().multi_request_launches, std::ssize(kAllSchemes));
}

TEST_F(BatcherTest, DifferentWeightsRunConcurrently) {
  Init({}, /*workers=*/2);
  const Weight a = AddWeight("a", Scheme::kW8A16, {16, 64, 0}, 6);
  const Weight b = AddWeight("b", Scheme::kW8A16, {24, 64, 0}, 7);
  // Hold only a's launches: b must not wait for them.
  backend_->Close([](const MatMulCall& call) { return call.weight->shape().n == 16; });
  std::unique_ptr<Call> on_a = Submit(a, 1);
  ASSERT_TRUE(backend_->WaitForCalls(1));
  std::unique_ptr<Call> on_b = Submit(b, 2);
  ASSERT_TRUE(on_b->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_FALSE(on_a->done.HasBeenNotified());
  backend_->Open();
  ExpectCorrect(a, *on_a);
  ExpectCorrect(b, *on_b);
}

TEST_F(BatcherTest, ASaturatedWeightUsesSeveralWorkersWithFullBatches) {
  Init({.max_batch_rows = 4}, /*workers=*/2);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 8);
  backend_->Close();
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Submit(w, 1));
  ASSERT_TRUE(backend_->WaitForCalls(1));
  for (int i = 0; i < 8; ++i) calls.push_back(Submit(w, 1));
  // A full batch waiting gets the second worker; the next full batch waits for a worker.
  ASSERT_TRUE(backend_->WaitForCalls(2));
  ASSERT_TRUE(WaitForWaiting(4));
  EXPECT_EQ(backend_->max_concurrent(), 2);
  backend_->Open();
  for (auto& call : calls) ExpectCorrect(w, *call);
  const std::vector<int64_t> launched = CallRows();
  EXPECT_EQ(launched, (std::vector<int64_t>{1, 4, 4}));
}

TEST_F(BatcherTest, QueueDelayGathersRequestsOfAnIdleWeight) {
  Init({.max_batch_rows = 4, .max_queue_delay = absl::Milliseconds(300)}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 9);
  const absl::Time start = absl::Now();
  std::unique_ptr<Call> first = Submit(w, 1);
  std::unique_ptr<Call> second = Submit(w, 2);
  ExpectCorrect(w, *first);
  ExpectCorrect(w, *second);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(CallRows(), std::vector<int64_t>{3});
  // A full batch does not wait.
  const absl::Time full_start = absl::Now();
  std::unique_ptr<Call> third = Submit(w, 2);
  std::unique_ptr<Call> fourth = Submit(w, 2);
  ASSERT_TRUE(third->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(fourth->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_LT(absl::Now() - full_start, absl::Milliseconds(250));
  ExpectCorrect(w, *third);
  ExpectCorrect(w, *fourth);
  EXPECT_EQ(batcher_->stats().launches, 2);
}

TEST_F(BatcherTest, FullQueuesRefuseWithResourceExhausted) {
  Init({.max_queue_rows = 8, .max_queued_requests = 4}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 11);
  const Weight v = AddWeight("v", Scheme::kW8A16, {16, 64, 0}, 12);
  const Weight u = AddWeight("u", Scheme::kW8A16, {16, 64, 0}, 17);
  backend_->Close();
  std::unique_ptr<Call> running = Submit(w, 1);
  ASSERT_TRUE(backend_->WaitForCalls(1));
  std::unique_ptr<Call> six = Submit(w, 6);
  std::unique_ptr<Call> three = Submit(w, 3);
  ExpectFails(*three, absl::StatusCode::kResourceExhausted,
              "queue for weight \"w\" holds 6 rows, limit 8");
  std::unique_ptr<Call> two = Submit(w, 2);  // exactly the limit
  // An empty queue takes any request; max_rows bounds it.
  std::unique_ptr<Call> big = Submit(v, 20);
  std::unique_ptr<Call> one = Submit(u, 1);
  std::unique_ptr<Call> fifth = Submit(u, 1);
  ExpectFails(*fifth, absl::StatusCode::kResourceExhausted, "hold 4 requests, limit 4");
  const BatchStats s = batcher_->stats();
  EXPECT_EQ(s.rejected_queue_full, 2);
  EXPECT_EQ(s.waiting_requests, 4);
  EXPECT_EQ(s.waiting_rows, 29);
  ExpectQueueGauges(4, 29);  // the refused requests were taken back off
  backend_->Open();
  ExpectCorrect(w, *running);
  ExpectCorrect(w, *six);
  ExpectCorrect(w, *two);
  ExpectCorrect(v, *big);
  ExpectCorrect(u, *one);
  ExpectQueueGauges(0, 0);
}

TEST_F(BatcherTest, OtherWorkSharesTheWorkersAndTheirQueueBound) {
  Init({.max_queued_requests = 2}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 19);
  absl::Notification started, release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(batcher_->pool()
                  .Submit([&](int) {
                    started.Notify();
                    release.WaitForNotification();
                    ++ran;
                  })
                  .ok());
  started.WaitForNotification();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(batcher_->pool().Submit([&](int) { ++ran; }).ok());
  // The worker is busy and its queue full: the launch cannot even be queued.
  std::unique_ptr<Call> refused = Submit(w, 1);
  ExpectFails(*refused, absl::StatusCode::kResourceExhausted, "compute queue is full");
  EXPECT_EQ(batcher_->stats().rejected_queue_full, 1);
  EXPECT_EQ(batcher_->stats().waiting_requests, 0);
  release.Notify();
  while (ran.load() < 3) absl::SleepFor(absl::Milliseconds(1));
  std::unique_ptr<Call> later = Submit(w, 2);
  ExpectCorrect(w, *later);
}

TEST_F(BatcherTest, ExpiredAndCancelledRequestsNeverLaunch) {
  Init({}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 13);
  backend_->Close();
  std::unique_ptr<Call> running = Submit(w, 1);
  ASSERT_TRUE(backend_->WaitForCalls(1));
  std::unique_ptr<Call> expires =
      Submit(w, 2, DType::kF32, DType::kF32, absl::Now() + absl::Milliseconds(20));
  std::unique_ptr<Call> cancelled = Submit(w, 3);
  std::unique_ptr<Call> fine = Submit(w, 4);
  cancelled->cancelled = true;
  absl::SleepFor(absl::Milliseconds(40));
  backend_->Open();
  ExpectFails(*expires, absl::StatusCode::kDeadlineExceeded, "deadline passed");
  ExpectFails(*cancelled, absl::StatusCode::kCancelled, "cancelled");
  ExpectCorrect(w, *running);
  ExpectCorrect(w, *fine);
  // Only the two good requests reached the backend.
  EXPECT_EQ(CallRows(), (std::vector<int64_t>{1, 4}));
  const BatchStats s = batcher_->stats();
  EXPECT_EQ(s.dropped_deadline, 1);
  EXPECT_EQ(s.dropped_cancelled, 1);
  EXPECT_EQ(s.launches, 2);
  EXPECT_EQ(s.waiting_requests, 0);
  ExpectQueueGauges(0, 0);  // dropped requests left them too
}

TEST_F(BatcherTest, DeletingAWeightFailsItsQueuedRequestsAndFinishesTheRunningOne) {
  Init({}, /*workers=*/1);
  const Weight w = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 14);
  backend_->Close();
  std::unique_ptr<Call> running = Submit(w, 2);
  ASSERT_TRUE(backend_->WaitForCalls(1));
  std::unique_ptr<Call> queued1 = Submit(w, 1);
  std::unique_ptr<Call> queued2 = Submit(w, 3);
  ASSERT_TRUE(store_->Delete("w").ok());
  EXPECT_GT(store_->used_bytes(), 0);  // still referenced by the launch and the queue
  backend_->Open();
  ASSERT_TRUE(running->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(running->status.ok()) << running->status;
  ExpectFails(*queued1, absl::StatusCode::kNotFound, "weight \"w\" was deleted");
  ExpectFails(*queued2, absl::StatusCode::kNotFound, "weight \"w\" was deleted");
  EXPECT_EQ(batcher_->stats().dropped_weight_deleted, 2);
  EXPECT_EQ(batcher_->stats().launches, 1);
  ExpectQueueGauges(0, 0);
  // Once every request let go, the weight's memory goes back to the budget.
  const absl::Time until = absl::Now() + kWait;
  while (store_->used_bytes() != 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(store_->used_bytes(), 0);
  // A new weight under the old name is a different weight: requests for it run normally.
  const Weight again = AddWeight("w", Scheme::kW8A16, {16, 64, 0}, 15);
  std::unique_ptr<Call> after = Submit(again, 2);
  ExpectCorrect(again, *after);
}

TEST_F(BatcherTest, ManyConcurrentCallersEachGetTheirOwnRows) {
  Init({}, /*workers=*/2);
  const Weight w = AddWeight("w", Scheme::kW4A16, {48, 256, 128}, 16);
  constexpr int kCallers = 64;
  std::vector<std::unique_ptr<Call>> calls(kCallers * 3);
  std::vector<std::thread> threads;
  absl::Mutex submit_mu;  // Submit's seed counter is not thread-safe
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3; ++r) {
        Call* call;
        {
          absl::MutexLock lock(&submit_mu);
          calls[t * 3 + r] = Submit(w, 1 + (t + r) % 3);
          call = calls[t * 3 + r].get();
        }
        call->done.WaitForNotificationWithTimeout(kWait);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (auto& call : calls) ExpectCorrect(w, *call);
  const BatchStats s = batcher_->stats();
  EXPECT_EQ(s.requests, kCallers * 3);
  EXPECT_LE(s.launches, s.requests);
}

}  // namespace
}  // namespace qmm
