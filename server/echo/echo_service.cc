#include "server/echo/echo_service.h"

#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/dtype.h"
#include "proto/enum_convert.h"
#include "server/grpc_status.h"
#include "server/planned_bidi_reactor.h"

namespace qmm::echo {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* rpc, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = rpc->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status CheckWeight(const EchoOptions& options, const std::string& name, const char* field) {
  if (name == options.weight) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(field, ": weight \"", name,
                                          "\" not found (this echo server holds only \"",
                                          options.weight, "\")"));
}

// Requests a stream may have read and not yet answered: as many as qmm-server reads ahead
// (kMaxStreamInFlight, server/ordered_stream_reactor.h), so that a client sending ahead
// meets the same window.
constexpr size_t kMaxAhead = 16;

// MatMulStream: each request's echo, written in order while the next requests are read.
// A refused request ends the stream with its status once the answers before it are
// written. Reactions may run concurrently on gRPC's threads: one mutex guards the state
// (server/planned_bidi_reactor.h). Deletes itself in OnDone.
class EchoStream final
    : public PlannedBidiReactor<EchoStream, v1::MatMulRequest, v1::MatMulResponse> {
  friend PlannedBidiReactor;

 public:
  explicit EchoStream(const EchoOptions& options) : options_(options) {
    reading_ = true;
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) {
        read_closed_ = true;
      } else if (!failed_) {
        v1::MatMulResponse response;
        if (absl::Status s = Echo(options_, incoming_, &response); s.ok()) {
          answers_.push_back(std::move(response));
        } else {
          failed_ = ToGrpcStatus(s);
        }
      }
      actions = Plan();
    }
    Perform(this, actions);
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      answers_.pop_front();
      if (!ok && !failed_) {  // the client went away mid-stream
        failed_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading");
        answers_.clear();
      }
      actions = Plan();
    }
    Perform(this, actions);
  }

  void OnDone() override { delete this; }

 private:
  // Read while the window has room and nothing failed; write the oldest answer; finish
  // once every answer is written and the client is done (or a request failed), and no
  // thread is about to start anything.
  Actions Plan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions actions;
    if (!reading_ && !read_closed_ && !failed_ && answers_.size() < kMaxAhead) {
      reading_ = actions.read = true;
    }
    if (!writing_ && !answers_.empty()) {
      writing_ = true;
      actions.write = &answers_.front();
    }
    if (actions.read || actions.write != nullptr) {
      ++starting_;
    } else if (!finished_ && !writing_ && answers_.empty() && starting_ == 0 &&
               (failed_ || (read_closed_ && !reading_))) {
      finished_ = true;
      actions.finish = failed_.value_or(grpc::Status::OK);
    }
    return actions;
  }

  const EchoOptions& options_;
  std::deque<v1::MatMulResponse> answers_ ABSL_GUARDED_BY(mu_);  // front: being written
  std::optional<grpc::Status> failed_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::Status Echo(const EchoOptions& options, const v1::MatMulRequest& request,
                  v1::MatMulResponse* response) {
  if (absl::Status s = CheckWeight(options, request.weight(), "weight"); !s.ok()) return s;
  const v1::Tensor& input = request.input();
  const std::optional<DType> dtype = DTypeFromProto(input.dtype());
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.dtype = ", v1::DType_Name(input.dtype()),
                     " is not a supported dtype (DTYPE_FP32, DTYPE_FP16 or DTYPE_BF16)"));
  }
  if (request.output_dtype() != v1::DTYPE_UNSPECIFIED && request.output_dtype() != input.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_dtype = ", v1::DType_Name(request.output_dtype()),
                     " differs from input.dtype; this echo server answers in the input's dtype"));
  }
  if (input.shape_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.shape has ", input.shape_size(), " dimensions, must be 2 ([M, K])"));
  }
  const int64_t m = input.shape(0);
  if (m < 1 || m > options.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input.shape[0] = ", m, " (M) must be in [1, max_rows ", options.max_rows, "]"));
  }
  if (input.shape(1) != options.features) {
    return absl::InvalidArgumentError(absl::StrCat("input.shape[1] = ", input.shape(1),
                                                   " does not match K = ", options.features,
                                                   " of weight \"", options.weight, "\""));
  }
  // m <= max_rows (at most 2^31 in main.cc's flags) and features <= 2^20 keep this exact.
  const int64_t bytes = m * options.features * static_cast<int64_t>(DTypeSize(*dtype));
  if (static_cast<int64_t>(input.data().size()) != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.data is ", input.data().size(), " bytes, but shape [", m, ", ",
                     options.features, "] of ", std::string(DTypeName(*dtype)), " needs ", bytes));
  }
  v1::Tensor* output = response->mutable_output();
  output->set_dtype(input.dtype());
  *output->mutable_shape() = input.shape();
  output->set_data(input.data());
  return absl::OkStatus();
}

void EchoService::FillWeightInfo(v1::WeightInfo* info) const {
  info->set_name(options_.weight);
  info->set_n(options_.features);
  info->set_k(options_.features);
  info->set_scheme(v1::SCHEME_FP16);
}

grpc::ServerUnaryReactor* EchoService::ServerInfo(grpc::CallbackServerContext* rpc,
                                                  const v1::ServerInfoRequest* /*request*/,
                                                  v1::ServerInfoResponse* response) {
  response->set_backend("echo");
  response->set_device_name("none: every answer is its request's input");
  response->add_schemes(v1::SCHEME_FP16);
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(options_.max_message_bytes);
  limits->set_max_dim(options_.features);
  limits->set_max_rows(options_.max_rows);
  response->set_weights(1);
  return FinishNow(rpc, absl::OkStatus());
}

grpc::ServerUnaryReactor* EchoService::GetWeight(grpc::CallbackServerContext* rpc,
                                                 const v1::GetWeightRequest* request,
                                                 v1::WeightInfo* response) {
  absl::Status status = CheckWeight(options_, request->name(), "name");
  if (status.ok()) FillWeightInfo(response);
  return FinishNow(rpc, status);
}

grpc::ServerUnaryReactor* EchoService::ListWeights(grpc::CallbackServerContext* rpc,
                                                   const v1::ListWeightsRequest* /*request*/,
                                                   v1::ListWeightsResponse* response) {
  FillWeightInfo(response->add_weights());
  return FinishNow(rpc, absl::OkStatus());
}

grpc::ServerUnaryReactor* EchoService::MatMul(grpc::CallbackServerContext* rpc,
                                              const v1::MatMulRequest* request,
                                              v1::MatMulResponse* response) {
  return FinishNow(rpc, Echo(options_, *request, response));
}

grpc::ServerBidiReactor<v1::MatMulRequest, v1::MatMulResponse>* EchoService::MatMulStream(
    grpc::CallbackServerContext* /*rpc*/) {
  return new EchoStream(options_);
}

}  // namespace qmm::echo
