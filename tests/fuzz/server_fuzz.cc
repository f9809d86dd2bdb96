// libFuzzer target: whatever a client sends, the server answers with a status and keeps
// serving. One in-process qmm-server (CPU backend) on loopback holds a fixed set of weights
// and a model; each input drives one client action against it through the generated stubs:
// MatMul, MatMulStream, UploadWeight, CreateModel with Forward, Forward on the fixed model,
// Get / Delete by name, or the Open Inference Protocol's ModelInfer, ModelStreamInfer,
// ModelConfig and ModelStatistics, and its HTTP bodies (parsed as the HTTP endpoint does, then sent
// as ModelInfer). The fields of each request come from the input, biased towards the values
// validation compares against (the fixtures' names and shapes, payload sizes that match the header)
// so that the fuzzer gets past the first check; raw protobuf bytes reach the parsers as they are. A
// crash, a sanitizer report, or a hang (libFuzzer's -timeout) is a finding. What an action creates,
// it deletes; the fixtures are never deleted, so every input meets the same server state.
//
// Built and run by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inference/open_inference.grpc.pb.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/int4_checkpoint.h"
#include "proto/enum_convert.h"
#include "qmm/v1/qmm.grpc.pb.h"
#include "server/backend.h"
#include "server/cpu_backend.h"
#include "server/inference_json.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

// A fixed weight: name, scheme, N x K, group size (W4A16).
struct Fixture {
  const char* name;
  v1::Scheme scheme;
  int64_t n;
  int64_t k;
  int32_t group_size;
};
constexpr std::array<Fixture, 5> kFixtures = {{
    {"w8", v1::SCHEME_W8A16, 32, 64, 0},
    {"w4", v1::SCHEME_W4A16, 48, 256, 128},
    {"w4c", v1::SCHEME_W4A16, 16, 128, 0},
    {"w2", v1::SCHEME_W2A8, 32, 128, 0},
    {"f16", v1::SCHEME_FP16, 24, 64, 0},
}};
// The fixed model: w8 (64 -> 32) then a SiLU.
constexpr const char* kModel = "m";
// Payloads and rows stay small, so that an input runs in milliseconds.
constexpr size_t kMaxPayload = 64 << 10;
constexpr int64_t kMaxRows = 8;

struct Harness {
  std::unique_ptr<QmmServer> server;
  std::unique_ptr<v1::Qmm::Stub> stub;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer;
};
Harness* harness = nullptr;

// With QMM_FUZZ_STATS set, the status codes each call got, printed at exit: how far the
// inputs get past validation (a harness whose calls all fail early tests little).
std::map<std::string, std::map<int, int64_t>>* tally = nullptr;
void Count(const char* call, const grpc::Status& status) {
  if (tally != nullptr) ++(*tally)[call][status.error_code()];
}
void PrintTally() {
  for (const auto& [call, codes] : *tally) {
    std::fprintf(stderr, "%-14s", call.c_str());
    for (const auto& [code, count] : codes) {
      std::fprintf(stderr, " %d:%lld", code, static_cast<long long>(count));
    }
    std::fprintf(stderr, "\n");
  }
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return context;
}

// Calls the stub's `method` with a request that carries only `name`.
template <typename Request, typename Response>
void CallByName(grpc::Status (v1::Qmm::Stub::*method)(grpc::ClientContext*, const Request&,
                                                      Response*),
                const std::string& name) {
  Request request;
  request.set_name(name);
  Response response;
  (harness->stub.get()->*method)(Context().get(), request, &response);
}

bool IsFixtureName(std::string_view name) {
  if (name == kModel) return true;
  for (const Fixture& f : kFixtures) {
    if (name == f.name) return true;
  }
  return false;
}

// FuzzedDataProvider returns zeros (and false) once the input is used up, so each choice
// below makes its zero the common, valid case and spends input only on the others.

// A name: a fixture's most of the time, else arbitrary bytes (empty, long, not UTF-8:
// protobuf will not parse a string field that is not UTF-8, so such a call ends in gRPC
// before the service sees it).
std::string PickName(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 3) != 3) {
    return kFixtures[in.ConsumeIntegralInRange<size_t>(0, kFixtures.size() - 1)].name;
  }
  return in.ConsumeRandomLengthString(80);
}

// A name for something new: a plain one mostly, arbitrary bytes sometimes.
std::string NewName(FuzzedDataProvider& in, const char* prefix) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 7) return in.ConsumeRandomLengthString(80);
  return absl::StrCat(prefix, in.ConsumeIntegralInRange<int>(0, 99));
}

// An enum value: one of the valid 1..valid_max mostly, sometimes 0 (unspecified) or out of
// range.
template <typename E>
E PickEnum(FuzzedDataProvider& in, int valid_max) {
  const int v = in.ConsumeIntegralInRange<int>(0, valid_max + 2);
  if (v < valid_max) return static_cast<E>(v + 1);
  constexpr int kOthers[] = {0, -1, 1 << 20};
  return static_cast<E>(kOthers[v - valid_max]);
}

// A dimension: `typical` (the value validation expects) mostly, else near it, tiny or
// negative, or anything.
int64_t PickDim(FuzzedDataProvider& in, int64_t typical) {
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 3:
      return typical + in.ConsumeIntegralInRange<int64_t>(-2, 2);
    case 4:
      return in.ConsumeIntegralInRange<int64_t>(-2, 2);
    case 5:
      return in.ConsumeIntegral<int64_t>();
    default:
      return typical;
  }
}

// Bytes of one value of a wire dtype; 1 for one the server refuses (any length will do).
size_t DTypeBytes(v1::DType dtype) {
  const std::optional<DType> d = DTypeFromProto(dtype);
  return d ? DTypeSize(*d) : 1;
}

// Tensor data: `want` bytes when the input says so (and that is small), else arbitrary.
std::string PickData(FuzzedDataProvider& in, int64_t want) {
  if (want >= 0 && static_cast<size_t>(want) <= kMaxPayload && !in.ConsumeBool()) {
    std::string data = in.ConsumeBytesAsString(static_cast<size_t>(want));
    // A short input is padded with 0x3c bytes: small finite values in every dtype.
    data.resize(static_cast<size_t>(want), '\x3c');
    return data;
  }
  return in.ConsumeRandomLengthString(kMaxPayload);
}

// A tensor of `rows` x `cols` (as the input chooses to keep or bend them).
void FillTensor(FuzzedDataProvider& in, int64_t rows, int64_t cols, v1::Tensor* t) {
  t->set_dtype(PickEnum<v1::DType>(in, 3));
  const int rank = (in.ConsumeIntegralInRange<int>(0, 3) + 2) % 4;  // 2 mostly
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t d = PickDim(in, i == 0 ? rows : cols);
    t->add_shape(d);
    elements = (d > 0 && d < (1 << 20)) ? elements * d : -1;
    if (elements > (1 << 20)) elements = -1;
  }
  t->set_data(
      PickData(in, elements < 0 ? -1 : elements * static_cast<int64_t>(DTypeBytes(t->dtype()))));
}

const Fixture* FindFixture(std::string_view name) {
  for (const Fixture& f : kFixtures) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

v1::MatMulRequest MakeMatMul(FuzzedDataProvider& in) {
  v1::MatMulRequest request;
  request.set_weight(PickName(in));
  const Fixture* f = FindFixture(request.weight());
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, kMaxRows);
  FillTensor(in, rows, f != nullptr ? f->k : 64, request.mutable_input());
  request.set_output_dtype(PickEnum<v1::DType>(in, 3));
  return request;
}

void MatMul(FuzzedDataProvider& in) {
  const v1::MatMulRequest request = MakeMatMul(in);
  v1::MatMulResponse response;
  Count("MatMul", harness->stub->MatMul(Context().get(), request, &response));
}

void RawMatMul(FuzzedDataProvider& in) {
  v1::MatMulRequest request;
  const std::string bytes = in.ConsumeRemainingBytesAsString();
  if (!request.ParseFromString(bytes)) return;
  v1::MatMulResponse response;
  Count("MatMul raw", harness->stub->MatMul(Context().get(), request, &response));
}

void MatMulStream(FuzzedDataProvider& in) {
  auto context = Context();
  auto stream = harness->stub->MatMulStream(context.get());
  const int count = in.ConsumeIntegralInRange<int>(1, 4);
  for (int i = 0; i < count; ++i) {
    if (!stream->Write(MakeMatMul(in))) break;
  }
  stream->WritesDone();
  v1::MatMulResponse response;
  while (stream->Read(&response)) {
  }
  Count("MatMulStream", stream->Finish());
}

// The payload bytes a header describes, when that is small.
int64_t ExpectedPayload(const v1::WeightHeader& h) {
  if (h.n() <= 0 || h.k() <= 0 || h.n() > 4096 || h.k() > 4096) return -1;
  const int64_t values = h.n() * h.k();
  if (h.encoding() == v1::SOURCE_ENCODING_FLOAT) {
    return values * static_cast<int64_t>(DTypeBytes(h.source_dtype()));
  }
  if (h.encoding() == v1::SOURCE_ENCODING_BITNET_HF ||
      h.encoding() == v1::SOURCE_ENCODING_BITNET_LIGER) {
    return values / 4;
  }
  const std::optional<Scheme> scheme = SchemeFromProto(h.scheme());
  const WeightShape shape{h.n(), h.k(), h.group_size(), h.zero_points(), h.act_order()};
  if (const std::optional<Int4Checkpoint> format = Int4CheckpointFromProto(h.encoding())) {
    if (!CheckInt4CheckpointShape(*format, shape).ok()) return -1;
    const DType scales = h.source_dtype() == v1::DTYPE_UNSPECIFIED
                             ? DType::kF16
                             : DTypeFromProto(h.source_dtype()).value_or(DType::kF16);
    // An act_order payload needs its group index.
    return Int4CheckpointSizes(*format, shape, scales).Total(/*with_g_idx=*/h.act_order());
  }
  if (h.encoding() == v1::SOURCE_ENCODING_PACKED && scheme && ValidateShape(*scheme, shape).ok()) {
    return PackedBytes(*scheme, shape);  // the packed form's codes and scales, as they come
  }
  return -1;
}

void Upload(FuzzedDataProvider& in) {
  v1::WeightHeader header;
  const std::string name =
      in.ConsumeIntegralInRange<int>(0, 15) == 15 ? PickName(in) : NewName(in, "u");
  header.set_name(name);
  header.set_scheme(PickEnum<v1::Scheme>(in, 5));
  header.set_n(PickDim(in, in.ConsumeIntegralInRange<int64_t>(1, 96)));
  header.set_k(PickDim(in, 64 * in.ConsumeIntegralInRange<int64_t>(1, 4)));
  header.set_group_size(in.ConsumeBool() ? in.ConsumeIntegral<int32_t>() : 128);
  header.set_encoding(PickEnum<v1::SourceEncoding>(in, 8));
  header.set_zero_points(in.ConsumeIntegralInRange<int>(0, 3) == 3);
  header.set_act_order(in.ConsumeIntegralInRange<int>(0, 3) == 3);
  header.set_source_dtype(PickEnum<v1::DType>(in, 3));
  const std::string payload = PickData(in, ExpectedPayload(header));
  header.set_total_bytes(in.ConsumeIntegralInRange<int>(0, 7) != 7
                             ? static_cast<int64_t>(payload.size())
                             : in.ConsumeIntegral<int64_t>());
  header.set_sha256(in.ConsumeIntegralInRange<int>(0, 7) != 7 ? testing::Sha256Of(payload)
                                                              : in.ConsumeBytesAsString(32));
  // The messages: the header, then the payload in one to three chunks; sometimes a second
  // header, or a chunk before the header.
  std::vector<v1::UploadWeightRequest> messages;
  v1::UploadWeightRequest message;
  if (in.ConsumeIntegralInRange<int>(0, 15) == 15) {
    message.set_chunk("early");
    messages.push_back(message);
  }
  *message.mutable_header() = header;
  messages.push_back(message);
  const int chunks = in.ConsumeIntegralInRange<int>(1, 3);
  size_t offset = 0;
  for (int i = 0; i < chunks && offset < payload.size(); ++i) {
    const size_t size = i + 1 == chunks
                            ? payload.size() - offset
                            : in.ConsumeIntegralInRange<size_t>(0, payload.size() - offset);
    message.set_chunk(payload.substr(offset, size));
    messages.push_back(message);
    offset += size;
  }
  if (in.ConsumeIntegralInRange<int>(0, 15) == 15) {
    *message.mutable_header() = header;
    messages.push_back(message);
  }
  const grpc::Status status = testing::UploadMessages(*harness->stub, messages);
  Count("UploadWeight", status);
  if (!status.ok() || IsFixtureName(name)) return;
  // Uploaded: one MatMul through it, then it goes.
  v1::MatMulRequest request;
  request.set_weight(name);
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, kMaxRows);
  request.mutable_input()->set_dtype(v1::DTYPE_FP32);
  request.mutable_input()->add_shape(rows);
  request.mutable_input()->add_shape(header.k());
  request.mutable_input()->set_data(PickData(in, rows * header.k() * 4));
  v1::MatMulResponse response;
  Count("MatMul new", harness->stub->MatMul(Context().get(), request, &response));
  CallByName(&v1::Qmm::Stub::DeleteWeight, name);
}

void AddLayer(FuzzedDataProvider& in, int64_t features, v1::CreateModelRequest* request) {
  v1::Layer* layer = request->add_layers();
  auto floats = [&](google::protobuf::RepeatedField<float>* out) {
    const int64_t count = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 300) : features;
    for (int64_t i = 0; i < count && i < 4096; ++i) {
      out->Add(in.ConsumeBool() ? in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f)
                                : in.ConsumeFloatingPoint<float>());
    }
  };
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      layer->mutable_linear()->set_weight(PickName(in));
      if (in.ConsumeBool()) floats(layer->mutable_linear()->mutable_bias());
      break;
    case 1:
      layer->mutable_embedding()->set_weight(PickName(in));
      break;
    case 2:
      layer->mutable_dyt()->set_alpha(in.ConsumeFloatingPoint<float>());
      floats(layer->mutable_dyt()->mutable_gamma());
      if (in.ConsumeBool()) floats(layer->mutable_dyt()->mutable_beta());
      break;
    case 3:
      layer->mutable_activation()->set_kind(PickEnum<v1::Activation>(in, 3));
      break;
    case 4:
      layer->mutable_gated_mlp()->set_gate(PickName(in));
      layer->mutable_gated_mlp()->set_up(PickName(in));
      layer->mutable_gated_mlp()->set_down(PickName(in));
      break;
    case 5:
      layer->mutable_rms_norm()->set_epsilon(in.ConsumeBool() ? 1e-5f
                                                              : in.ConsumeFloatingPoint<float>());
      floats(layer->mutable_rms_norm()->mutable_weight());
      break;
    default:
      layer->mutable_residual()->set_block_start(in.ConsumeIntegralInRange<int32_t>(-1, 5));
      break;
  }
}

void Forward(FuzzedDataProvider& in, const std::string& model, int64_t features) {
  v1::ForwardRequest request;
  request.set_model(model);
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, kMaxRows);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 3) {
    const int count = in.ConsumeIntegralInRange<int>(0, 8);
    for (int i = 0; i < count; ++i) {
      request.add_token_ids(in.ConsumeIntegralInRange<int32_t>(-2, 70));
    }
  } else {
    FillTensor(in, rows, features, request.mutable_input());
  }
  request.set_output_dtype(PickEnum<v1::DType>(in, 3));
  v1::ForwardResponse response;
  Count("Forward", harness->stub->Forward(Context().get(), request, &response));
}

void CreateModelAndForward(FuzzedDataProvider& in, bool raw) {
  v1::CreateModelRequest request;
  if (raw) {
    if (!request.ParseFromString(in.ConsumeRandomLengthString(4096))) return;
  } else {
    request.set_name(NewName(in, "model"));
    const int layers = (in.ConsumeIntegralInRange<int>(0, 5) + 1) % 6;  // one mostly
    for (int i = 0; i < layers; ++i) AddLayer(in, 64, &request);
  }
  if (IsFixtureName(request.name())) return;
  v1::ModelInfo info;
  const grpc::Status created = harness->stub->CreateModel(Context().get(), request, &info);
  Count(raw ? "CreateModel raw" : "CreateModel", created);
  if (!created.ok()) return;
  Forward(in, request.name(), info.in_features());
  CallByName(&v1::Qmm::Stub::DeleteModel, request.name());
}

void GetOrDelete(FuzzedDataProvider& in) {
  const std::string name = in.ConsumeRandomLengthString(300);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      CallByName(&v1::Qmm::Stub::GetWeight, name);
      break;
    case 1:
      CallByName(&v1::Qmm::Stub::GetModel, name);
      break;
    case 2:
      if (!IsFixtureName(name)) CallByName(&v1::Qmm::Stub::DeleteWeight, name);
      break;
    default:
      if (!IsFixtureName(name)) CallByName(&v1::Qmm::Stub::DeleteModel, name);
      break;
  }
}

// An inference request for a fixture or the model, with one input "x" of FP16 [rows, K]
// in raw contents mostly; otherwise other names, datatypes, counts, shapes, typed contents
// and requested outputs.
inference::ModelInferRequest MakeInfer(FuzzedDataProvider& in) {
  inference::ModelInferRequest request;
  request.set_model_name(in.ConsumeIntegralInRange<int>(0, 7) == 7 ? kModel : PickName(in));
  if (in.ConsumeIntegralInRange<int>(0, 7) == 7) {
    request.set_model_version(in.ConsumeRandomLengthString(8));
  }
  request.set_id(in.ConsumeRandomLengthString(16));
  const Fixture* f = FindFixture(request.model_name());
  const int64_t cols = f != nullptr ? f->k : 64;
  constexpr std::array<std::pair<const char*, int64_t>, 7> kDatatypes = {
      {{"FP16", 2}, {"FP32", 4}, {"BF16", 2}, {"INT32", 4}, {"INT64", 8}, {"INT8", 1}, {"", 1}}};
  const int inputs = (in.ConsumeIntegralInRange<int>(0, 3) + 1) % 4;  // one mostly
  for (int i = 0; i < inputs; ++i) {
    inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
    input->set_name(in.ConsumeIntegralInRange<int>(0, 7) == 7 ? in.ConsumeRandomLengthString(12)
                                                              : "x");
    const auto [datatype, size] =
        kDatatypes[in.ConsumeIntegralInRange<int>(0, 3) != 3
                       ? 0
                       : in.ConsumeIntegralInRange<size_t>(0, kDatatypes.size() - 1)];
    input->set_datatype(datatype);
    const int rank = (in.ConsumeIntegralInRange<int>(0, 3) + 2) % 4;  // 2 mostly
    int64_t elements = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t dim =
          PickDim(in, d == 0 ? in.ConsumeIntegralInRange<int64_t>(1, kMaxRows) : cols);
      input->add_shape(dim);
      elements = (dim > 0 && dim < (1 << 20) && elements >= 0) ? elements * dim : -1;
      if (elements > (1 << 20)) elements = -1;
    }
    if (in.ConsumeIntegralInRange<int>(0, 7) != 7) {
      request.add_raw_input_contents(PickData(in, elements < 0 ? -1 : elements * size));
      continue;
    }
    const int64_t count = elements >= 0 && !in.ConsumeBool()
                              ? std::min<int64_t>(elements, 4096)
                              : in.ConsumeIntegralInRange<int64_t>(0, 300);
    inference::InferTensorContents* contents = input->mutable_contents();
    const int field = in.ConsumeIntegralInRange<int>(0, 2);
    for (int64_t v = 0; v < count; ++v) {
      if (field == 0) contents->add_fp32_contents(in.ConsumeFloatingPoint<float>());
      if (field == 1) contents->add_int_contents(in.ConsumeIntegralInRange<int32_t>(-2, 70));
      if (field == 2) contents->add_int64_contents(in.ConsumeIntegral<int64_t>());
    }
  }
  if (in.ConsumeIntegralInRange<int>(0, 7) == 7) {
    request.add_outputs()->set_name(in.ConsumeBool() ? "y" : in.ConsumeRandomLengthString(8));
  }
  return request;
}

void ModelInfer(FuzzedDataProvider& in) {
  const inference::ModelInferRequest request = MakeInfer(in);
  inference::ModelInferResponse response;
  Count("ModelInfer", harness->infer->ModelInfer(Context().get(), request, &response));
}

void RawModelInfer(FuzzedDataProvider& in) {
  inference::ModelInferRequest request;
  if (!request.ParseFromString(in.ConsumeRemainingBytesAsString())) return;
  inference::ModelInferResponse response;
  Count("ModelInfer raw", harness->infer->ModelInfer(Context().get(), request, &response));
}

void ModelStreamInfer(FuzzedDataProvider& in) {
  auto context = Context();
  auto stream = harness->infer->ModelStreamInfer(context.get());
  const int count = in.ConsumeIntegralInRange<int>(1, 4);
  for (int i = 0; i < count; ++i) {
    if (!stream->Write(MakeInfer(in))) break;
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  while (stream->Read(&response)) {
  }
  Count("ModelStreamInfer", stream->Finish());
}

// An HTTP infer body: JSON, or JSON and binary data split where the input says.
void HttpInferBody(FuzzedDataProvider& in) {
  std::optional<int64_t> json_length;
  if (in.ConsumeBool()) json_length = in.ConsumeIntegralInRange<int64_t>(-1, 4096);
  const std::string body = in.ConsumeRemainingBytesAsString();
  absl::StatusOr<HttpInferRequest> parsed = ParseInferRequest(body, json_length, "w8", "");
  if (!parsed.ok()) return;
  inference::ModelInferResponse response;
  const grpc::Status status =
      harness->infer->ModelInfer(Context().get(), parsed->request, &response);
  Count("HttpInferBody", status);
  if (!status.ok()) return;
  int64_t length = 0;
  FormatInferResponse(response, parsed->binary_output, &length);
}

// ModelConfig and ModelStatistics of a name (empty: every model's statistics) and version.
void ModelConfigAndStatistics(FuzzedDataProvider& in) {
  const std::string name = in.ConsumeIntegralInRange<int>(0, 7) == 7 ? "" : PickName(in);
  const std::string version = in.ConsumeBool() ? "" : in.ConsumeRandomLengthString(4);
  inference::ModelConfigRequest config;
  config.set_name(name);
  config.set_version(version);
  inference::ModelConfigResponse config_response;
  Count("ModelConfig", harness->infer->ModelConfig(Context().get(), config, &config_response));
  inference::ModelStatisticsRequest stats;
  stats.set_name(name);
  stats.set_version(version);
  inference::ModelStatisticsResponse stats_response;
  Count("ModelStatistics",
        harness->infer->ModelStatistics(Context().get(), stats, &stats_response));
}

void NewModel(FuzzedDataProvider& in) { CreateModelAndForward(in, /*raw=*/false); }
void RawNewModel(FuzzedDataProvider& in) { CreateModelAndForward(in, /*raw=*/true); }
void ForwardFixedModel(FuzzedDataProvider& in) { Forward(in, kModel, 64); }

// What one input does; its last byte picks the action.
constexpr void (*kActions[])(FuzzedDataProvider&) = {MatMul,
                                                     RawMatMul,
                                                     MatMulStream,
                                                     Upload,
                                                     NewModel,
                                                     RawNewModel,
                                                     ForwardFixedModel,
                                                     GetOrDelete,
                                                     ModelInfer,
                                                     RawModelInfer,
                                                     ModelStreamInfer,
                                                     HttpInferBody,
                                                     ModelConfigAndStatistics};

// Starts the server and uploads the fixtures; exits on failure (nothing to fuzz).
void Start() {
  BackendOptions backend;
  backend.kind = BackendOptions::Kind::kCpu;
  backend.num_workers = 1;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.memory_limit_bytes = int64_t{64} << 20;
  options.max_message_bytes = int64_t{4} << 20;
  options.shutdown_grace = absl::Seconds(1);
  harness = new Harness;
  harness->server = std::make_unique<QmmServer>(CreateCpuBackend(backend), options);
  absl::StatusOr<int> port = harness->server->Start();
  if (!port.ok()) {
    std::fprintf(stderr, "server_fuzz: %s\n", port.status().ToString().c_str());
    std::exit(1);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", *port), grpc::InsecureChannelCredentials(), args);
  harness->stub = v1::Qmm::NewStub(channel);
  harness->infer = inference::GRPCInferenceService::NewStub(channel);
  uint32_t seed = 1;
  for (const Fixture& f : kFixtures) {
    const std::string payload =
        testing::ToBytes(DType::kF32, testing::RandomFloats(f.n * f.k, seed++));
    const v1::WeightHeader header =
        testing::MakeHeader(f.name, f.scheme, f.n, f.k, f.group_size, v1::SOURCE_ENCODING_FLOAT,
                            v1::DTYPE_FP32, payload);
    if (const grpc::Status s = testing::Upload(*harness->stub, header, payload); !s.ok()) {
      std::fprintf(stderr, "server_fuzz: upload of %s: %s\n", f.name, s.error_message().c_str());
      std::exit(1);
    }
  }
  v1::CreateModelRequest model;
  model.set_name(kModel);
  model.add_layers()->mutable_linear()->set_weight("w8");
  model.add_layers()->mutable_activation()->set_kind(v1::ACTIVATION_SILU);
  v1::ModelInfo info;
  if (const grpc::Status s = harness->stub->CreateModel(Context().get(), model, &info); !s.ok()) {
    std::fprintf(stderr, "server_fuzz: model: %s\n", s.error_message().c_str());
    std::exit(1);
  }
}

}  // namespace
}  // namespace qmm

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Quiet: protobuf logs every string that is not UTF-8 (which gRPC then refuses).
  google::protobuf::SetLogHandler(
      +[](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  if (std::getenv("QMM_FUZZ_STATS") != nullptr) {
    qmm::tally = new std::map<std::string, std::map<int, int64_t>>;
    std::atexit(qmm::PrintTally);
  }
  qmm::Start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const auto& actions = qmm::kActions;
  actions[in.ConsumeIntegralInRange<size_t>(0, std::size(actions) - 1)](in);
  return 0;
}
