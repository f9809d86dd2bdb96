#include "client/qmmctl/bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/credentials.h"
#include "client/grpc_status.h"
#include "client/local_channel.h"
#include "client/matmul_messages.h"
#include "client/nd_array.h"
#include "client/qmmctl/bench_inputs.h"
#include "client/qmmctl/bench_report.h"
#include "client/qmmctl/forward_verify.h"
#include "client/qmmctl/names.h"
#include "client/qmmctl/verify.h"
#include "inference/open_inference.grpc.pb.h"
#include "kernels/format.h"
#include "proto/enum_convert.h"

namespace qmm::ctl {
namespace {

using client_internal::FromGrpcStatus;
using client_internal::TakeMatMulResult;

constexpr int kMaxConcurrency = 4096;
constexpr int kMaxChannels = 256;
constexpr int kMaxInputs = 4096;
// A stream's requests ahead of their answers: no more than the server reads ahead
// (server/ordered_stream_reactor.h), so that every request written is read while the
// caller is not reading answers.
constexpr int kMaxInflight = 16;
constexpr int64_t kMaxRequests = int64_t{1} << 32;
constexpr absl::Duration kMaxDuration = absl::Hours(24);

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// The Open Inference Protocol's spelling of a dtype, as the qmm.v1 enum.
v1::DType FromInferDatatype(const std::string& datatype) {
  return datatype == "FP16"   ? v1::DTYPE_FP16
         : datatype == "BF16" ? v1::DTYPE_BF16
         : datatype == "FP32" ? v1::DTYPE_FP32
                              : v1::DTYPE_UNSPECIFIED;
}

// A ModelInfer answer as the MatMul answer Verify reads (its output moved out).
void ToMatMulResponse(inference::ModelInferResponse& in, v1::MatMulResponse* out) {
  out->Clear();
  if (in.outputs_size() != 1 || in.raw_output_contents_size() != 1) return;
  v1::Tensor* y = out->mutable_output();
  y->set_dtype(FromInferDatatype(in.outputs(0).datatype()));
  *y->mutable_shape() = in.outputs(0).shape();
  y->mutable_data()->swap(*in.mutable_raw_output_contents(0));
}

// A ModelStreamInfer answer's error_message ("CODE: message") as a status.
absl::Status FromErrorMessage(const std::string& error) {
  for (int code = 1; code <= 16; ++code) {
    const std::string prefix =
        absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ": ");
    if (error.rfind(prefix, 0) == 0) {
      return absl::Status(static_cast<absl::StatusCode>(code), error.substr(prefix.size()));
    }
  }
  return absl::UnknownError(error);
}

std::vector<std::shared_ptr<grpc::Channel>> OpenChannels(const ClientOptions& c, int count,
                                                         absl::Status* status) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int max_message = static_cast<int>(
      std::clamp<int64_t>(c.max_message_bytes, 0, std::numeric_limits<int>::max()));
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(max_message);
    args.SetMaxSendMessageSize(max_message);
    // A subchannel pool of its own: otherwise equal channels share one connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(c.tls, args);
    if (!credentials.ok()) {
      *status = credentials.status();
      return {};
    }
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(c.server, *credentials, args);
    if (!channel->WaitForConnected(Deadline(c.connect_timeout))) {
      *status = absl::UnavailableError(
          absl::StrCat("cannot open connection ", i + 1, " of ", count, " to ", c.server));
      return {};
    }
    channels.push_back(std::move(channel));
  }
  return channels;
}

// One caller's stream (MatMulStream, ForwardStream or ModelStreamInfer) with up to
// `depth` requests written ahead of their answers, which come back in order; replaced,
// once its answers are in, before less than half the call timeout is left of its
// deadline. When the stream fails, every request written to it and not yet answered gets
// its final status.
template <typename Request, typename Response>
class StreamSlot {
 public:
  using Stream = grpc::ClientReaderWriter<Request, Response>;
  using Open = std::function<std::unique_ptr<Stream>(grpc::ClientContext*)>;

  StreamSlot(Open open, absl::Duration timeout, int depth)
      : open_(std::move(open)), timeout_(timeout), depth_(depth) {}
  ~StreamSlot() { End().IgnoreError(); }

  // False while `depth` answers are owed, or the failed stream's or the due stream's are.
  bool CanSend() const {
    return owed_ == 0 || (owed_ < depth_ && !failed_ && absl::Now() < replace_at_);
  }

  void Send(const Request& request) {
    if (stream_ != nullptr && absl::Now() >= replace_at_) End().IgnoreError();
    if (stream_ == nullptr) {
      context_ = std::make_unique<grpc::ClientContext>();
      const absl::Time deadline = absl::Now() + timeout_;
      replace_at_ = deadline - timeout_ / 2;
      context_->set_deadline(absl::ToChronoTime(deadline));
      stream_ = open_(context_.get());
    }
    // A failed write shows as the failed read of its answer.
    stream_->Write(request);
    ++owed_;
  }

  // The oldest owed answer.
  absl::Status Receive(Response* response) {
    --owed_;
    if (failed_) {
      const absl::Status status = *failed_;
      if (owed_ == 0) failed_.reset();
      return status;
    }
    if (stream_->Read(response)) return absl::OkStatus();
    absl::Status ended = End();
    if (ended.ok()) ended = absl::UnknownError("the server ended the stream without a response");
    if (owed_ > 0) failed_ = ended;
    return ended;
  }

 private:
  // Half-closes, drains and finishes the stream; its final status.
  absl::Status End() {
    if (stream_ == nullptr) return absl::OkStatus();
    stream_->WritesDone();
    Response discarded;
    while (stream_->Read(&discarded)) {
    }
    const absl::Status status = FromGrpcStatus(stream_->Finish());
    stream_.reset();
    context_.reset();
    return status;
  }

  const Open open_;
  const absl::Duration timeout_;
  const int depth_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  absl::Time replace_at_;
  int owed_ = 0;                        // requests written, answers not yet read
  std::optional<absl::Status> failed_;  // the failed stream's status, while answers are owed
};

// What every caller shares.
struct Run {
  Run(const BenchOptions& o, const BenchInputs& in, int64_t out_features, double tol,
      absl::Duration timeout)
      : options(o),
        inputs(in),
        n(out_features),
        tolerance(tol),
        call_timeout(timeout),
        warmed_up(o.concurrency) {}

  const BenchOptions& options;
  const BenchInputs& inputs;
  const int64_t n;  // the weight's N, the model's out_features
  const double tolerance;
  const absl::Duration call_timeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  // With BenchOptions::local, in place of `channels`.
  std::vector<std::unique_ptr<LocalChannel>> local_channels;
  std::atomic<int64_t> next{0};  // index of the next measured request
  absl::BlockingCounter warmed_up;
  absl::Notification go;
  absl::Time end = absl::InfiniteFuture();  // duration runs; set before `go`
};

// Checks one successful response against its input's reference.
void Verify(const Run& run, int input, int64_t index, v1::MatMulResponse& response,
            BenchTally& tally) {
  absl::StatusOr<MatMulResult> result = TakeMatMulResult(response);
  ++tally.verified;
  std::string problem;
  if (!result.ok()) {
    problem = std::string(result.status().message());
  } else if (result->output.shape != std::vector<int64_t>{run.options.rows, run.n}) {
    problem = "the result has the wrong shape";
  } else {
    const Comparison c =
        CompareWithReference(ToFloats(result->output), run.inputs.references[input], run.tolerance);
    tally.max_relative_error = std::max(tally.max_relative_error, c.relative_error);
    if (!c.passed) {
      problem =
          absl::StrFormat("relative error %.3g, %d non-finite", c.relative_error, c.non_finite);
    }
  }
  if (problem.empty()) return;
  ++tally.mismatches;
  if (tally.first_mismatch.empty()) {
    tally.first_mismatch = absl::StrCat("request ", index, " (input ", input, "): ", problem);
  }
}

// How one caller sends its requests and takes their answers, in order: a unary call a
// request, or a stream with up to BenchOptions::inflight requests ahead of their answers.
class Lane {
 public:
  virtual ~Lane() = default;
  // Whether another request may go now; false: take an answer first.
  virtual bool CanSend() const = 0;
  virtual void Send(int input) = 0;
  // The oldest unanswered request's result, and the server's batch time when the
  // protocol gives it.
  virtual absl::Status Receive(v1::MatMulResponse* response, std::optional<int64_t>* compute) = 0;
};

// One call at a time; the call happens in Receive.
template <typename Call>
class UnaryLane final : public Lane {
 public:
  explicit UnaryLane(Call call) : call_(std::move(call)) {}
  bool CanSend() const override { return !input_; }
  void Send(int input) override { input_ = input; }
  absl::Status Receive(v1::MatMulResponse* response, std::optional<int64_t>* compute) override {
    const int input = *input_;
    input_.reset();
    return call_(input, response, compute);
  }

 private:
  Call call_;
  std::optional<int> input_;
};

// A stream's requests through a StreamSlot; `take` turns an answer into the caller's
// result.
template <typename Request, typename Response>
class StreamLane final : public Lane {
 public:
  using Slot = StreamSlot<Request, Response>;
  using Take = std::function<absl::Status(Response& answer, v1::MatMulResponse* response,
                                          std::optional<int64_t>* compute)>;

  StreamLane(const Run& run, const std::vector<Request>& requests, typename Slot::Open open,
             Take take)
      : requests_(requests),
        slot_(std::move(open), run.call_timeout, run.options.inflight),
        take_(std::move(take)) {}
  bool CanSend() const override { return slot_.CanSend(); }
  void Send(int input) override { slot_.Send(requests_[input]); }
  absl::Status Receive(v1::MatMulResponse* response, std::optional<int64_t>* compute) override {
    const absl::Status status = slot_.Receive(&answer_);
    return status.ok() ? take_(answer_, response, compute) : status;
  }

 private:
  const std::vector<Request>& requests_;
  Slot slot_;
  const Take take_;
  Response answer_;
};

// A qmm.v1 answer (a MatMulResponse or a ForwardResponse: the same fields) as the result;
// its compute time unless it has none (qmm-echo-server computes nothing).
template <typename Response>
absl::Status TakeAnswer(Response& answer, v1::MatMulResponse* response,
                        std::optional<int64_t>* compute) {
  response->Clear();
  response->mutable_output()->Swap(answer.mutable_output());
  if (answer.compute_ns() > 0) *compute = answer.compute_ns();
  return absl::OkStatus();
}

// A qmm.v1 lane: `unary` makes one call, `open` opens a stream.
template <typename Request, typename Response>
std::unique_ptr<Lane> QmmLane(
    const Run& run, const std::vector<Request>& requests,
    std::function<grpc::Status(grpc::ClientContext*, const Request&, Response*)> unary,
    typename StreamSlot<Request, Response>::Open open) {
  if (run.options.stream) {
    return std::make_unique<StreamLane<Request, Response>>(run, requests, std::move(open),
                                                           &TakeAnswer<Response>);
  }
  auto call = [unary = std::move(unary), timeout = run.call_timeout, &requests,
               answer = Response()](int input, v1::MatMulResponse* response,
                                    std::optional<int64_t>* compute) mutable {
    grpc::ClientContext context;
    context.set_deadline(Deadline(timeout));
    const absl::Status status = FromGrpcStatus(unary(&context, requests[input], &answer));
    return status.ok() ? TakeAnswer(answer, response, compute) : status;
  };
  return std::make_unique<UnaryLane<decltype(call)>>(std::move(call));
}

std::unique_ptr<Lane> MakeLane(const Run& run, const std::shared_ptr<grpc::Channel>& channel) {
  if (run.options.open_inference) {
    std::shared_ptr<inference::GRPCInferenceService::Stub> stub =
        inference::GRPCInferenceService::NewStub(channel);
    if (run.options.stream) {
      return std::make_unique<
          StreamLane<inference::ModelInferRequest, inference::ModelStreamInferResponse>>(
          run, run.inputs.infer,
          [stub](grpc::ClientContext* context) { return stub->ModelStreamInfer(context); },
          [](inference::ModelStreamInferResponse& answer, v1::MatMulResponse* response,
             std::optional<int64_t>*) {
            if (!answer.error_message().empty()) return FromErrorMessage(answer.error_message());
            ToMatMulResponse(*answer.mutable_infer_response(), response);
            return absl::OkStatus();
          });
    }
    auto call = [stub, timeout = run.call_timeout, &requests = run.inputs.infer,
                 answer = inference::ModelInferResponse()](int input, v1::MatMulResponse* response,
                                                           std::optional<int64_t>*) mutable {
      grpc::ClientContext context;
      context.set_deadline(Deadline(timeout));
      const absl::Status status =
          FromGrpcStatus(stub->ModelInfer(&context, requests[input], &answer));
      if (status.ok()) ToMatMulResponse(answer, response);
      return status;
    };
    return std::make_unique<UnaryLane<decltype(call)>>(std::move(call));
  }
  std::shared_ptr<v1::Qmm::Stub> stub = v1::Qmm::NewStub(channel);
  if (!run.options.model.empty()) {
    return QmmLane<v1::ForwardRequest, v1::ForwardResponse>(
        run, run.inputs.forward,
        [stub](grpc::ClientContext* context, const v1::ForwardRequest& request,
               v1::ForwardResponse* response) { return stub->Forward(context, request, response); },
        [stub](grpc::ClientContext* context) { return stub->ForwardStream(context); });
  }
  return QmmLane<v1::MatMulRequest, v1::MatMulResponse>(
      run, run.inputs.matmul,
      [stub](grpc::ClientContext* context, const v1::MatMulRequest& request,
             v1::MatMulResponse* response) { return stub->MatMul(context, request, response); },
      [stub](grpc::ClientContext* context) { return stub->MatMulStream(context); });
}

// A caller's `inflight` slots of a local session, taken in turn (answers come oldest
// first): caller c has session c % sessions, slots from (c / sessions) * inflight.
class LocalLane final : public Lane {
 public:
  LocalLane(const Run& run, int caller)
      : channel_(*run.local_channels[caller % run.local_channels.size()]),
        requests_(run.inputs.matmul),
        timeout_(run.call_timeout),
        first_(static_cast<int>(caller / run.local_channels.size()) * run.options.inflight),
        depth_(run.options.inflight) {}
  bool CanSend() const override { return static_cast<int>(sent_.size()) < depth_; }
  void Send(int input) override {
    const int slot = first_ + next_;
    next_ = (next_ + 1) % depth_;
    // A refused Send shows as its answer.
    sent_.push_back({slot, channel_.Send(slot, requests_[input], timeout_)});
  }
  absl::Status Receive(v1::MatMulResponse* response, std::optional<int64_t>* compute) override {
    const auto [slot, sent] = sent_.front();
    sent_.pop_front();
    if (!sent.ok()) return sent;
    const absl::Status status = channel_.Receive(slot, response);
    if (status.ok() && response->compute_ns() > 0) *compute = response->compute_ns();
    return status;
  }

 private:
  LocalChannel& channel_;
  const std::vector<v1::MatMulRequest>& requests_;
  const absl::Duration timeout_;
  const int first_;
  const int depth_;
  int next_ = 0;
  std::deque<std::pair<int, absl::Status>> sent_;  // slot and how its Send went, oldest first
};

// The local sessions for `callers` callers: `count` of them, with the slots and slot size
// the largest request and its answer need.
absl::StatusOr<std::vector<std::unique_ptr<LocalChannel>>> OpenLocalChannels(
    const BenchOptions& o, const BenchInputs& inputs, int64_t n, int count) {
  int64_t largest = (int64_t{o.rows} * n) * 4 + 256;  // the answer in fp32, with its framing
  for (const v1::MatMulRequest& request : inputs.matmul) {
    largest = std::max<int64_t>(largest, static_cast<int64_t>(request.ByteSizeLong()));
  }
  const LocalChannelOptions options{.slots = (o.concurrency + count - 1) / count * o.inflight,
                                    .slot_bytes = std::max<int64_t>(4096, (largest + 63) / 64 * 64),
                                    .spin = o.local_spin};
  std::vector<std::unique_ptr<LocalChannel>> channels;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<LocalChannel>> channel = LocalChannel::Connect(o.local, options);
    if (!channel.ok()) return channel.status();
    channels.push_back(*std::move(channel));
  }
  return channels;
}

void Caller(Run& run, int caller, BenchTally& tally) {
  const BenchOptions& o = run.options;
  const std::unique_ptr<Lane> lane = run.local_channels.empty()
                                         ? MakeLane(run, run.channels[caller % run.channels.size()])
                                         : std::make_unique<LocalLane>(run, caller);
  v1::MatMulResponse response;
  std::optional<int64_t> compute;

  for (int i = 0; i < o.warmup; ++i) {
    lane->Send((caller + i) % o.inputs);
    lane->Receive(&response, &compute).IgnoreError();
  }
  run.warmed_up.DecrementCount();
  run.go.WaitForNotification();
  struct Sent {
    int64_t index;
    int input;
    absl::Time start;
  };
  std::deque<Sent> sent;  // unanswered, oldest first
  bool more = true;
  while (true) {
    while (more && lane->CanSend()) {
      const int64_t index = run.next.fetch_add(1, std::memory_order_relaxed);
      if (o.requests ? index >= *o.requests : absl::Now() >= run.end) {
        more = false;
        break;
      }
      sent.push_back({index, static_cast<int>(index % o.inputs), absl::Now()});
      lane->Send(sent.back().input);
    }
    if (sent.empty()) break;
    const Sent s = sent.front();
    sent.pop_front();
    compute.reset();
    const absl::Status status = lane->Receive(&response, &compute);
    const absl::Duration latency = absl::Now() - s.start;
    if (!status.ok()) {
      tally.RecordError(status);
      continue;
    }
    tally.RecordOk(latency, compute);
    if (!run.inputs.references.empty()) Verify(run, s.input, s.index, response, tally);
  }
}

std::optional<v1::BatchingStats> Batching(Client& client) {
  absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
  // A server that does not batch (qmm-echo-server) leaves the field out.
  if (!info.ok() || !info->has_batching()) return std::nullopt;
  return info->batching();
}

// The statistics of the weight or model `name`; none when the server does not say.
std::optional<inference::ModelStatistics> ModelStatistics(Client& client, const std::string& name) {
  absl::StatusOr<inference::ModelStatisticsResponse> response = client.Statistics(name);
  if (!response.ok() || response->model_stats_size() != 1) return std::nullopt;
  return response->model_stats(0);
}

}  // namespace

int DefaultChannels(int concurrency, int inflight) {
  constexpr int64_t kInFlightPerChannel = 16;
  constexpr int64_t kMaxDefaultChannels = 16;
  const int64_t in_flight = int64_t{concurrency} * inflight;
  const int64_t channels = (in_flight + kInFlightPerChannel - 1) / kInFlightPerChannel;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(kMaxDefaultChannels, concurrency));
  return static_cast<int>(std::clamp<int64_t>(channels, 1, most));
}

absl::Status CheckBenchOptions(const BenchOptions& o) {
  if (o.weight.empty() == o.model.empty()) {
    return absl::InvalidArgumentError("bench needs exactly one of --weight and --model");
  }
  if (!o.model.empty() && o.verify_seed) {
    return absl::InvalidArgumentError(
        "--verify_seed is a weight's; a model's weights take --verify_seeds=NAME=SEED,...");
  }
  if (!o.weight.empty() && !o.verify_seeds.empty()) {
    return absl::InvalidArgumentError("--verify_seeds is a model's; a weight takes --verify_seed");
  }
  if (o.concurrency < 1 || o.concurrency > kMaxConcurrency) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency = ", o.concurrency, " must be in [1, ", kMaxConcurrency, "]"));
  }
  if (o.requests.has_value() == o.duration.has_value()) {
    return absl::InvalidArgumentError("bench needs exactly one of --requests and --duration");
  }
  if (o.requests && (*o.requests < 1 || *o.requests > kMaxRequests)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--requests = ", *o.requests, " must be in [1, ", kMaxRequests, "]"));
  }
  if (o.duration && (*o.duration <= absl::ZeroDuration() || *o.duration > kMaxDuration)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--duration = ", absl::FormatDuration(*o.duration), " must be in (0, 24h]"));
  }
  if (o.rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--rows = ", o.rows, " must be at least 1"));
  }
  if (o.inputs < 1 || o.inputs > kMaxInputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inputs = ", o.inputs, " must be in [1, ", kMaxInputs, "]"));
  }
  if (o.warmup < 0) return absl::InvalidArgumentError("--warmup must not be negative");
  if (o.inflight < 1 || o.inflight > kMaxInflight) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inflight = ", o.inflight, " must be in [1, ", kMaxInflight, "]"));
  }
  if (o.inflight > 1 && !o.stream && o.local.empty()) {
    return absl::InvalidArgumentError("--inflight above 1 needs --stream or --local");
  }
  if (o.channels < 0 || o.channels > kMaxChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat("--channels = ", o.channels, " must be in [0, ", kMaxChannels, "]"));
  }
  if (o.tolerance < 0) return absl::InvalidArgumentError("--tolerance must not be negative");
  if (!o.local.empty() && (o.stream || o.open_inference || !o.model.empty())) {
    return absl::InvalidArgumentError(
        "--local carries unary MatMul only: not with --stream, --protocol=oip or --model");
  }
  if (o.local_spin < absl::ZeroDuration() || o.local_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--local_spin_us = ", absl::ToInt64Microseconds(o.local_spin), " must be in [0, 1000000]"));
  }
  if (o.open_inference && o.output_dtype && *o.output_dtype != o.dtype) {
    return absl::InvalidArgumentError(
        "--out_dtype differs from --dtype, but the Open Inference Protocol (--protocol=oip) "
        "answers in the activations' dtype");
  }
  return absl::OkStatus();
}

namespace {

// The weight's setup and inputs.
absl::Status PrepareWeight(Client& client, const BenchOptions& o, const std::string& backend,
                           BenchSetup& setup, absl::StatusOr<BenchInputs>& inputs) {
  absl::StatusOr<v1::WeightInfo> weight = client.GetWeight(o.weight);
  if (!weight.ok()) return weight.status();
  const std::optional<Scheme> scheme = SchemeFromProto(weight->scheme());
  if (!scheme) return absl::InvalidArgumentError("the weight's scheme is unknown to qmmctl");
  setup.weight = o.weight;
  setup.scheme = std::string(SchemeFlagName(*scheme));
  setup.n = weight->n();
  setup.k = weight->k();
  setup.group_size = weight->group_size();
  setup.verify_seed = o.verify_seed;
  setup.tolerance = o.tolerance > 0
                        ? o.tolerance
                        : DefaultTolerance(*scheme, o.output_dtype.value_or(o.dtype), backend);
  inputs = WeightInputs(o, *weight, *scheme);
  return inputs.status();
}

// The model's setup and inputs: activations of --dtype, or token ids (whose answers are
// fp32 unless --out_dtype says otherwise; through the Open Inference Protocol, always).
absl::Status PrepareModel(Client& client, const BenchOptions& o, const std::string& backend,
                          BenchSetup& setup, absl::StatusOr<BenchInputs>& inputs) {
  absl::StatusOr<v1::ModelInfo> model = client.GetModel(o.model);
  if (!model.ok()) return model.status();
  int64_t vocab = 0;
  bool bf16_activations = o.dtype == DType::kBF16;
  DType output = o.output_dtype.value_or(o.dtype);
  if (model->token_input()) {
    absl::StatusOr<v1::WeightInfo> table = client.GetWeight(model->layers(0).embedding().weight());
    if (!table.ok()) return table.status();
    vocab = table->n();
    bf16_activations = table->scheme() == v1::SCHEME_BF16;
    output = o.output_dtype.value_or(DType::kF32);
    if (o.open_inference && output != DType::kF32) {
      return absl::InvalidArgumentError(
          "--out_dtype is not fp32, but the Open Inference Protocol answers a token model in "
          "FP32");
    }
  }
  std::map<std::string, RandomWeight, std::less<>> weights;
  bool has_w2a8 = false;
  if (!o.verify_seeds.empty()) {
    absl::StatusOr<std::map<std::string, RandomWeight, std::less<>>> random =
        RandomWeightsOf(client, *model, o.verify_seeds);
    if (!random.ok()) return random.status();
    weights = *std::move(random);
    for (const auto& [name, w] : weights) has_w2a8 |= w.scheme == Scheme::kW2A8;
  }
  setup.model = true;
  setup.weight = o.model;
  setup.scheme = model->token_input() ? "token model" : "model";
  setup.n = model->out_features();
  setup.k = model->token_input() ? vocab : model->in_features();
  setup.layers = model->layers_size();
  setup.dtype = model->token_input() ? "token ids" : std::string(DTypeName(o.dtype));
  setup.output_dtype = std::string(DTypeName(output));
  setup.verify_seeds = o.verify_seeds;
  setup.tolerance =
      o.tolerance > 0 ? o.tolerance : ForwardTolerance(has_w2a8, bf16_activations, output, backend);
  inputs = ModelInputs(o, *model, vocab, weights);
  return inputs.status();
}

}  // namespace

absl::StatusOr<bool> RunBench(Client& client, const ClientOptions& connection,
                              const BenchOptions& o) {
  if (absl::Status s = CheckBenchOptions(o); !s.ok()) return s;
  absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
  if (!info.ok()) return info.status();
  if (o.rows > info->limits().max_rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rows = ", o.rows, " exceeds the server's max_rows ", info->limits().max_rows()));
  }

  BenchSetup setup;
  setup.server = connection.server;
  setup.backend = info->backend();
  setup.device = info->device_name();
  setup.concurrency = o.concurrency;
  setup.stream = o.stream;
  setup.inflight = o.inflight;
  setup.protocol = !o.local.empty() ? "local" : o.open_inference ? "open-inference" : "qmm.v1";
  setup.channels = o.channels > 0 ? o.channels : DefaultChannels(o.concurrency, o.inflight);
  setup.rows = o.rows;
  setup.dtype = std::string(DTypeName(o.dtype));
  setup.output_dtype = std::string(DTypeName(o.output_dtype.value_or(o.dtype)));
  setup.inputs = o.inputs;
  setup.requests = o.requests;
  setup.duration = o.duration;
  setup.warmup = o.warmup;
  absl::StatusOr<BenchInputs> inputs;
  if (absl::Status s = o.model.empty() ? PrepareWeight(client, o, info->backend(), setup, inputs)
                                       : PrepareModel(client, o, info->backend(), setup, inputs);
      !s.ok()) {
    return s;
  }
  Run run(o, *inputs, setup.n, setup.tolerance, connection.call_timeout);
  absl::Status opened;
  if (o.local.empty()) {
    run.channels = OpenChannels(connection, setup.channels, &opened);
    if (!opened.ok()) return opened;
  } else {
    absl::StatusOr<std::vector<std::unique_ptr<LocalChannel>>> local =
        OpenLocalChannels(o, *inputs, setup.n, setup.channels);
    if (!local.ok()) return local.status();
    run.local_channels = *std::move(local);
  }

  std::vector<BenchTally> tallies(o.concurrency);
  std::vector<std::thread> callers;
  callers.reserve(o.concurrency);
  for (int c = 0; c < o.concurrency; ++c) {
    callers.emplace_back([&run, &tallies, c] { Caller(run, c, tallies[c]); });
  }
  run.warmed_up.Wait();
  const std::optional<v1::BatchingStats> before = Batching(client);
  const std::optional<inference::ModelStatistics> model_before =
      ModelStatistics(client, setup.weight);
  const absl::Time start = absl::Now();
  if (o.duration) run.end = start + *o.duration;
  run.go.Notify();
  for (std::thread& t : callers) t.join();
  const absl::Duration wall = absl::Now() - start;
  const std::optional<v1::BatchingStats> after = Batching(client);
  const std::optional<inference::ModelStatistics> model_after =
      ModelStatistics(client, setup.weight);

  BenchReport report = Summarize(setup, std::move(tallies), wall);
  if (before && after) report.batching = BatchingDelta(*before, *after);
  if (model_before && model_after) {
    report.server_model = StatisticsDelta(*model_before, *model_after);
  }
  std::fputs(FormatReport(report).c_str(), stdout);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << ReportJson(report).dump(2) << "\n";
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", o.json_path));
    std::printf("  wrote %s\n", o.json_path.c_str());
  }
  return report.passed();
}

}  // namespace qmm::ctl
