// The Open Inference Protocol's HTTP/REST bodies (KServe v2 JSON, with Triton's binary
// tensor data extension) to and from its gRPC messages, so that one path
// (server/inference_runner.h) serves both transports.
//
// A request body is JSON, or, when the client sends Inference-Header-Content-Length: L,
// L bytes of JSON followed by the binary data of the inputs whose parameters give a
// binary_data_size, in the order of `inputs`. Every input becomes raw little-endian bytes
// (raw_input_contents), whichever way it came.
#ifndef QMM_SERVER_INFERENCE_JSON_H_
#define QMM_SERVER_INFERENCE_JSON_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/open_inference.pb.h"

namespace qmm {

struct HttpInferRequest {
  inference::ModelInferRequest request;
  // The client asked for the output as binary data (the request's binary_data_output or
  // an output's binary_data parameter), not as a JSON array.
  bool binary_output = false;
};

// Parses an infer request for model `name` (version `version`, empty for the server's
// choice). `json_length` is the Inference-Header-Content-Length, nullopt when the whole
// body is JSON. INVALID_ARGUMENT naming the JSON field ("inputs[0].data") for anything
// malformed: not JSON, fields of the wrong type, data that is not the shape's numbers of
// the datatype, binary sizes that do not add up to the bytes after the JSON.
absl::StatusOr<HttpInferRequest> ParseInferRequest(absl::string_view body,
                                                   std::optional<int64_t> json_length,
                                                   absl::string_view name,
                                                   absl::string_view version);

// The response body for `response`; with `binary`, the outputs' bytes follow the JSON and
// *json_length receives the JSON's length (the Inference-Header-Content-Length). JSON
// arrays hold the values in row-major order; a value JSON cannot hold (NaN, an infinity)
// is null there, so binary output is the exact form.
std::string FormatInferResponse(const inference::ModelInferResponse& response, bool binary,
                                int64_t* json_length);

std::string ServerMetadataJson(const inference::ServerMetadataResponse& metadata);
std::string ModelMetadataJson(const inference::ModelMetadataResponse& metadata);
// Triton's JSON of a model config and of statistics: the proto field names, enums by name,
// every number a JSON number (not the proto JSON mapping's strings for 64-bit values).
std::string ModelConfigJson(const inference::ModelConfig& config);
std::string ModelStatisticsJson(const inference::ModelStatisticsResponse& response);
// {"error": message}.
std::string ErrorJson(absl::string_view message);

// The HTTP status of a failed request's code (Google's mapping of gRPC codes).
int HttpStatusOf(absl::StatusCode code);

}  // namespace qmm

#endif  // QMM_SERVER_INFERENCE_JSON_H_
