// The Open Inference Protocol's REST bodies (server/inference_json.h): JSON data of every
// datatype into raw little-endian bytes (nested or flat), Triton's binary data extension
// both ways, responses as JSON arrays that read back as the same values, and every
// malformed body refused with the field it names.
#include "server/inference_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

using nlohmann::json;

template <typename T>
std::vector<T> Values(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

TEST(InferenceJsonTest, JsonDataBecomesRawBytesOfEveryDatatype) {
  const std::string body = R"({
    "id": "req-7",
    "parameters": {"priority": 3},
    "inputs": [
      {"name": "a", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, -2], [0.1, 3e38]]},
      {"name": "b", "datatype": "FP16", "shape": [3], "data": [1.0, 0.333333, 70000]},
      {"name": "c", "datatype": "BF16", "shape": [2], "data": [1.0, -0.1]},
      {"name": "d", "datatype": "INT32", "shape": [1, 3], "data": [0, -7, 2147483647]},
      {"name": "e", "datatype": "INT64", "shape": [2], "data": [9007199254740993, -1]}
    ],
    "outputs": [{"name": "y"}]
  })";
  absl::StatusOr<HttpInferRequest> parsed = ParseInferRequest(body, std::nullopt, "m", "1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const inference::ModelInferRequest& r = parsed->request;
  EXPECT_FALSE(parsed->binary_output);
  EXPECT_EQ(r.model_name(), "m");
  EXPECT_EQ(r.model_version(), "1");
  EXPECT_EQ(r.id(), "req-7");
  ASSERT_EQ(r.inputs_size(), 5);
  ASSERT_EQ(r.raw_input_contents_size(), 5);
  EXPECT_EQ(r.inputs(0).name(), "a");
  EXPECT_EQ(r.inputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(r.inputs(0).shape().begin(), r.inputs(0).shape().end()),
            (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<float>(r.raw_input_contents(0)), (std::vector<float>{1.5f, -2.0f, 0.1f, 3e38f}));
  EXPECT_EQ(Values<uint16_t>(r.raw_input_contents(1)),
            (std::vector<uint16_t>{FloatToHalf(1.0f), FloatToHalf(0.333333f), 0x7c00}));
  EXPECT_EQ(Values<uint16_t>(r.raw_input_contents(2)),
            (std::vector<uint16_t>{FloatToBf16(1.0f), FloatToBf16(-0.1f)}));
  EXPECT_EQ(Values<int32_t>(r.raw_input_contents(3)), (std::vector<int32_t>{0, -7, 2147483647}));
  // Exactly, past 2^53: integers are not read through a double.
  EXPECT_EQ(Values<int64_t>(r.raw_input_contents(4)), (std::vector<int64_t>{9007199254740993, -1}));
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "y");
}

TEST(InferenceJsonTest, BinaryInputsFollowTheJsonInOrder) {
  const std::string header = R"({"inputs": [
      {"name": "a", "datatype": "FP16", "shape": [1, 2], "parameters": {"binary_data_size": 4}},
      {"name": "b", "datatype": "INT32", "shape": [1], "data": [5]},
      {"name": "c", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}],
    "parameters": {"binary_data_output": true}})";
  const std::string binary =
      std::string("\x01\x02\x03\x04", 4) + std::string("\x05\x06\x07\x08", 4);
  absl::StatusOr<HttpInferRequest> parsed =
      ParseInferRequest(header + binary, static_cast<int64_t>(header.size()), "m", "");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->binary_output);
  const inference::ModelInferRequest& r = parsed->request;
  ASSERT_EQ(r.raw_input_contents_size(), 3);
  EXPECT_EQ(r.raw_input_contents(0), binary.substr(0, 4));
  EXPECT_EQ(Values<int32_t>(r.raw_input_contents(1)), std::vector<int32_t>{5});
  EXPECT_EQ(r.raw_input_contents(2), binary.substr(4, 4));

  EXPECT_FALSE(r.parameters().contains("timeout"));

  // An output's binary_data asks for binary output too.
  parsed = ParseInferRequest(
      R"({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": true}}]})",
      std::nullopt, "m", "");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->binary_output);
}

// Triton's request-level "timeout" (microseconds) becomes the gRPC request's int64
// parameter, whatever its value: InferTimeout judges it on both transports.
TEST(InferenceJsonTest, TheTimeoutParameterIsCopiedAsAnInt64) {
  for (const int64_t us : {int64_t{0}, int64_t{250}, int64_t{-3}, int64_t{9223372036854775807}}) {
    absl::StatusOr<HttpInferRequest> parsed =
        ParseInferRequest(absl::StrCat(R"({"inputs": [], "parameters": {"timeout": )", us, "}}"),
                          std::nullopt, "m", "");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const auto& parameters = parsed->request.parameters();
    ASSERT_TRUE(parameters.contains("timeout")) << us;
    EXPECT_EQ(parameters.at("timeout").int64_param(), us);
  }
}

TEST(InferenceJsonTest, MalformedBodiesNameTheField) {
  struct Case {
    std::string body;
    std::optional<int64_t> json_length;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not json", std::nullopt, "the request body is not a JSON object"},
      {"[1, 2]", std::nullopt, "the request body is not a JSON object"},
      {R"({"id": 7, "inputs": []})", std::nullopt, "id is not a string"},
      {R"({})", std::nullopt, "inputs is missing or not an array"},
      {R"({"inputs": [7]})", std::nullopt, "inputs[0] is not an object"},
      {R"({"inputs": [{"name": 1, "datatype": "FP32", "shape": [1], "data": [1]}]})", std::nullopt,
       "inputs[0].name is not a string"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})", std::nullopt,
       "inputs[0].shape is missing or not an array"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1.5], "data": [1]}]})",
       std::nullopt, "inputs[0].shape holds something other than an integer"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]})", std::nullopt,
       "inputs[0] has neither data nor parameters.binary_data_size"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}]})",
       std::nullopt, "inputs[0].data holds 1 values, but shape [2] has 2"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, "2"]}]})",
       std::nullopt, "inputs[0].data[1] is not a number"},
      {R"({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1.5]}]})",
       std::nullopt, "inputs[0].data[0] is not an INT32"},
      {R"({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [4294967296]}]})",
       std::nullopt, "inputs[0].data[0] = 4294967296 is not an INT32"},
      {R"({"inputs": [{"name": "x", "datatype": "INT64", "shape": [1],
           "data": [18446744073709551615]}]})",
       std::nullopt, "inputs[0].data[0] is not an INT64"},
      {R"({"inputs": [{"name": "x", "datatype": "UINT8", "shape": [1], "data": [1]}]})",
       std::nullopt, "inputs[0].datatype \"UINT8\" cannot come as JSON data here"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
           "data": [[[[[[[[[[1]]]]]]]]]]}]})",
       std::nullopt, "inputs[0].data nests arrays deeper than 8"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1],
           "parameters": {"binary_data_size": 4}}]})",
       std::nullopt, "inputs[0] has both data and parameters.binary_data_size"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
           "parameters": {"binary_data_size": -4}}]})",
       std::nullopt, "binary_data_size is not a non-negative integer"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
           "parameters": {"binary_data_size": 8}}]})",
       std::nullopt, "binary_data_size = 8 runs past the binary data (0 bytes left)"},
      {R"({"inputs": [], "parameters": 3})", std::nullopt, "request.parameters is not an object"},
      {R"({"inputs": [], "parameters": {"binary_data_output": 1}})", std::nullopt,
       "request.parameters.binary_data_output is not a boolean"},
      {R"({"inputs": [], "parameters": {"timeout": 1.5}})", std::nullopt,
       "request.parameters.timeout is not an integer (microseconds)"},
      {R"({"inputs": [], "parameters": {"timeout": "5"}})", std::nullopt,
       "request.parameters.timeout is not an integer"},
      {R"({"inputs": [], "parameters": {"timeout": 9223372036854775808}})", std::nullopt,
       "request.parameters.timeout is not an integer"},
      {R"({"inputs": [], "outputs": {}})", std::nullopt, "outputs is not an array"},
      {R"({"inputs": [], "outputs": [{"name": 3}]})", std::nullopt,
       "outputs[0].name is not a string"},
      {R"({"inputs": []}xyz)", 14, "3 bytes of binary data follow the JSON"},
      {R"({"inputs": []})", 99, "Inference-Header-Content-Length = 99 is outside the body's 14"},
      {R"({"inputs": []})", -1, "Inference-Header-Content-Length = -1 is outside"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<HttpInferRequest> parsed = ParseInferRequest(c.body, c.json_length, "m", "");
    ASSERT_FALSE(parsed.ok()) << c.body;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << c.body << ": " << parsed.status().message();
  }
}

inference::ModelInferResponse MakeResponse(const std::string& datatype, const std::string& bytes,
                                           int64_t rows, int64_t cols) {
  inference::ModelInferResponse r;
  r.set_model_name("m");
  r.set_model_version("1");
  r.set_id("q\"1");
  inference::ModelInferResponse::InferOutputTensor* t = r.add_outputs();
  t->set_name("y");
  t->set_datatype(datatype);
  t->add_shape(rows);
  t->add_shape(cols);
  r.add_raw_output_contents(bytes);
  return r;
}

TEST(InferenceJsonTest, JsonOutputsReadBackAsTheSameValues) {
  const std::vector<float> values = {1.0f, -0.1f, 3.4028235e38f, 1e-45f, 0.0f, -2.5f};
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  int64_t json_length = -1;
  const std::string body =
      FormatInferResponse(MakeResponse("FP32", bytes, 2, 3), /*binary=*/false, &json_length);
  EXPECT_EQ(json_length, -1);
  const json j = json::parse(body);
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "q\"1");
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["name"], "y");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], json({2, 3}));
  ASSERT_EQ(j["outputs"][0]["data"].size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(static_cast<float>(j["outputs"][0]["data"][i].get<double>()), values[i]) << i;
  }

  // fp16 and bf16 as their float values; NaN and the infinities as null.
  const std::vector<uint16_t> halves = {FloatToHalf(0.5f), 0x7c00, 0x7e00, FloatToHalf(-3.0f)};
  std::string half_bytes(halves.size() * 2, '\0');
  std::memcpy(half_bytes.data(), halves.data(), half_bytes.size());
  const json h =
      json::parse(FormatInferResponse(MakeResponse("FP16", half_bytes, 1, 4), false, &json_length));
  EXPECT_EQ(h["outputs"][0]["data"], json::parse("[0.5, null, null, -3.0]"));
  const json b =
      json::parse(FormatInferResponse(MakeResponse("BF16", half_bytes, 2, 2), false, &json_length));
  EXPECT_EQ(static_cast<float>(b["outputs"][0]["data"][0].get<double>()), Bf16ToFloat(halves[0]));
}

TEST(InferenceJsonTest, BinaryOutputsFollowTheJson) {
  const std::string bytes("\x01\x00\x02\x00\x03\x00\x04\x00", 8);
  int64_t json_length = -1;
  const std::string body =
      FormatInferResponse(MakeResponse("FP16", bytes, 2, 2), /*binary=*/true, &json_length);
  ASSERT_GT(json_length, 0);
  ASSERT_EQ(body.size(), static_cast<size_t>(json_length) + bytes.size());
  EXPECT_EQ(body.substr(json_length), bytes);
  const json j = json::parse(body.substr(0, json_length));
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 8);
}

TEST(InferenceJsonTest, MetadataAndErrors) {
  inference::ServerMetadataResponse server;
  server.set_name("qmm");
  server.set_version("1.2.3");
  EXPECT_EQ(json::parse(ServerMetadataJson(server)),
            json::parse(R"({"name": "qmm", "version": "1.2.3", "extensions": []})"));
  inference::ModelMetadataResponse model;
  model.set_name("w");
  model.add_versions("1");
  model.set_platform("qmm_w4a16");
  inference::ModelMetadataResponse::TensorMetadata* input = model.add_inputs();
  input->set_name("x");
  input->set_datatype("FP16");
  input->add_shape(-1);
  input->add_shape(64);
  EXPECT_EQ(json::parse(ModelMetadataJson(model)), json::parse(R"({"name": "w", "versions": ["1"],
      "platform": "qmm_w4a16", "inputs": [{"name": "x", "datatype": "FP16", "shape": [-1, 64]}],
      "outputs": []})"));
  // Messages are escaped, bytes that are not UTF-8 replaced.
  EXPECT_EQ(json::parse(ErrorJson("a \"b\"\n\xff"))["error"], "a \"b\"\n\xEF\xBF\xBD");
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);
}

}  // namespace
}  // namespace qmm
