#include "server/batcher.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// What the policy needs of a request, MatMul or Forward alike.
bool IsForward(const BatchRequest& r) { return r.forward.model != nullptr; }
int64_t Rows(const BatchRequest& r) { return IsForward(r) ? r.forward.spec.m : r.job.spec.m; }
DType XDType(const BatchRequest& r) {
  return IsForward(r) ? r.forward.spec.x_dtype : r.job.spec.x_dtype;
}
DType YDType(const BatchRequest& r) {
  return IsForward(r) ? r.forward.spec.y_dtype : r.job.spec.y_dtype;
}
bool BeyondFp16(const BatchRequest& r) {
  return IsForward(r) ? r.forward.beyond_fp16 : r.job.beyond_fp16;
}
UsageStats& UsageOf(const BatchRequest& r) {
  return IsForward(r) ? r.forward.model->usage() : r.job.weight->usage();
}

}  // namespace

absl::Status CheckBatcherOptions(const BatcherOptions& options) {
  if (options.max_batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_rows = ", options.max_batch_rows, " must be at least 1"));
  }
  if (options.max_queue_delay < absl::ZeroDuration() ||
      options.max_queue_delay > absl::Seconds(10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay = ", absl::FormatDuration(options.max_queue_delay),
                     " must be in [0, 10s]"));
  }
  if (options.max_queue_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_rows = ", options.max_queue_rows, " must be at least 1"));
  }
  if (options.worker_spin < absl::ZeroDuration() || options.worker_spin > absl::Milliseconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_spin = ", absl::FormatDuration(options.worker_spin), " must be in [0, 10ms]"));
  }
  if (options.completion_threads < 0 || options.completion_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("completion_threads = ", options.completion_threads, " must be in [0, 256]"));
  }
  if (options.max_queued_requests < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queued_requests = ", options.max_queued_requests, " must be at least 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(Backend& backend, const WeightStore& store,
                                                         Metrics& metrics,
                                                         const BatcherOptions& options,
                                                         const ModelStore* models) {
  if (absl::Status status = CheckBatcherOptions(options); !status.ok()) return status;
  return std::unique_ptr<Batcher>(new Batcher(backend, store, metrics, options, models));
}

Batcher::Batcher(Backend& backend, const WeightStore& store, Metrics& metrics,
                 const BatcherOptions& options, const ModelStore* models)
    : backend_(backend),
      store_(store),
      metrics_(metrics),
      models_(models),
      options_(options),
      staging_(backend.num_workers()) {
  // Launch tasks are few (at most one per worker and weight); the bound is for work that
  // others submit to pool().
  pool_ = std::make_unique<ComputePool>("compute", backend.num_workers(),
                                        options_.max_queued_requests, options_.worker_spin);
  // Unbounded: it holds only requests that were admitted and have run.
  if (options_.completion_threads > 0) {
    completion_ = std::make_unique<ComputePool>("completion", options_.completion_threads,
                                                std::numeric_limits<int64_t>::max());
  }
  if (options_.max_queue_delay > absl::ZeroDuration())
    timer_ = std::thread([this] { TimerLoop(); });
}

Batcher::~Batcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_cv_.SignalAll();
  if (timer_.joinable()) timer_.join();
  pool_.reset();
  completion_.reset();
}

void Batcher::Enqueue(BatchRequest request) {
  const int64_t m = Rows(request);
  const absl::Time now = absl::Now();
  // Before the lock, which every caller and each launch want: the usage record has a mutex
  // of its own, and the queue gauges are atomics that other threads write too.
  UsageStats& usage = UsageOf(request);
  usage.RecordArrival(now);
  metrics_.AddQueued(m, 1);
  absl::Status refused;
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    const bool forward = IsForward(request);
    const void* key =
        forward ? static_cast<const void*>(request.forward.model.get()) : request.job.weight.get();
    std::unique_ptr<WeightQueue>& slot = queues_[key];
    if (slot == nullptr) {
      slot = forward ? std::make_unique<WeightQueue>(nullptr, request.forward.model)
                     : std::make_unique<WeightQueue>(request.job.weight, nullptr);
    }
    WeightQueue& q = *slot;
    if (queued_requests_ >= options_.max_queued_requests) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("MatMul queues hold ", queued_requests_, " requests, limit ",
                       options_.max_queued_requests, " (--max_queued_requests)"));
    } else if (q.rows > 0 && q.rows + m > options_.max_queue_rows) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("queue for ", q.weight != nullptr ? "weight" : "model", " \"",
                       q.weight != nullptr ? q.weight->name() : q.model->name(), "\" holds ",
                       q.rows, " rows, limit ", options_.max_queue_rows,
                       " (--max_queue_rows); this request has ", m, " rows"));
    }
    if (!refused.ok()) {
      ++stats_.rejected_queue_full;
      EraseIfIdleLocked(&q);
    } else {
      q.rows += m;
      queued_rows_ += m;
      ++queued_requests_;
      q.waiting.push_back(Waiting{std::move(request), now});
      ScheduleLocked(q, now, completions);
      EraseIfIdleLocked(&q);  // when the launch could not be submitted
    }
  }
  if (!refused.ok()) {
    metrics_.AddQueued(-m, -1);
    usage.RecordFailure(absl::ZeroDuration());
    metrics_.RecordRejected(RejectReason::kQueueFull);
    std::move(request.done)(refused);
  }
  for (auto& [done, status] : completions) std::move(done)(status);
}

void Batcher::ScheduleLocked(WeightQueue& q, absl::Time now, Completions& completions,
                             bool* run_here) {
  if (q.waiting.empty()) return;
  const int workers = pool_->size();
  int64_t wanted = 0;
  if (q.running + q.scheduled == 0) {
    const absl::Time due = q.waiting.front().enqueued + options_.max_queue_delay;
    if (q.rows < options_.max_batch_rows && now < due) {
      ArmTimerLocked(q, due);
      return;
    }
    wanted = 1;
  }
  // Saturated: one more launch per full batch beyond what the scheduled ones will take.
  while (q.running + q.scheduled + wanted < workers &&
         q.rows >= (q.scheduled + wanted + 1) * options_.max_batch_rows) {
    ++wanted;
  }
  for (; wanted > 0; --wanted) {
    ++q.scheduled;
    if (run_here != nullptr && !*run_here && pool_->queued() == 0) {
      *run_here = true;
      continue;
    }
    WeightQueue* queue = &q;
    absl::Status submitted = pool_->Submit([this, queue](int worker) { RunBatch(queue, worker); });
    if (submitted.ok()) continue;
    // The pool is full of other work (or stopping): the requests of this queue that no
    // running or scheduled launch will take fail with its status.
    --q.scheduled;
    if (q.running + q.scheduled > 0) return;
    const bool full = submitted.code() == absl::StatusCode::kResourceExhausted;
    while (!q.waiting.empty()) {
      if (full) ++stats_.rejected_queue_full;
      metrics_.RecordRejected(full ? RejectReason::kQueueFull : RejectReason::kDraining);
      Waiting w = PopLocked(q);
      metrics_.AddQueued(-Rows(w.request), -1);
      UsageOf(w.request).RecordFailure(now - w.enqueued);
      completions.emplace_back(std::move(w.request.done), submitted);
    }
    return;
  }
}

void Batcher::ArmTimerLocked(WeightQueue& q, absl::Time due) {
  if (q.timer_armed) return;  // it fires no later than `due`, and re-checks then
  q.timer_armed = true;
  const bool earliest = timers_.empty() || due < timers_.begin()->first;
  timers_.emplace(due, &q);
  if (earliest) timer_cv_.Signal();
}

bool Batcher::EraseIfIdleLocked(WeightQueue* q) {
  if (!q->waiting.empty() || q->scheduled > 0 || q->running > 0 || q->timer_armed) return false;
  queues_.erase(q->key());
  return true;
}

Batcher::Waiting Batcher::PopLocked(WeightQueue& q) {
  Waiting w = std::move(q.waiting.front());
  q.waiting.pop_front();
  const int64_t m = Rows(w.request);
  q.rows -= m;
  queued_rows_ -= m;
  --queued_requests_;
  return w;
}

void Batcher::TakeBatchLocked(WeightQueue& q, bool published, absl::Time now,
                              std::vector<Waiting>& batch,
                              std::vector<std::pair<Waiting, absl::Status>>& dropped) {
  int64_t rows = 0;
  std::vector<Waiting> passed;  // other dtypes: they keep their place for a later launch
  auto drop = [&](absl::Status status) { dropped.emplace_back(PopLocked(q), std::move(status)); };
  while (!q.waiting.empty() && rows < options_.max_batch_rows) {
    const BatchRequest& r = q.waiting.front().request;
    if (!published) {
      ++stats_.dropped_weight_deleted;
      drop(
          absl::NotFoundError(absl::StrCat(q.weight != nullptr ? "weight \"" : "model \"",
                                           q.weight != nullptr ? q.weight->name() : q.model->name(),
                                           "\" was deleted while the request waited")));
      continue;
    }
    if (now >= r.deadline) {
      ++stats_.dropped_deadline;
      drop(absl::DeadlineExceededError("the deadline passed while the request waited"));
      continue;
    }
    if (r.cancelled && r.cancelled()) {
      ++stats_.dropped_cancelled;
      drop(absl::CancelledError("the client cancelled while the request waited"));
      continue;
    }
    if (!batch.empty()) {
      const BatchRequest& first = batch.front().request;
      if (BeyondFp16(first)) break;  // it runs alone
      if (BeyondFp16(r) || XDType(r) != XDType(first) || YDType(r) != YDType(first)) {
        passed.push_back(std::move(q.waiting.front()));
        q.waiting.pop_front();
        continue;
      }
      if (rows + Rows(r) > options_.max_batch_rows) break;
    }
    rows += Rows(r);
    batch.push_back(PopLocked(q));
  }
  for (auto it = passed.rbegin(); it != passed.rend(); ++it) q.waiting.push_front(std::move(*it));
}

void Batcher::RunBatch(WeightQueue* q, int worker) {
  while (RunOneBatch(q, worker)) {
  }
}

bool Batcher::RunOneBatch(WeightQueue* q, int worker) {
  // Immutable and kept alive by the queue, which lives while a task of it is scheduled.
  const std::shared_ptr<const StoredWeight> weight = q->weight;
  const std::shared_ptr<const StoredModel> model = q->model;
  bool published;
  if (weight != nullptr) {
    absl::StatusOr<std::shared_ptr<const StoredWeight>> current = store_.Get(weight->name());
    published = current.ok() && current->get() == weight.get();
  } else {
    absl::StatusOr<std::shared_ptr<const StoredModel>> current = models_->Get(model->name());
    published = current.ok() && current->get() == model.get();
  }
  std::vector<Waiting> batch;
  std::vector<std::pair<Waiting, absl::Status>> dropped;
  const absl::Time taken = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    --q->scheduled;
    TakeBatchLocked(*q, published, taken, batch, dropped);
    if (!batch.empty()) {
      ++q->running;
    } else {
      EraseIfIdleLocked(q);
    }
  }
  int64_t rows = 0;
  for (const Waiting& w : batch) rows += Rows(w.request);
  int64_t dropped_rows = 0;
  for (const auto& [w, status] : dropped) dropped_rows += Rows(w.request);
  metrics_.AddQueued(-(rows + dropped_rows), -static_cast<int64_t>(batch.size() + dropped.size()));
  for (auto& [w, status] : dropped) {
    metrics_.RecordQueue(w.request.method, Seconds(taken - w.enqueued));
    UsageOf(w.request).RecordFailure(taken - w.enqueued);
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      metrics_.RecordRejected(RejectReason::kDeadline);
    } else if (status.code() == absl::StatusCode::kCancelled) {
      metrics_.RecordRejected(RejectReason::kCancelled);
    }
    std::move(w.request.done)(status);
  }
  if (batch.empty()) return false;

  TransferTimes transfer;
  const absl::StatusOr<int64_t> launched = weight != nullptr
                                               ? Launch(worker, *weight, batch, transfer)
                                               : LaunchForward(worker, *model, batch, transfer);
  const absl::Time ended = absl::Now();
  const absl::Status status = launched.status();
  const int64_t compute_ns = launched.value_or(0);
  RecordUsage(weight != nullptr ? weight->usage() : model->usage(), batch, rows, taken, ended,
              status, compute_ns, transfer);

  const auto requests = static_cast<int64_t>(batch.size());
  Completions completions;
  bool run_here = false;
  {
    absl::MutexLock lock(&mu_);
    --q->running;
    ++stats_.launches;
    if (!status.ok()) ++stats_.failed_launches;
    stats_.requests += requests;
    stats_.rows += rows;
    if (requests > 1) ++stats_.multi_request_launches;
    stats_.max_requests_per_launch = std::max(stats_.max_requests_per_launch, requests);
    stats_.max_rows_per_launch = std::max(stats_.max_rows_per_launch, rows);
    // The clock is read under the lock: a request enqueued since an earlier reading would
    // look not yet due and, without a queue delay (no timer thread), wait for good.
    // run_here only when others finish this batch's requests: else the worker would hold
    // its next launch back until it has finished them, where another worker could start it.
    ScheduleLocked(*q, absl::Now(), completions, completion_ != nullptr ? &run_here : nullptr);
    EraseIfIdleLocked(q);  // never when run_here: the launch counts as scheduled
  }
  metrics_.RecordBatch(rows, requests);
  if (status.ok()) {
    const int64_t measured_ns =
        compute_ns + std::max<int64_t>(transfer.h2d_ns, 0) + std::max<int64_t>(transfer.d2h_ns, 0);
    // Clocks apart (the device's events, the host's): never below zero.
    metrics_.RecordLaunchHost(
        std::max(0.0, Seconds(ended - taken) - static_cast<double>(measured_ns) * 1e-9));
    if (transfer.h2d_ns >= 0) {
      metrics_.RecordTransfer(TransferDirection::kHostToDevice,
                              static_cast<double>(transfer.h2d_ns) * 1e-9);
    }
    if (transfer.d2h_ns >= 0) {
      metrics_.RecordTransfer(TransferDirection::kDeviceToHost,
                              static_cast<double>(transfer.d2h_ns) * 1e-9);
    }
  }
  if (status.ok() && weight != nullptr) {
    const double seconds = static_cast<double>(compute_ns) * 1e-9;
    metrics_.RecordCompute(weight->desc().scheme, seconds);
    if (metrics_.per_weight()) {
      for (const Waiting& w : batch) {
        const int64_t m = w.request.job.spec.m;
        metrics_.RecordWeightMatMul(weight->name(), m,
                                    seconds * static_cast<double>(m) / static_cast<double>(rows));
      }
    }
  }
  for (auto& [done, s] : completions) std::move(done)(s);
  const Finish finish{.status = status,
                      .taken = taken,
                      .compute_ns = compute_ns,
                      .start_responses = InPlace(batch)};
  FinishBatch(batch, finish, /*busy=*/run_here);
  return run_here;
}

void Batcher::RecordUsage(UsageStats& usage, const std::vector<Waiting>& batch, int64_t rows,
                          absl::Time taken, absl::Time ended, const absl::Status& status,
                          int64_t compute_ns, const TransferTimes& transfer) {
  if (!status.ok()) {
    for (const Waiting& w : batch) usage.RecordFailure(ended - w.enqueued);
    return;
  }
  std::vector<UsageStats::RequestTimes> requests;
  requests.reserve(batch.size());
  for (const Waiting& w : batch) {
    requests.push_back(
        {.rows = Rows(w.request), .queued = taken - w.enqueued, .total = ended - w.enqueued});
  }
  const UsageStats::LaunchTimes times{
      .input_ns = transfer.h2d_ns, .infer_ns = compute_ns, .output_ns = transfer.d2h_ns};
  usage.RecordLaunch(rows, times, requests);
}

void Batcher::FinishRequest(Waiting& w, const Finish& finish) {
  metrics_.RecordQueue(w.request.method, Seconds(finish.taken - w.enqueued));
  if (finish.status.ok() && finish.start_responses) {
    StartResponse(w.request.job, w.request.response);
    w.request.response->set_compute_ns(finish.compute_ns);
  }
  std::move(w.request.done)(finish.status);
}

void Batcher::FinishBatch(std::vector<Waiting>& batch, const Finish& finish, bool busy) {
  if ((batch.size() == 1 && !busy) || completion_ == nullptr) {
    for (Waiting& w : batch) FinishRequest(w, finish);
    return;
  }
  // One hand-off, however many requests: each hand-off may wake a sleeping thread with a
  // system call, so the completion thread that takes this one hands out the rest itself.
  auto all = std::make_shared<std::vector<Waiting>>(std::move(batch));
  const auto finish_all = [this, all, finish] { FinishChunks(all, finish); };
  if (!completion_->Submit([finish_all](int) { finish_all(); }).ok()) finish_all();
}

void Batcher::FinishChunks(const std::shared_ptr<std::vector<Waiting>>& all, const Finish& finish) {
  // Below this many requests per chunk, the hop to another thread costs more than it
  // spreads.
  constexpr size_t kMinChunk = 4;
  const size_t n = all->size();
  const size_t chunks = std::clamp<size_t>((n + kMinChunk - 1) / kMinChunk, 1,
                                           static_cast<size_t>(completion_->size()));
  // Chunk c is [c * n / chunks, (c + 1) * n / chunks); this thread keeps the first.
  for (size_t c = 1; c < chunks; ++c) {
    const auto run = [this, all, finish, begin = c * n / chunks, end = (c + 1) * n / chunks] {
      for (size_t i = begin; i < end; ++i) FinishRequest((*all)[i], finish);
    };
    if (!completion_->Submit([run](int) { run(); }).ok()) run();
  }
  for (size_t i = 0; i < n / chunks; ++i) FinishRequest((*all)[i], finish);
}

bool Batcher::InPlace(const std::vector<Waiting>& batch) {
  return batch.size() > 1 &&
         std::ranges::all_of(batch, [](const Waiting& w) { return w.request.registered; });
}

absl::StatusOr<int64_t> Batcher::Launch(int worker, const StoredWeight& weight,
                                        std::vector<Waiting>& batch, TransferTimes& transfer) {
  // A lone request is staged even when registered: on an H100 (session 83) one row's copy
  // through the backend's pinned buffers took 7 us in and 1 out where the device's own
  // gather and scatter over the bus took 12 and 6, so a lone caller waited 56-58 us at the
  // median against 65-67; from 58 requests a launch on, the device's way served 1.3x more.
  if (InPlace(batch)) return LaunchBlocks(worker, weight, batch, transfer);
  // Alone: straight from the request into its response (or output), no copies.
  if (batch.size() == 1) {
    const BatchRequest& r = batch.front().request;
    if (absl::Status s = RunMatMul(backend_, worker, r.job, r.response, r.output, &transfer);
        !s.ok()) {
      return s;
    }
    return r.response->compute_ns();
  }
  const MatMulSpec& spec = batch.front().request.job.spec;
  const WeightShape& shape = weight.desc().shape;
  const size_t x_row_bytes = static_cast<size_t>(shape.k) * DTypeSize(spec.x_dtype);
  const size_t y_row_bytes = static_cast<size_t>(shape.n) * DTypeSize(spec.y_dtype);
  int64_t m = 0;
  for (const Waiting& w : batch) m += w.request.job.spec.m;
  const size_t x_bytes = static_cast<size_t>(m) * x_row_bytes;
  const size_t y_bytes = static_cast<size_t>(m) * y_row_bytes;

  // Gather where the backend would copy the batch anyway (CUDA: its pinned buffers), else
  // into this worker's own buffers.
  absl::StatusOr<HostStaging> host = backend_.StageHost(worker, x_bytes, y_bytes);
  if (!host.ok()) return host.status();
  Staging& staging = staging_[worker];
  if (host->x == nullptr || host->y == nullptr) {
    staging.x.resize(x_bytes);
    staging.y.resize(y_bytes);
    host = HostStaging{.x = staging.x.data(), .y = staging.y.data()};
  }
  auto* x = static_cast<uint8_t*>(host->x);
  size_t offset = 0;
  for (const Waiting& w : batch) {
    std::memcpy(x + offset, w.request.job.x.data(), w.request.job.x.size());
    offset += w.request.job.x.size();
  }
  const MatMulCall call{
      .weight = &weight.backend_weight(),
      .x_dtype = spec.x_dtype,
      .x = x,
      .m = m,
      .y_dtype = spec.y_dtype,
      .y = host->y,
      .transfer = &transfer,
  };
  absl::StatusOr<int64_t> compute_ns = backend_.MatMul(worker, call);
  if (!compute_ns.ok()) return compute_ns.status();
  const auto* y = static_cast<const char*>(host->y);
  offset = 0;
  for (Waiting& w : batch) {
    const size_t bytes = static_cast<size_t>(w.request.job.spec.y_bytes);
    std::string* data = StartResponse(w.request.job, w.request.response);
    if (w.request.output != nullptr) {
      std::memcpy(w.request.output, y + offset, bytes);
    } else {
      data->assign(y + offset, bytes);
    }
    offset += bytes;
    w.request.response->set_compute_ns(*compute_ns);
  }
  return compute_ns;
}

absl::StatusOr<int64_t> Batcher::LaunchBlocks(int worker, const StoredWeight& weight,
                                              std::vector<Waiting>& batch,
                                              TransferTimes& transfer) {
  std::vector<RowBlock>& blocks = staging_[worker].blocks;
  blocks.clear();
  for (const Waiting& w : batch) {
    const BatchRequest& r = w.request;
    blocks.push_back({.x = r.job.x.data(), .y = r.output, .rows = r.job.spec.m});
  }
  const MatMulSpec& spec = batch.front().request.job.spec;
  return backend_.MatMulBlocks(worker, {
                                           .weight = &weight.backend_weight(),
                                           .x_dtype = spec.x_dtype,
                                           .y_dtype = spec.y_dtype,
                                           .blocks = blocks,
                                           .transfer = &transfer,
                                       });
}

absl::StatusOr<int64_t> Batcher::LaunchForward(int worker, const StoredModel& model,
                                               std::vector<Waiting>& batch,
                                               TransferTimes& transfer) {
  if (batch.size() == 1) {
    const BatchRequest& r = batch.front().request;
    if (absl::Status s = RunForward(backend_, worker, r.forward, r.forward_response, &transfer);
        !s.ok()) {
      return s;
    }
    return r.forward_response->compute_ns();
  }
  const ForwardSpec& spec = batch.front().request.forward.spec;
  const bool tokens = model.spec().token_input;
  const size_t y_row_bytes =
      static_cast<size_t>(model.spec().out_features) * DTypeSize(spec.y_dtype);
  int64_t m = 0;
  for (const Waiting& w : batch) m += w.request.forward.spec.m;

  // Token ids or input rows back to back, in batch order.
  Staging& staging = staging_[worker];
  staging.x.clear();
  for (const Waiting& w : batch) {
    const v1::ForwardRequest& r = *w.request.forward.request;
    const char* begin =
        tokens ? reinterpret_cast<const char*>(r.token_ids().data()) : r.input().data().data();
    const size_t bytes = tokens ? r.token_ids_size() * sizeof(int32_t) : r.input().data().size();
    staging.x.insert(staging.x.end(), begin, begin + bytes);
  }
  staging.y.resize(static_cast<size_t>(m) * y_row_bytes);
  const ForwardCall call{
      .model = model.prepared(),
      .token_ids = tokens ? reinterpret_cast<const int32_t*>(staging.x.data()) : nullptr,
      .x_dtype = spec.x_dtype,
      .x = tokens ? nullptr : staging.x.data(),
      .m = m,
      .y_dtype = spec.y_dtype,
      .y = staging.y.data(),
      .transfer = &transfer,
  };
  absl::StatusOr<int64_t> compute_ns = backend_.Forward(worker, call);
  if (!compute_ns.ok()) return compute_ns.status();
  size_t offset = 0;
  for (Waiting& w : batch) {
    const size_t bytes = static_cast<size_t>(w.request.forward.spec.y_bytes);
    StartForwardResponse(w.request.forward, w.request.forward_response)
        ->assign(reinterpret_cast<const char*>(staging.y.data()) + offset, bytes);
    offset += bytes;
    w.request.forward_response->set_compute_ns(*compute_ns);
  }
  return compute_ns;
}

void Batcher::TimerLoop() {
  // Locked by hand: the completions of a firing run with the mutex released.
  mu_.Lock();
  while (!stopping_) {
    if (timers_.empty()) {
      timer_cv_.Wait(&mu_);
      continue;
    }
    const absl::Time now = absl::Now();
    const auto first = timers_.begin();
    if (now < first->first) {
      timer_cv_.WaitWithDeadline(&mu_, first->first);
      continue;
    }
    WeightQueue* q = first->second;
    timers_.erase(first);
    q->timer_armed = false;
    Completions completions;
    ScheduleLocked(*q, now, completions);
    EraseIfIdleLocked(q);
    if (completions.empty()) continue;
    mu_.Unlock();
    for (auto& [done, status] : completions) std::move(done)(status);
    mu_.Lock();
  }
  mu_.Unlock();
}

BatchStats Batcher::stats() const {
  absl::MutexLock lock(&mu_);
  BatchStats s = stats_;
  s.waiting_requests = queued_requests_;
  s.waiting_rows = queued_rows_;
  return s;
}

void Batcher::FillStats(v1::BatchingStats* out) const {
  const BatchStats s = stats();
  out->set_max_batch_rows(options_.max_batch_rows);
  out->set_max_queue_delay_us(absl::ToInt64Microseconds(options_.max_queue_delay));
  out->set_max_queue_rows(options_.max_queue_rows);
  out->set_waiting_requests(s.waiting_requests);
  out->set_waiting_rows(s.waiting_rows);
  out->set_launches(s.launches);
  out->set_failed_launches(s.failed_launches);
  out->set_requests(s.requests);
  out->set_rows(s.rows);
  out->set_multi_request_launches(s.multi_request_launches);
  out->set_max_requests_per_launch(s.max_requests_per_launch);
  out->set_max_rows_per_launch(s.max_rows_per_launch);
  out->set_rejected_queue_full(s.rejected_queue_full);
  out->set_dropped_deadline(s.dropped_deadline);
  out->set_dropped_cancelled(s.dropped_cancelled);
  out->set_dropped_weight_deleted(s.dropped_weight_deleted);
}

}  // namespace qmm
