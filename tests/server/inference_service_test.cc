// The Open Inference Protocol service (inference.GRPCInferenceService) through the
// in-process server (CPU backend): liveness, readiness and metadata of weights and models,
// ModelInfer on every scheme and input datatype against the float64 reference (tolerance:
// testing::Tolerance of the output dtype) and bit for bit against qmm.v1's MatMul and
// Forward, token models, every malformed request answered with the field it names,
// ModelStreamInfer's in-stream errors, ModelInfer batched with MatMul in one launch, and
// the model config and statistics (their counts and durations, failures in the queue).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "inference/open_inference.grpc.pb.h"
#include "kernels/format.h"
#include "server/proto_convert.h"
#include "tests/server/gated_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using testing::FromBytes;
using testing::RandomFloats;
using testing::ToBytes;

constexpr int64_t kMaxRows = 512;

class InferenceServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{256} << 20;
    options.max_rows = kMaxRows;
    server_ = testing::StartTestServer(options, /*workers=*/2);
    ASSERT_NE(server_.stub, nullptr);
    infer_ = inference::GRPCInferenceService::NewStub(server_.channel);
  }

  const PackedWeight& Upload(const std::string& name, Scheme scheme, WeightShape shape,
                             uint32_t seed) {
    return weights_.Upload(*server_.stub, name, scheme, shape, seed);
  }

  // A model of one linear layer over `weight` or, with `table`, an embedding first.
  void CreateModel(const std::string& name, const std::string& weight,
                   const std::string& table = "") {
    v1::CreateModelRequest request;
    request.set_name(name);
    if (!table.empty()) request.add_layers()->mutable_embedding()->set_weight(table);
    request.add_layers()->mutable_linear()->set_weight(weight);
    grpc::ClientContext context;
    v1::ModelInfo info;
    const grpc::Status status = server_.stub->CreateModel(&context, request, &info);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    return infer_->ModelInfer(&context, request, response);
  }

  // A request by model name and version (ModelConfig, ModelStatistics, ...) through `rpc`.
  template <typename Request, typename Response>
  grpc::Status ByName(grpc::Status (inference::GRPCInferenceService::Stub::*rpc)(
                          grpc::ClientContext*, const Request&, Response*),
                      const std::string& name, const std::string& version, Response* response) {
    grpc::ClientContext context;
    Request request;
    request.set_name(name);
    request.set_version(version);
    return (infer_.get()->*rpc)(&context, request, response);
  }

  std::string ForwardBytes(const v1::ForwardRequest& request) {
    grpc::ClientContext context;
    v1::ForwardResponse response;
    const grpc::Status status = server_.stub->Forward(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.output().data();
  }

  testing::TestServer server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer_;
  testing::ReferenceWeights weights_;
};

// A request for input `name` [rows, cols] (cols < 0: shape [rows]) of `datatype`; its
// elements go in raw_input_contents unless `raw` is false.
ModelInferRequest MakeRequest(const std::string& model, const std::string& name,
                              const std::string& datatype, std::vector<int64_t> shape,
                              std::string raw) {
  ModelInferRequest request;
  request.set_model_name(model);
  ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  request.add_raw_input_contents(std::move(raw));
  return request;
}

std::string DatatypeOf(DType dtype) {
  return dtype == DType::kF32 ? "FP32" : dtype == DType::kF16 ? "FP16" : "BF16";
}

TEST_F(InferenceServiceTest, ServerLiveReadyMetadataAndHealth) {
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse response;
    ASSERT_TRUE(infer_->ServerLive(&context, {}, &response).ok());
    EXPECT_TRUE(response.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    ASSERT_TRUE(infer_->ServerReady(&context, {}, &response).ok());
    EXPECT_TRUE(response.ready());
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse response;
    ASSERT_TRUE(infer_->ServerMetadata(&context, {}, &response).ok());
    EXPECT_EQ(response.name(), "qmm");
    EXPECT_EQ(response.version(), QMM_VERSION);
    EXPECT_EQ(absl::StrJoin(response.extensions(), ","), "model_configuration,statistics");
  }
  auto health = grpc::health::v1::Health::NewStub(server_.channel);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("inference.GRPCInferenceService");
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(InferenceServiceTest, ServerReadyFollowsTheServersServingState) {
  server_.server->SetServing(false);
  grpc::ClientContext context;
  inference::ServerReadyResponse response;
  ASSERT_TRUE(infer_->ServerReady(&context, {}, &response).ok());
  EXPECT_FALSE(response.ready());
  server_.server->SetServing(true);
}

TEST_F(InferenceServiceTest, ModelReadyFollowsTheStore) {
  Upload("w", Scheme::kW8A16, {16, 64, 0}, 1);
  auto ready = [&](const std::string& name, const std::string& version) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    const grpc::Status status = infer_->ModelReady(&context, request, &response);
    EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
    return response.ready();
  };
  EXPECT_TRUE(ready("w", ""));
  EXPECT_TRUE(ready("w", "1"));
  EXPECT_FALSE(ready("w", "2"));
  EXPECT_FALSE(ready("nope", ""));

  grpc::ClientContext context;
  inference::ModelReadyRequest bad;
  bad.set_name("");
  inference::ModelReadyResponse response;
  const grpc::Status status = infer_->ModelReady(&context, bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "name is empty");

  grpc::ClientContext del;
  v1::DeleteWeightRequest request;
  request.set_name("w");
  v1::DeleteWeightResponse deleted;
  ASSERT_TRUE(server_.stub->DeleteWeight(&del, request, &deleted).ok());
  EXPECT_FALSE(ready("w", ""));
}

TEST_F(InferenceServiceTest, ModelMetadataDescribesWeightsAndModels) {
  Upload("w4", Scheme::kW4A16, {48, 256, 128}, 2);
  Upload("tok", Scheme::kFp16, {50, 256, 0}, 3);
  CreateModel("float-model", "w4");
  CreateModel("token-model", "w4", "tok");
  auto metadata = [&](const std::string& name) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(name);
    inference::ModelMetadataResponse response;
    EXPECT_TRUE(infer_->ModelMetadata(&context, request, &response).ok()) << name;
    return response;
  };
  auto tensor = [](const inference::ModelMetadataResponse::TensorMetadata& t) {
    return absl::StrCat(t.name(), " ", t.datatype(), " [", absl::StrJoin(t.shape(), ","), "]");
  };

  inference::ModelMetadataResponse w = metadata("w4");
  EXPECT_EQ(w.name(), "w4");
  ASSERT_EQ(w.versions_size(), 1);
  EXPECT_EQ(w.versions(0), "1");
  EXPECT_EQ(w.platform(), "qmm_w4a16");
  ASSERT_EQ(w.inputs_size(), 1);
  ASSERT_EQ(w.outputs_size(), 1);
  EXPECT_EQ(tensor(w.inputs(0)), "x FP16 [-1,256]");
  EXPECT_EQ(tensor(w.outputs(0)), "y FP16 [-1,48]");

  inference::ModelMetadataResponse f = metadata("float-model");
  EXPECT_EQ(f.platform(), "qmm_forward");
  EXPECT_EQ(tensor(f.inputs(0)), "x FP16 [-1,256]");
  EXPECT_EQ(tensor(f.outputs(0)), "y FP16 [-1,48]");

  inference::ModelMetadataResponse t = metadata("token-model");
  EXPECT_EQ(t.platform(), "qmm_forward");
  EXPECT_EQ(tensor(t.inputs(0)), "token_ids INT32 [-1]");
  EXPECT_EQ(tensor(t.outputs(0)), "y FP32 [-1,48]");

  for (const auto& [name, version] :
       std::vector<std::pair<std::string, std::string>>{{"nope", ""}, {"w4", "2"}}) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelMetadataResponse response;
    const grpc::Status status = infer_->ModelMetadata(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << name << " " << version;
    EXPECT_NE(status.error_message().find(name), std::string::npos) << status.error_message();
  }
}

TEST_F(InferenceServiceTest, ModelConfigDescribesHowEachModelIsServed) {
  Upload("w4", Scheme::kW4A16, {48, 256, 128}, 2);
  Upload("tok", Scheme::kFp16, {50, 256, 0}, 3);
  CreateModel("token-model", "w4", "tok");
  auto config = [&](const std::string& name) {
    inference::ModelConfigResponse response;
    const grpc::Status status =
        ByName(&inference::GRPCInferenceService::Stub::ModelConfig, name, "", &response);
    EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
    return response.config();
  };
  auto dims = [](const auto& tensor) {
    return absl::StrCat(tensor.name(), " ", inference::DataType_Name(tensor.data_type()), " [",
                        absl::StrJoin(tensor.dims(), ","), "]");
  };

  const inference::ModelConfig w = config("w4");
  EXPECT_EQ(w.name(), "w4");
  EXPECT_EQ(w.platform(), "qmm_w4a16");
  EXPECT_EQ(w.backend(), "qmm");
  EXPECT_EQ(w.max_batch_size(), kMaxRows);  // the rows: the batch dimension
  ASSERT_EQ(w.input_size(), 1);
  ASSERT_EQ(w.output_size(), 1);
  EXPECT_EQ(dims(w.input(0)), "x TYPE_FP16 [256]");
  EXPECT_FALSE(w.input(0).has_reshape());
  EXPECT_EQ(dims(w.output(0)), "y TYPE_FP16 [48]");
  ASSERT_EQ(w.instance_group_size(), 1);
  EXPECT_EQ(w.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(w.instance_group(0).count(), 2);  // the test server's workers
  ASSERT_TRUE(w.has_dynamic_batching());
  EXPECT_EQ(absl::StrJoin(w.dynamic_batching().preferred_batch_size(), ","), "64");
  EXPECT_EQ(w.dynamic_batching().max_queue_delay_microseconds(), 0u);

  const inference::ModelConfig t = config("token-model");
  EXPECT_EQ(t.platform(), "qmm_forward");
  EXPECT_EQ(dims(t.input(0)), "token_ids TYPE_INT32 [1]");
  ASSERT_TRUE(t.input(0).has_reshape());  // each row one id: [1] -> []
  EXPECT_EQ(t.input(0).reshape().shape_size(), 0);
  EXPECT_EQ(dims(t.output(0)), "y TYPE_FP32 [48]");

  for (const auto& [name, version, code] :
       std::vector<std::tuple<std::string, std::string, grpc::StatusCode>>{
           {"nope", "", grpc::StatusCode::NOT_FOUND},
           {"w4", "2", grpc::StatusCode::NOT_FOUND},
           {"", "", grpc::StatusCode::INVALID_ARGUMENT}}) {
    inference::ModelConfigResponse response;
    const grpc::Status status =
        ByName(&inference::GRPCInferenceService::Stub::ModelConfig, name, version, &response);
    EXPECT_EQ(status.error_code(), code)
        << name << " " << version << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(name.empty() ? "name" : name), std::string::npos)
        << status.error_message();
  }
}

// The launches of each batch size, as "ROWSxLAUNCHES ..."; every phase counts them alike.
std::string BatchSizes(const inference::ModelStatistics& stats) {
  std::vector<std::string> out;
  for (const inference::InferBatchStatistics& b : stats.batch_stats()) {
    EXPECT_EQ(b.compute_input().count(), b.compute_infer().count());
    EXPECT_EQ(b.compute_output().count(), b.compute_infer().count());
    out.push_back(absl::StrCat(b.batch_size(), "x", b.compute_infer().count()));
  }
  return absl::StrJoin(out, " ");
}

TEST_F(InferenceServiceTest, ModelStatisticsCountEveryApisRequests) {
  Upload("a", Scheme::kW8A16, {24, 64, 0}, 30);
  Upload("b", Scheme::kW4A16, {16, 128, 128}, 31);
  CreateModel("m", "a");
  auto statistics = [&](const std::string& name, const std::string& version = "") {
    inference::ModelStatisticsResponse response;
    const grpc::Status status =
        ByName(&inference::GRPCInferenceService::Stub::ModelStatistics, name, version, &response);
    EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
    return response;
  };
  {
    const inference::ModelStatisticsResponse fresh = statistics("a");
    ASSERT_EQ(fresh.model_stats_size(), 1);
    const inference::ModelStatistics& a = fresh.model_stats(0);
    EXPECT_EQ(a.name(), "a");
    EXPECT_EQ(a.version(), "1");
    EXPECT_EQ(a.last_inference(), 0u);
    EXPECT_EQ(a.inference_count(), 0u);
    EXPECT_EQ(a.execution_count(), 0u);
    EXPECT_EQ(a.inference_stats().success().count(), 0u);
    EXPECT_EQ(a.batch_stats_size(), 0);
  }

  // One request at a time, so each is a launch of its own.
  const auto before = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  const std::vector<int64_t> rows = {1, 2, 2, 3};
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t m = rows[i];
    const std::vector<float> x = RandomFloats(m * 64, 32 + static_cast<uint32_t>(i));
    if (i % 2 == 0) {  // the Open Inference Protocol and qmm.v1 alike
      ModelInferResponse response;
      const grpc::Status status =
          Infer(MakeRequest("a", "x", "FP32", {m, 64}, ToBytes(DType::kF32, x)), &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    } else {
      testing::MatMulBytes(*server_.stub, "a", DType::kF32, m, 64, x);
    }
  }
  v1::ForwardRequest forward;
  forward.set_model("m");
  forward.mutable_input()->set_dtype(v1::DTYPE_FP32);
  forward.mutable_input()->add_shape(2);
  forward.mutable_input()->add_shape(64);
  forward.mutable_input()->set_data(ToBytes(DType::kF32, RandomFloats(2 * 64, 40)));
  ForwardBytes(forward);
  const auto after = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));

  const inference::ModelStatistics a = statistics("a", "1").model_stats(0);
  EXPECT_GE(a.last_inference(), before);
  EXPECT_LE(a.last_inference(), after);
  EXPECT_EQ(a.inference_count(), 8u);  // rows
  EXPECT_EQ(a.execution_count(), 4u);
  const inference::InferStatistics& s = a.inference_stats();
  for (const inference::StatisticDuration* d :
       {&s.success(), &s.queue(), &s.compute_input(), &s.compute_infer(), &s.compute_output()}) {
    EXPECT_EQ(d->count(), 4u);
  }
  EXPECT_GT(s.compute_infer().ns(), 0u);
  EXPECT_GE(s.success().ns(), s.compute_infer().ns());
  EXPECT_EQ(s.fail().count(), 0u);
  EXPECT_EQ(BatchSizes(a), "1x1 2x2 3x1");

  // The model's Forward counts for the model, not for the weight it runs.
  const inference::ModelStatistics m = statistics("m").model_stats(0);
  EXPECT_EQ(m.inference_count(), 2u);
  EXPECT_EQ(m.execution_count(), 1u);
  EXPECT_EQ(BatchSizes(m), "2x1");

  // Every model, by name; a model named as a weight stands for it (and has its own counts).
  CreateModel("b", "a");
  const inference::ModelStatisticsResponse all = statistics("");
  std::vector<std::string> names;
  for (const inference::ModelStatistics& e : all.model_stats()) names.push_back(e.name());
  EXPECT_EQ(absl::StrJoin(names, ","), "a,b,m");
  EXPECT_EQ(all.model_stats(0).inference_count(), 8u);
  EXPECT_EQ(all.model_stats(1).inference_count(), 0u);

  for (const auto& [name, version, code] :
       std::vector<std::tuple<std::string, std::string, grpc::StatusCode>>{
           {"nope", "", grpc::StatusCode::NOT_FOUND},
           {"a", "2", grpc::StatusCode::NOT_FOUND},
           {"", "2", grpc::StatusCode::NOT_FOUND},
           {"a b", "", grpc::StatusCode::INVALID_ARGUMENT}}) {
    inference::ModelStatisticsResponse response;
    const grpc::Status status =
        ByName(&inference::GRPCInferenceService::Stub::ModelStatistics, name, version, &response);
    EXPECT_EQ(status.error_code(), code)
        << name << " " << version << ": " << status.error_message();
    EXPECT_EQ(response.model_stats_size(), 0);
  }
}

// Every scheme, every input datatype (FP32 raw and typed, FP16, BF16), a few M: the
// float64 reference, and the very bytes qmm.v1's MatMul gives for the same input.
TEST_F(InferenceServiceTest, ModelInferOnWeightsMatchesTheReferenceAndMatMul) {
  struct Case {
    Scheme scheme;
    WeightShape shape;
  };
  const std::vector<Case> cases = {{Scheme::kFp16, {40, 64, 0}},   {Scheme::kBf16, {40, 64, 0}},
                                   {Scheme::kW8A16, {33, 128, 0}}, {Scheme::kW4A16, {48, 256, 128}},
                                   {Scheme::kW4A16, {24, 384, 0}}, {Scheme::kW2A8, {40, 256, 0}}};
  uint32_t seed = 10;
  for (const Case& c : cases) {
    const std::string name =
        absl::StrCat("w-", std::string(SchemeName(c.scheme)), "-", c.shape.group_size);
    const PackedWeight& w = Upload(name, c.scheme, c.shape, seed++);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (bool raw : {true, false}) {
        if (!raw && dtype != DType::kF32) continue;  // FP16 and BF16 are raw only
        for (int64_t m : {1, 5}) {
          const std::string what =
              absl::StrCat(name, " ", DatatypeOf(dtype), raw ? " raw" : " typed", " M=", m);
          // What the server sees: the values rounded to the input dtype.
          const std::vector<float> x =
              FromBytes(dtype, ToBytes(dtype, RandomFloats(m * c.shape.k, seed++)));
          ModelInferRequest request =
              MakeRequest(name, "x", DatatypeOf(dtype), {m, c.shape.k}, ToBytes(dtype, x));
          request.set_id(absl::StrCat("req-", seed));
          request.add_outputs()->set_name("y");
          if (!raw) {
            request.clear_raw_input_contents();
            for (float v : x) request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
          }
          ModelInferResponse response;
          const grpc::Status status = Infer(request, &response);
          ASSERT_TRUE(status.ok()) << what << ": " << status.error_message();
          EXPECT_EQ(response.model_name(), name);
          EXPECT_EQ(response.model_version(), "1");
          EXPECT_EQ(response.id(), request.id());
          ASSERT_EQ(response.outputs_size(), 1) << what;
          EXPECT_EQ(response.outputs(0).name(), "y");
          EXPECT_EQ(response.outputs(0).datatype(), DatatypeOf(dtype));
          ASSERT_EQ(response.outputs(0).shape_size(), 2);
          EXPECT_EQ(response.outputs(0).shape(0), m);
          EXPECT_EQ(response.outputs(0).shape(1), c.shape.n);
          ASSERT_EQ(response.raw_output_contents_size(), 1) << what;
          const std::string& y = response.raw_output_contents(0);
          SCOPED_TRACE(what);
          testing::ExpectMatchesReference(w, x, m, FromBytes(dtype, y), dtype);
          EXPECT_EQ(y, testing::MatMulBytes(*server_.stub, name, dtype, m, c.shape.k, x));
        }
      }
    }
  }
}

TEST_F(InferenceServiceTest, ModelInferRunsModelsAsForwardDoes) {
  Upload("w4", Scheme::kW4A16, {48, 256, 128}, 2);
  Upload("tok", Scheme::kBf16, {50, 256, 0}, 3);
  CreateModel("float-model", "w4");
  CreateModel("token-model", "w4", "tok");

  // Float input, FP16: the same bytes as Forward.
  const int64_t m = 3;
  const std::string x = ToBytes(DType::kF16, RandomFloats(m * 256, 20));
  ModelInferResponse response;
  grpc::Status status = Infer(MakeRequest("float-model", "x", "FP16", {m, 256}, x), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  v1::ForwardRequest forward;
  forward.set_model("float-model");
  forward.mutable_input()->set_dtype(v1::DTYPE_FP16);
  forward.mutable_input()->add_shape(m);
  forward.mutable_input()->add_shape(256);
  forward.mutable_input()->set_data(x);
  EXPECT_EQ(response.raw_output_contents(0), ForwardBytes(forward));
  EXPECT_EQ(response.outputs(0).datatype(), "FP16");

  // Token ids as INT32 and INT64, raw and typed: the same bytes as Forward's token_ids.
  const std::vector<int32_t> ids = {7, 0, 49, 12, 7};
  v1::ForwardRequest tokens;
  tokens.set_model("token-model");
  for (int32_t id : ids) tokens.add_token_ids(id);
  const std::string want = ForwardBytes(tokens);
  ASSERT_EQ(want.size(), ids.size() * 48 * sizeof(float));
  for (const std::string datatype : {"INT32", "INT64"}) {
    for (bool raw : {true, false}) {
      std::string bytes;
      for (int32_t id : ids) {
        const int64_t wide = id;
        if (datatype == "INT32") {
          bytes.append(reinterpret_cast<const char*>(&id), sizeof(id));
        } else {
          bytes.append(reinterpret_cast<const char*>(&wide), sizeof(wide));
        }
      }
      // [M] and, as Triton's clients send a batch of scalars, [M, 1].
      std::vector<int64_t> shape = {static_cast<int64_t>(ids.size())};
      if (raw) shape.push_back(1);
      ModelInferRequest request = MakeRequest("token-model", "token_ids", datatype, shape, bytes);
      if (!raw) {
        request.clear_raw_input_contents();
        inference::InferTensorContents* c = request.mutable_inputs(0)->mutable_contents();
        for (int32_t id : ids) {
          if (datatype == "INT32") {
            c->add_int_contents(id);
          } else {
            c->add_int64_contents(id);
          }
        }
      }
      status = Infer(request, &response);
      ASSERT_TRUE(status.ok()) << datatype << " raw=" << raw << ": " << status.error_message();
      EXPECT_EQ(response.outputs(0).datatype(), "FP32");
      EXPECT_EQ(response.raw_output_contents(0), want) << datatype << " raw=" << raw;
    }
  }
}

TEST_F(InferenceServiceTest, AModelHidesTheWeightOfItsName) {
  Upload("shared", Scheme::kW8A16, {32, 64, 0}, 4);
  Upload("head", Scheme::kW8A16, {8, 64, 0}, 5);
  CreateModel("shared", "head");
  const std::string x = ToBytes(DType::kF32, RandomFloats(64, 6));
  ModelInferResponse response;
  const grpc::Status status = Infer(MakeRequest("shared", "x", "FP32", {1, 64}, x), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.outputs(0).shape(1), 8);  // the model's head, not the weight's 32 rows
}

// Each malformed request fails with the code and a message naming what is wrong, and the
// server goes on serving.
TEST_F(InferenceServiceTest, BadRequestsNameTheField) {
  Upload("w", Scheme::kW8A16, {16, 64, 0}, 7);
  Upload("t", Scheme::kW2A8, {16, 128, 0}, 8);
  Upload("tok", Scheme::kFp16, {10, 64, 0}, 9);
  CreateModel("token-model", "w", "tok");
  const std::string x = ToBytes(DType::kF16, RandomFloats(2 * 64, 10));
  const ModelInferRequest good = MakeRequest("w", "x", "FP16", {2, 64}, x);
  struct Case {
    std::string what;
    std::function<void(ModelInferRequest&)> change;
    grpc::StatusCode code;
    std::string message;  // a part of the message
  };
  auto ids32 = [](std::vector<int32_t> ids) {
    return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  };
  const std::vector<Case> cases = {
      {"no model name", [](ModelInferRequest& r) { r.clear_model_name(); },
       grpc::StatusCode::INVALID_ARGUMENT, "model_name is empty"},
      {"bad characters", [](ModelInferRequest& r) { r.set_model_name("a b"); },
       grpc::StatusCode::INVALID_ARGUMENT, "model_name has a character outside"},
      {"unknown model", [](ModelInferRequest& r) { r.set_model_name("nope"); },
       grpc::StatusCode::NOT_FOUND, "no model or weight named \"nope\""},
      {"unknown version", [](ModelInferRequest& r) { r.set_model_version("7"); },
       grpc::StatusCode::NOT_FOUND, "has no version \"7\""},
      {"no inputs",
       [](ModelInferRequest& r) {
         r.clear_inputs();
         r.clear_raw_input_contents();
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "inputs has 0 tensors, but weight \"w\" takes exactly one"},
      {"two inputs",
       [](ModelInferRequest& r) {
         *r.add_inputs() = r.inputs(0);
         r.add_raw_input_contents(r.raw_input_contents(0));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs has 2 tensors"},
      {"two raw entries for one input",
       [](ModelInferRequest& r) { r.add_raw_input_contents(r.raw_input_contents(0)); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "raw_input_contents has 2 entries for one input; send one per input, or none"},
      {"input name", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_name("INPUT0"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "inputs[0].name = \"INPUT0\" is not an input of weight \"w\"; its input is \"x\""},
      {"datatype", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_datatype("INT8"); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].datatype = \"INT8\" is not one that"},
      {"long datatype",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->set_datatype(std::string(5000, 'Q')); },
       grpc::StatusCode::INVALID_ARGUMENT, "QQQQ...\" is not one that"},
      {"rank 1", [](ModelInferRequest& r) { r.mutable_inputs(0)->mutable_shape()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape = [2] has 1 dimensions"},
      {"M = 0", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(0, 0); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape[0] = 0 (M) must be in [1, 512]"},
      {"M over max_rows", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(0, 513); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape[0] = 513 (M) must be in [1, 512]"},
      {"K", [](ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(1, 63); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape[1] = 63, but weight \"w\" takes 64"},
      {"raw size", [](ModelInferRequest& r) { r.mutable_raw_input_contents(0)->pop_back(); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "raw_input_contents[0] is 255 bytes, but inputs[0] of shape [2, 64] and FP16 needs 256"},
      {"raw and typed",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); },
       grpc::StatusCode::INVALID_ARGUMENT, "holds values as well as raw_input_contents[0]"},
      {"FP16 typed", [](ModelInferRequest& r) { r.clear_raw_input_contents(); },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0] is FP16, which has no typed contents field"},
      {"FP32 typed count",
       [](ModelInferRequest& r) {
         r.clear_raw_input_contents();
         r.mutable_inputs(0)->set_datatype("FP32");
         for (int i = 0; i < 127; ++i)
           r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "inputs[0].contents holds 127 values, but shape [2, 64] has 128"},
      {"FP32 in the wrong field",
       [](ModelInferRequest& r) {
         r.clear_raw_input_contents();
         r.mutable_inputs(0)->set_datatype("FP32");
         for (int i = 0; i < 128; ++i) r.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "a field other than the one of FP32"},
      {"requested output", [](ModelInferRequest& r) { r.add_outputs()->set_name("OUTPUT0"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "outputs[0].name = \"OUTPUT0\" is not an output of weight \"w\"; its output is \"y\""},
      {"W2A8 needs finite input",
       [](ModelInferRequest& r) {
         std::string x = ToBytes(DType::kF16, RandomFloats(2 * 128, 11));
         const uint16_t inf = 0x7c00;
         std::memcpy(x.data() + 2 * 135, &inf, 2);
         r = MakeRequest("t", "x", "FP16", {2, 128}, x);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "input[1][7] is NaN or infinite"},
      {"token model takes token_ids", [](ModelInferRequest& r) { r.set_model_name("token-model"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "inputs[0].name = \"x\" is not an input of model \"token-model\"; its input is "
       "\"token_ids\""},
      {"token ids of rank 2",
       [&](ModelInferRequest& r) {
         r = MakeRequest("token-model", "token_ids", "INT32", {1, 2}, ids32({1, 2}));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape = [1, 2] is not [M] or [M, 1]"},
      {"token id out of range",
       [&](ModelInferRequest& r) {
         r = MakeRequest("token-model", "token_ids", "INT32", {3}, ids32({1, 10, 2}));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids[1] = 10 is outside the vocabulary [0, 10)"},
      {"token id beyond int32",
       [&](ModelInferRequest& r) {
         r = MakeRequest("token-model", "token_ids", "INT64", {1}, "");
         r.clear_raw_input_contents();
         r.mutable_inputs(0)->mutable_contents()->add_int64_contents(int64_t{1} << 40);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "token_ids[0] = 1099511627776 is outside the vocabulary"},
      {"token ids as floats",
       [&](ModelInferRequest& r) {
         r = MakeRequest("token-model", "token_ids", "FP32", {1}, std::string(4, '\0'));
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "is not one that model \"token-model\" takes (INT32, INT64)"},
      {"negative timeout",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["timeout"].set_int64_param(-1); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "parameters[\"timeout\"] = -1 must be at least 0 (microseconds; 0: no limit)"},
      {"timeout of another type",
       [](ModelInferRequest& r) { (*r.mutable_parameters())["timeout"].set_string_param("1s"); },
       grpc::StatusCode::INVALID_ARGUMENT, "parameters[\"timeout\"] must be an int64_param"},
  };
  for (const Case& c : cases) {
    ModelInferRequest request = good;
    c.change(request);
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.what << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message), std::string::npos)
        << c.what << ": " << status.error_message();
  }
  ModelInferResponse response;
  grpc::Status status = Infer(good, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ModelInferRequest untimed = good;  // 0: no limit
  (*untimed.mutable_parameters())["timeout"].set_int64_param(0);
  status = Infer(untimed, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(InferenceServiceTest, OutputsOverTheMessageLimitAreResourceExhausted) {
  Upload("wide", Scheme::kW8A16, {65536, 64, 0}, 11);
  // 512 rows of 65536 fp32 outputs: 128 MiB, over the 64 MiB default message limit.
  const std::string x = ToBytes(DType::kF32, RandomFloats(kMaxRows * 64, 12));
  ModelInferResponse response;
  const grpc::Status status = Infer(MakeRequest("wide", "x", "FP32", {kMaxRows, 64}, x), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("max_message_bytes"), std::string::npos);
}

TEST_F(InferenceServiceTest, StreamAnswersInOrderWithErrorsInTheStream) {
  const PackedWeight& w = Upload("w", Scheme::kW4A16, {48, 256, 128}, 13);
  grpc::ClientContext context;
  auto stream = infer_->ModelStreamInfer(&context);
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 5; ++i) {
    const int64_t m = 1 + i;
    xs.push_back(FromBytes(DType::kF16, ToBytes(DType::kF16, RandomFloats(m * 256, 30 + i))));
    ModelInferRequest request =
        MakeRequest(i == 2 ? "nope" : "w", "x", "FP16", {m, 256}, ToBytes(DType::kF16, xs[i]));
    request.set_id(absl::StrCat("id-", i));
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream->Read(&response)) << i;
    EXPECT_EQ(response.infer_response().id(), absl::StrCat("id-", i));
    if (i == 2) {
      EXPECT_EQ(response.error_message(),
                "NOT_FOUND: no model or weight named \"nope\" on this server");
      EXPECT_EQ(response.infer_response().raw_output_contents_size(), 0);
      continue;
    }
    EXPECT_EQ(response.error_message(), "");
    ASSERT_EQ(response.infer_response().raw_output_contents_size(), 1);
    SCOPED_TRACE(i);
    testing::ExpectMatchesReference(
        w, xs[i], 1 + i, FromBytes(DType::kF16, response.infer_response().raw_output_contents(0)),
        DType::kF16);
  }
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// A server of one batch worker whose launches the test can hold (GatedBackend), with
// qmm.v1 and Open Inference Protocol stubs.
class InferenceBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{64} << 20;
    int port = 0;
    server_ = testing::StartGatedServer(options, &port, &gate_, /*workers=*/1);
    ASSERT_NE(server_, nullptr);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    qmm_ = v1::Qmm::NewStub(channel);
    infer_ = inference::GRPCInferenceService::NewStub(channel);
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    gate_->Open();  // a failed test may leave a launch held
    server_->Shutdown();
  }

  // Waits until `count` requests wait behind the held launch; the count then.
  int64_t WaitForWaiting(int64_t count) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (server_->batcher().stats().waiting_requests < count && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return server_->batcher().stats().waiting_requests;
  }

  inference::ModelStatistics Statistics(const std::string& name) {
    grpc::ClientContext context;
    inference::ModelStatisticsRequest request;
    request.set_name(name);
    inference::ModelStatisticsResponse response;
    const grpc::Status status = infer_->ModelStatistics(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.model_stats_size(), 1);
    return response.model_stats_size() == 1 ? response.model_stats(0)
                                            : inference::ModelStatistics();
  }

  testing::GatedBackend* gate_ = nullptr;
  std::unique_ptr<QmmServer> server_;
  std::unique_ptr<v1::Qmm::Stub> qmm_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer_;
  testing::ReferenceWeights weights_;
};

// ModelInfer joins the weight's batching queue with MatMul: requests of both that wait
// behind a running launch go together in the next one, each with its own rows.
TEST_F(InferenceBatchingTest, ModelInferAndMatMulShareALaunch) {
  const WeightShape shape{40, 128, 128};
  const PackedWeight& w = weights_.Upload(*qmm_, "w", Scheme::kW4A16, shape, 40);

  gate_->Close();
  constexpr int kCallers = 6;
  std::vector<std::vector<float>> x(kCallers);
  std::vector<std::string> y(kCallers);
  std::vector<grpc::Status> status(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    x[c] = RandomFloats(2 * shape.k, 50 + c);
    if (c == 1) {
      ASSERT_TRUE(gate_->WaitForCalls(1));  // the first launch is held
    }
    callers.emplace_back([&, c] {
      grpc::ClientContext context;
      if (c % 2 == 0) {
        ModelInferResponse response;
        status[c] = infer_->ModelInfer(
            &context, MakeRequest("w", "x", "FP32", {2, shape.k}, ToBytes(DType::kF32, x[c])),
            &response);
        if (status[c].ok()) y[c] = response.raw_output_contents(0);
      } else {
        v1::MatMulResponse response;
        status[c] = qmm_->MatMul(
            &context,
            testing::MakeMatMulRequest("w", DType::kF32, 2, shape.k, x[c], v1::DTYPE_UNSPECIFIED),
            &response);
        if (status[c].ok()) y[c] = response.output().data();
      }
    });
  }
  // Every caller but the first waits behind the held launch.
  EXPECT_EQ(WaitForWaiting(kCallers - 1), kCallers - 1);
  gate_->Open();
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_TRUE(status[c].ok()) << c << ": " << status[c].error_message();
    SCOPED_TRACE(c);
    testing::ExpectMatchesReference(w, x[c], 2, FromBytes(DType::kF32, y[c]), DType::kF32);
  }
  const BatchStats stats = server_->batcher().stats();
  EXPECT_EQ(stats.launches, 2);
  EXPECT_EQ(stats.max_requests_per_launch, kCallers - 1);

  // The statistics: two launches, of 2 and 10 rows; each request counts its launch's times.
  const inference::ModelStatistics w_stats = Statistics("w");
  EXPECT_EQ(w_stats.execution_count(), 2u);
  EXPECT_EQ(w_stats.inference_count(), 2u * kCallers);
  EXPECT_EQ(w_stats.inference_stats().success().count(), static_cast<uint64_t>(kCallers));
  EXPECT_EQ(w_stats.inference_stats().compute_infer().count(), static_cast<uint64_t>(kCallers));
  ASSERT_EQ(w_stats.batch_stats_size(), 2);
  EXPECT_EQ(w_stats.batch_stats(0).batch_size(), 2u);
  EXPECT_EQ(w_stats.batch_stats(1).batch_size(), 2u * (kCallers - 1));
  EXPECT_EQ(w_stats.batch_stats(1).compute_infer().count(), 1u);
}

// Triton's "timeout" parameter: a request still queued when its timeout passes never
// launches; one whose timeout is ample runs, in the same launch as the others.
TEST_F(InferenceBatchingTest, ATimeoutParameterDropsARequestStillQueued) {
  const WeightShape shape{24, 64, 0};
  const PackedWeight& w = weights_.Upload(*qmm_, "w", Scheme::kW8A16, shape, 60);

  // timeout in microseconds; -1: none sent.
  const std::vector<int64_t> timeouts = {-1, 20'000, 60'000'000};
  std::vector<std::vector<float>> x(timeouts.size());
  std::vector<grpc::Status> status(timeouts.size());
  std::vector<std::string> y(timeouts.size());
  std::vector<std::thread> callers;
  gate_->Close();
  for (size_t c = 0; c < timeouts.size(); ++c) {
    x[c] = RandomFloats(shape.k, 61 + static_cast<uint32_t>(c));
    if (c == 1) {
      ASSERT_TRUE(gate_->WaitForCalls(1));  // the first launch is held
    }
    callers.emplace_back([&, c] {
      ModelInferRequest request =
          MakeRequest("w", "x", "FP32", {1, shape.k}, ToBytes(DType::kF32, x[c]));
      if (timeouts[c] >= 0) (*request.mutable_parameters())["timeout"].set_int64_param(timeouts[c]);
      grpc::ClientContext context;
      ModelInferResponse response;
      status[c] = infer_->ModelInfer(&context, request, &response);
      if (status[c].ok()) y[c] = response.raw_output_contents(0);
    });
  }
  ASSERT_EQ(WaitForWaiting(2), 2);
  absl::SleepFor(absl::Milliseconds(100));  // past the 20 ms timeout
  gate_->Open();
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(status[1].error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << status[1].error_message();
  for (size_t c : {size_t{0}, size_t{2}}) {
    ASSERT_TRUE(status[c].ok()) << c << ": " << status[c].error_message();
    SCOPED_TRACE(c);
    testing::ExpectMatchesReference(w, x[c], 1, FromBytes(DType::kF32, y[c]), DType::kF32);
  }
  const BatchStats stats = server_->batcher().stats();
  EXPECT_EQ(stats.dropped_deadline, 1);
  EXPECT_EQ(stats.launches, 2);

  // The dropped request is a failure after its 100 ms queued; the others waited as long
  // (the first in its held launch, the last queued behind it).
  const inference::ModelStatistics w_stats = Statistics("w");
  const inference::InferStatistics& s = w_stats.inference_stats();
  EXPECT_EQ(s.fail().count(), 1u);
  EXPECT_GE(s.fail().ns(), 100'000'000u);
  EXPECT_EQ(s.success().count(), 2u);
  EXPECT_GE(s.success().ns(), 200'000'000u);
  EXPECT_EQ(s.queue().count(), 2u);
  EXPECT_GE(s.queue().ns(), 100'000'000u);
  EXPECT_EQ(w_stats.execution_count(), 2u);
  ASSERT_EQ(w_stats.batch_stats_size(), 1);
  EXPECT_EQ(w_stats.batch_stats(0).batch_size(), 1u);
  EXPECT_EQ(w_stats.batch_stats(0).compute_infer().count(), 2u);
}

}  // namespace
}  // namespace qmm
