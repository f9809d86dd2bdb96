// The Open Inference Protocol's HTTP/REST endpoint (server/inference_http.h) of an
// in-process server (CPU backend): health, metadata and readiness, inference with JSON and
// with binary data giving the very bytes of qmm.v1's MatMul and Forward (which the
// service tests hold to the float64 reference), the model config and statistics, the HTTP
// statuses of failures, the body limit, and the options that refuse the endpoint.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"
#include "server/cpu_backend.h"
#include "tests/server/http_get.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using nlohmann::json;
using testing::FromBytes;
using testing::HttpGet;
using testing::HttpRequest;
using testing::HttpResponse;
using testing::RandomFloats;
using testing::ToBytes;

class InferenceHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{64} << 20;
    options.max_message_bytes = int64_t{4} << 20;
    options.http_listen = "127.0.0.1:0";
    server_ = testing::StartTestServer(options);
    ASSERT_NE(server_.stub, nullptr);
    port_ = server_.server->http_port();
    ASSERT_GT(port_, 0);
  }

  void Upload(const std::string& name, Scheme scheme, WeightShape shape, uint32_t seed) {
    weights_.Upload(*server_.stub, name, scheme, shape, seed);
  }

  HttpResponse Get(const std::string& target) {
    absl::StatusOr<HttpResponse> r = HttpGet(port_, target);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(HttpResponse{});
  }

  HttpResponse Post(const std::string& target, const std::string& body,
                    const std::string& headers = "") {
    absl::StatusOr<HttpResponse> r = HttpRequest(port_, "POST", target, body, headers);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(HttpResponse{});
  }

  testing::TestServer server_;
  testing::ReferenceWeights weights_;
  int port_ = 0;
};

TEST_F(InferenceHttpTest, HealthMetadataAndReadiness) {
  Upload("w", Scheme::kW8A16, {16, 64, 0}, 1);
  HttpResponse r = Get("/v2/health/live");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"live": true})"));
  r = Get("/v2/health/ready");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"ready": true})"));
  r = Get("/v2");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["name"], "qmm");
  r = Get("/v2/models/w");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"name": "w", "versions": ["1"],
      "platform": "qmm_w8a16", "inputs": [{"name": "x", "datatype": "FP16", "shape": [-1, 64]}],
      "outputs": [{"name": "y", "datatype": "FP16", "shape": [-1, 16]}]})"));
  EXPECT_EQ(Get("/v2/models/w/versions/1").status, 200);
  EXPECT_EQ(Get("/v2/models/w/ready").status, 200);
  EXPECT_EQ(Get("/v2/models/w/versions/1/ready").status, 200);
  r = Get("/v2/models/w/versions/2/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"ready": false})"));
  EXPECT_EQ(Get("/v2/models/nope/ready").status, 503);
  r = Get("/v2/models/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"], "no model or weight named \"nope\" on this server");
  r = Get("/v2/models/a%20b");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find("character outside"),
            std::string::npos);
  EXPECT_EQ(Get("/v2/repository/index").status, 404);
  EXPECT_EQ(Post("/v2/health/ready", "{}").status, 405);
  r = Get("/v2/models/w/infer");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(json::parse(r.body)["error"], "/v2/models/w/infer takes POST only");
  EXPECT_EQ(Post("/v2/models/w", "{}").status, 405);

  server_.server->SetServing(false);
  EXPECT_EQ(Get("/v2/health/ready").status, 503);
  EXPECT_EQ(Get("/v2/models/w/ready").status, 503);
  EXPECT_EQ(Get("/v2/health/live").status, 200);
  server_.server->SetServing(true);
}

// Triton's JSON of the config and of the statistics: proto field names, enums by name,
// plain numbers (Triton's clients read int64s as numbers, not the proto JSON's strings).
TEST_F(InferenceHttpTest, ConfigAndStatistics) {
  Upload("w", Scheme::kW8A16, {16, 64, 0}, 1);
  HttpResponse r = Get("/v2/models/w/config");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"name": "w", "platform": "qmm_w8a16",
      "backend": "qmm", "max_batch_size": 65536,
      "input": [{"name": "x", "data_type": "TYPE_FP16", "dims": [64]}],
      "output": [{"name": "y", "data_type": "TYPE_FP16", "dims": [16]}],
      "instance_group": [{"name": "w_0", "kind": "KIND_CPU", "count": 2}],
      "dynamic_batching": {"preferred_batch_size": [64], "max_queue_delay_microseconds": 0}})"))
      << r.body;
  EXPECT_EQ(Get("/v2/models/w/versions/1/config").status, 200);
  EXPECT_EQ(Get("/v2/models/w/versions/2/config").status, 404);
  EXPECT_EQ(Get("/v2/models/nope/config").status, 404);
  EXPECT_EQ(Post("/v2/models/w/config", "{}").status, 405);

  const std::vector<float> x = RandomFloats(2 * 64, 3);
  testing::MatMulBytes(*server_.stub, "w", DType::kF32, 2, 64, x);
  r = Get("/v2/models/w/stats");
  EXPECT_EQ(r.status, 200);
  const json stats = json::parse(r.body);
  ASSERT_EQ(stats["model_stats"].size(), 1u) << r.body;
  const json& w = stats["model_stats"][0];
  EXPECT_EQ(w["name"], "w");
  EXPECT_EQ(w["version"], "1");
  EXPECT_TRUE(w["last_inference"].is_number_unsigned()) << r.body;
  EXPECT_GT(w["last_inference"].get<uint64_t>(), 0u);
  EXPECT_EQ(w["inference_count"], 2);
  EXPECT_EQ(w["execution_count"], 1);
  EXPECT_EQ(w["inference_stats"]["success"]["count"], 1);
  EXPECT_TRUE(w["inference_stats"]["compute_infer"]["ns"].is_number_unsigned());
  EXPECT_EQ(w["inference_stats"]["fail"], json::parse(R"({"count": 0, "ns": 0})"));
  ASSERT_EQ(w["batch_stats"].size(), 1u);
  EXPECT_EQ(w["batch_stats"][0]["batch_size"], 2);
  EXPECT_EQ(w["batch_stats"][0]["compute_infer"]["count"], 1);

  Upload("v", Scheme::kW8A16, {16, 64, 0}, 2);
  r = Get("/v2/models/stats");
  EXPECT_EQ(r.status, 200);
  const json all = json::parse(r.body);
  ASSERT_EQ(all["model_stats"].size(), 2u) << r.body;
  EXPECT_EQ(all["model_stats"][0]["name"], "v");
  EXPECT_EQ(all["model_stats"][1]["name"], "w");
  EXPECT_EQ(Get("/v2/models/v/versions/1/stats").status, 200);
  EXPECT_EQ(Get("/v2/models/v/versions/2/stats").status, 404);
  EXPECT_EQ(Get("/v2/models/nope/stats").status, 404);
  EXPECT_EQ(Post("/v2/models/stats", "{}").status, 405);
}

TEST_F(InferenceHttpTest, InferWithJsonGivesMatMulsValues) {
  Upload("w4", Scheme::kW4A16, {24, 128, 128}, 2);
  const int64_t m = 3;
  const std::vector<float> x = RandomFloats(m * 128, 3);
  json data = json::array();
  for (int64_t i = 0; i < m; ++i) {
    data.push_back(std::vector<float>(x.begin() + i * 128, x.begin() + (i + 1) * 128));
  }
  const json request = {
      {"id", "r-1"},
      {"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {m, 128}}, {"data", data}}}}};
  const HttpResponse r = Post("/v2/models/w4/infer", request.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["model_name"], "w4");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "r-1");
  EXPECT_EQ(j["outputs"][0]["name"], "y");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], json({m, 24}));
  const std::vector<float> want =
      FromBytes(DType::kF32, testing::MatMulBytes(*server_.stub, "w4", DType::kF32, m, 128, x));
  const json& got = j["outputs"][0]["data"];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(static_cast<float>(got[i].get<double>()), want[i]) << i;  // shortest round trip
  }
}

TEST_F(InferenceHttpTest, InferWithBinaryDataBothWays) {
  Upload("w8", Scheme::kW8A16, {40, 64, 0}, 4);
  const int64_t m = 2;
  const std::vector<float> x =
      FromBytes(DType::kF16, ToBytes(DType::kF16, RandomFloats(m * 64, 5)));
  const std::string raw = ToBytes(DType::kF16, x);
  const std::string header =
      json({{"inputs",
             {{{"name", "x"},
               {"datatype", "FP16"},
               {"shape", {m, 64}},
               {"parameters", {{"binary_data_size", raw.size()}}}}}},
            {"outputs", {{{"name", "y"}, {"parameters", {{"binary_data", true}}}}}}})
          .dump();
  const HttpResponse r =
      Post("/v2/models/w8/versions/1/infer", header + raw,
           absl::StrCat("Inference-Header-Content-Length: ", header.size(), "\r\n"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string marker = "Inference-Header-Content-Length: ";
  const size_t at = r.headers.find(marker);
  ASSERT_NE(at, std::string::npos) << r.headers;
  const size_t json_length = std::stoul(r.headers.substr(at + marker.size()));
  ASSERT_LE(json_length, r.body.size());
  const json j = json::parse(r.body.substr(0, json_length));
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP16");
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], m * 40 * 2);
  EXPECT_EQ(r.body.substr(json_length),
            testing::MatMulBytes(*server_.stub, "w8", DType::kF16, m, 64, x));
}

TEST_F(InferenceHttpTest, TokenModelsTakeIntegerIds) {
  Upload("tok", Scheme::kFp16, {10, 64, 0}, 6);
  Upload("head", Scheme::kW8A16, {8, 64, 0}, 7);
  v1::CreateModelRequest create;
  create.set_name("lm");
  create.add_layers()->mutable_embedding()->set_weight("tok");
  create.add_layers()->mutable_linear()->set_weight("head");
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(server_.stub->CreateModel(&context, create, &info).ok());

  const HttpResponse r = Post("/v2/models/lm/infer", R"({"inputs": [{"name": "token_ids",
      "datatype": "INT64", "shape": [3], "data": [9, 0, 4]}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  v1::ForwardRequest forward;
  forward.set_model("lm");
  for (int id : {9, 0, 4}) forward.add_token_ids(id);
  grpc::ClientContext fc;
  v1::ForwardResponse want;
  ASSERT_TRUE(server_.stub->Forward(&fc, forward, &want).ok());
  const std::vector<float> values = FromBytes(DType::kF32, want.output().data());
  const json j = json::parse(r.body);
  const json& got = j["outputs"][0]["data"];
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(static_cast<float>(got[i].get<double>()), values[i]) << i;
  }
}

TEST_F(InferenceHttpTest, FailuresAnswerTheirHttpStatus) {
  Upload("w", Scheme::kW8A16, {16, 64, 0}, 8);
  struct Case {
    std::string target;
    std::string body;
    int status;
    std::string message;
  };
  const std::string good_input = R"({"name": "x", "datatype": "FP32", "shape": [1, 64], "data": )" +
                                 json(std::vector<float>(64, 0.5f)).dump() + "}";
  const std::vector<Case> cases = {
      {"/v2/models/nope/infer", R"({"inputs": [)" + good_input + "]}", 404,
       "no model or weight named \"nope\""},
      {"/v2/models/w/versions/3/infer", R"({"inputs": [)" + good_input + "]}", 404,
       "has no version \"3\""},
      {"/v2/models/w/infer", "{", 400, "the request body is not a JSON object"},
      {"/v2/models/w/infer", R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 63],
          "data": [1]}]})",
       400, "inputs[0].data holds 1 values, but shape [1,63] has 63"},
      {"/v2/models/w/infer", R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
          "data": [1, 2]}]})",
       400, "inputs[0].shape[1] = 2, but weight \"w\" takes 64 features"},
      {"/v2/models/w/infer", R"({"inputs": [)" + good_input + R"(], "outputs": [{"name": "z"}]})",
       400, "outputs[0].name = \"z\" is not an output"},
      {"/v2/models/w/infer",
       R"({"inputs": [)" + good_input + R"(], "parameters": {"timeout": -5}})", 400,
       "parameters[\"timeout\"] = -5 must be at least 0"},
      {"/v2/models/w/infer",
       R"({"inputs": [)" + good_input + R"(], "parameters": {"timeout": 0.5}})", 400,
       "request.parameters.timeout is not an integer"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = Post(c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.target << " " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_NE(j["error"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  // Over max_message_bytes (4 MiB): refused before it is parsed.
  const HttpResponse big = Post("/v2/models/w/infer", std::string(5 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  // The server still serves, with a timeout it meets too.
  EXPECT_EQ(Post("/v2/models/w/infer", R"({"inputs": [)" + good_input + "]}").status, 200);
  EXPECT_EQ(Post("/v2/models/w/infer",
                 R"({"inputs": [)" + good_input + R"(], "parameters": {"timeout": 60000000}})")
                .status,
            200);
}

TEST_F(InferenceHttpTest, ATakenPortIsUnavailable) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.http_listen = absl::StrCat("127.0.0.1:", port_);
  BackendOptions backend;
  backend.kind = BackendOptions::Kind::kCpu;
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend(backend);
  ASSERT_TRUE(cpu.ok());
  QmmServer second(*std::move(cpu), options);
  const absl::StatusOr<int> port = second.Start();
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable) << port.status();
  // The first still serves.
  EXPECT_EQ(Get("/v2/health/live").status, 200);
}

TEST(InferenceHttpOptionsTest, PlainHttpIsRefusedBesideTlsAndBadAddressesAreInvalid) {
  BackendOptions backend;
  backend.kind = BackendOptions::Kind::kCpu;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls.cert_file = "/nonexistent.pem";
  options.tls.key_file = "/nonexistent.key";
  options.http_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend(backend);
  ASSERT_TRUE(cpu.ok());
  QmmServer tls(*std::move(cpu), options);
  absl::StatusOr<int> port = tls.Start();
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(port.status().message().find("http_listen"), std::string::npos);

  options.tls = {};
  options.http_listen = "127.0.0.1:8000,8443s";
  cpu = CreateBackend(backend);
  ASSERT_TRUE(cpu.ok());
  QmmServer bad(*std::move(cpu), options);
  port = bad.Start();
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(port.status().message().find("HTTP address"), std::string::npos) << port.status();
}

}  // namespace
}  // namespace qmm
