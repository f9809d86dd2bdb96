#include "server/inference_http.h"

#include <civetweb.h>

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/http_address.h"
#include "server/inference_config.h"
#include "server/inference_convert.h"
#include "server/inference_json.h"
#include "server/inference_runner.h"
#include "server/request_clock.h"

namespace qmm {
namespace {

// Requests in flight at once: each holds a civetweb thread while its batch runs.
constexpr const char* kThreads = "32";
constexpr absl::string_view kJson = "application/json";

void Reply(mg_connection* connection, int status, const std::string& body,
           absl::string_view content_type = kJson,
           std::optional<int64_t> json_length = std::nullopt) {
  mg_response_header_start(connection, status);
  mg_response_header_add(connection, "Content-Type", content_type.data(),
                         static_cast<int>(content_type.size()));
  const std::string length = absl::StrCat(body.size());
  mg_response_header_add(connection, "Content-Length", length.c_str(), -1);
  if (json_length) {
    const std::string header = absl::StrCat(*json_length);
    mg_response_header_add(connection, "Inference-Header-Content-Length", header.c_str(), -1);
  }
  mg_response_header_send(connection);
  mg_write(connection, body.data(), body.size());
}

// Answers with `status`'s HTTP code and {"error": message}, and records it.
int Fail(mg_connection* connection, const RequestClock& clock, const absl::Status& status) {
  clock.Finish(status);
  const int code = HttpStatusOf(status.code());
  Reply(connection, code, ErrorJson(status.message()));
  return code;
}

// A method the endpoint does not take (405), recorded as INVALID_ARGUMENT.
void WrongMethod(mg_connection* connection, const RequestClock& clock, absl::string_view uri,
                 absl::string_view allowed) {
  const absl::Status status =
      absl::InvalidArgumentError(absl::StrCat(uri, " takes ", allowed, " only"));
  clock.Finish(status);
  Reply(connection, 405, ErrorJson(status.message()));
}

int Ok(mg_connection* connection, const RequestClock& clock, const std::string& body) {
  clock.Finish(absl::OkStatus());
  Reply(connection, 200, body);
  return 200;
}

// The body, up to `limit` bytes (RESOURCE_EXHAUSTED past it).
absl::StatusOr<std::string> ReadBody(mg_connection* connection, int64_t limit) {
  const int64_t declared = mg_get_request_info(connection)->content_length;
  if (declared > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request body is ", declared, " bytes, over max_message_bytes ", limit));
  }
  // Read straight into the string (civetweb's threads have small stacks).
  constexpr size_t kChunk = 1 << 16;
  std::string body;
  size_t size = 0;
  while (true) {
    body.resize(size + kChunk);
    const int n = mg_read(connection, body.data() + size, kChunk);
    if (n <= 0) break;
    size += static_cast<size_t>(n);
    if (static_cast<int64_t>(size) > limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the request body is over max_message_bytes ", limit));
    }
  }
  body.resize(size);
  return body;
}

// The model's name, version and action from a path below /v2/models/: NAME[/versions/V]
// followed by the action ("" for the metadata, "ready", "infer", "config" or "stats").
// Names may hold '/', so the action and the version are taken from the end.
struct ModelPath {
  std::string name;
  std::string version;
  std::string action;
};
ModelPath ParseModelPath(absl::string_view rest) {
  ModelPath path;
  for (absl::string_view action : {"ready", "infer", "config", "stats"}) {
    if (absl::EndsWith(rest, absl::StrCat("/", action))) {
      path.action = std::string(action);
      rest.remove_suffix(action.size() + 1);
      break;
    }
  }
  const size_t versions = rest.rfind("/versions/");
  if (versions != absl::string_view::npos &&
      rest.find('/', versions + 10) == absl::string_view::npos) {
    path.version = std::string(rest.substr(versions + 10));
    rest = rest.substr(0, versions);
  }
  path.name = std::string(rest);
  return path;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceHttpServer>> InferenceHttpServer::Start(
    absl::string_view address, const ServiceContext& context, const std::atomic<bool>& ready) {
  if (absl::Status s = CheckHttpAddress(address, "HTTP", "127.0.0.1:8000"); !s.ok()) return s;
  std::unique_ptr<InferenceHttpServer> server(new InferenceHttpServer(context, ready));
  const std::string ports(address);
  const char* options[] = {"listening_ports",   ports.c_str(), "num_threads", kThreads,
                           "enable_keep_alive", "yes",         nullptr};
  mg_callbacks callbacks{};
  server->civetweb_ = mg_start(&callbacks, nullptr, options);
  if (server->civetweb_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", address,
                                               " (the port is in use or the host is not local)"));
  }
  mg_set_request_handler(server->civetweb_, "/v2", &InferenceHttpServer::Handle, server.get());
  mg_server_port bound[2];
  if (mg_get_server_ports(server->civetweb_, 2, bound) != 1) {
    return absl::InternalError(absl::StrCat("HTTP on ", address, " does not listen on one port"));
  }
  server->port_ = bound[0].port;
  return server;
}

InferenceHttpServer::~InferenceHttpServer() {
  if (civetweb_ != nullptr) mg_stop(civetweb_);
}

int InferenceHttpServer::Handle(mg_connection* connection, void* self) {
  static_cast<InferenceHttpServer*>(self)->Serve(connection);
  return 1;
}

void InferenceHttpServer::Serve(mg_connection* connection) {
  const mg_request_info* info = mg_get_request_info(connection);
  const absl::string_view method = info->request_method;
  const absl::string_view uri = info->local_uri != nullptr ? info->local_uri : "";
  const bool get = method == "GET";

  if (uri == "/v2/health/live" || uri == "/v2/health/ready") {
    const RequestClock clock(context_.metrics, RpcMethod::kHttpHealth);
    if (!get) {
      WrongMethod(connection, clock, uri, "GET");
      return;
    }
    const bool live = uri == "/v2/health/live";
    const bool ok = live || InferenceServerReady(ready_, *context_.backend);
    clock.Finish(absl::OkStatus());
    Reply(connection, ok ? 200 : 503,
          absl::StrCat("{\"", live ? "live" : "ready", "\":", ok ? "true" : "false", "}"));
    return;
  }
  if (uri == "/v2") {
    const RequestClock clock(context_.metrics, RpcMethod::kHttpMetadata);
    if (!get) {
      WrongMethod(connection, clock, uri, "GET");
      return;
    }
    inference::ServerMetadataResponse metadata;
    FillServerMetadata(&metadata);
    Ok(connection, clock, ServerMetadataJson(metadata));
    return;
  }
  constexpr absl::string_view kModels = "/v2/models/";
  if (!absl::StartsWith(uri, kModels)) {
    const RequestClock clock(context_.metrics, RpcMethod::kHttpMetadata);
    Fail(connection, clock, absl::NotFoundError(absl::StrCat("no endpoint ", uri)));
    return;
  }
  // /v2/models/stats: every model's statistics (the name empty).
  const ModelPath path = uri == "/v2/models/stats"
                             ? ModelPath{.name = "", .version = "", .action = "stats"}
                             : ParseModelPath(uri.substr(kModels.size()));

  if (path.action == "infer") {
    const RequestClock clock(context_.metrics, RpcMethod::kHttpInfer);
    if (method != "POST") {
      WrongMethod(connection, clock, uri, "POST");
      return;
    }
    absl::StatusOr<std::string> body = ReadBody(connection, context_.limits.max_message_bytes);
    if (!body.ok()) {
      clock.Finish(body.status());
      Reply(connection, 413, ErrorJson(body.status().message()));  // Payload Too Large
      return;
    }
    std::optional<int64_t> json_length;
    if (const char* header = mg_get_header(connection, "Inference-Header-Content-Length")) {
      int64_t length = -1;
      if (!absl::SimpleAtoi(header, &length)) length = -1;
      json_length = length;
    }
    absl::StatusOr<HttpInferRequest> parsed =
        ParseInferRequest(*body, json_length, path.name, path.version);
    if (!parsed.ok()) {
      Fail(connection, clock, parsed.status());
      return;
    }
    absl::StatusOr<std::unique_ptr<InferJob>> job = PrepareInfer(parsed->request, context_);
    if (!job.ok()) {
      Fail(connection, clock, job.status());
      return;
    }
    // This civetweb thread waits for the batch. HTTP carries no deadline or cancellation;
    // the request's "timeout" parameter, if any, is its deadline (DispatchInfer).
    inference::ModelInferResponse response;
    absl::Status status;
    absl::Notification done;
    DispatchInfer(context_, RpcMethod::kHttpInfer, RequestControl{}, *std::move(job), &response,
                  [&status, &done](const absl::Status& s) {
                    status = s;
                    done.Notify();
                  });
    done.WaitForNotification();
    if (!status.ok()) {
      Fail(connection, clock, status);
      return;
    }
    clock.Finish(absl::OkStatus());
    int64_t length = 0;
    const std::string out = FormatInferResponse(response, parsed->binary_output, &length);
    if (parsed->binary_output) {
      Reply(connection, 200, out, "application/octet-stream", length);
    } else {
      Reply(connection, 200, out);
    }
    return;
  }

  const RequestClock clock(context_.metrics, RpcMethod::kHttpMetadata);
  if (!get) {
    WrongMethod(connection, clock, uri, "GET");
    return;
  }
  constexpr absl::string_view kNameField = "the model name in the path";
  if (path.action == "stats") {
    inference::ModelStatisticsResponse stats;
    const absl::Status status = FillModelStatistics(path.name, path.version, kNameField,
                                                    *context_.models, *context_.store, &stats);
    if (!status.ok()) {
      Fail(connection, clock, status);
      return;
    }
    Ok(connection, clock, ModelStatisticsJson(stats));
    return;
  }
  if (path.action == "ready") {
    absl::StatusOr<bool> ready = InferenceModelReady(
        path.name, path.version, kNameField, InferenceServerReady(ready_, *context_.backend),
        *context_.models, *context_.store);
    if (!ready.ok()) {
      Fail(connection, clock, ready.status());
      return;
    }
    clock.Finish(absl::OkStatus());
    Reply(connection, *ready ? 200 : 503,
          absl::StrCat("{\"ready\":", *ready ? "true" : "false", "}"));
    return;
  }
  absl::StatusOr<InferenceModel> target =
      ResolveInferenceModel(path.name, path.version, kNameField, *context_.models, *context_.store);
  if (!target.ok()) {
    Fail(connection, clock, target.status());
    return;
  }
  if (path.action == "config") {
    inference::ModelConfigResponse config;
    FillModelConfig(*target, ServingOf(context_), &config);
    Ok(connection, clock, ModelConfigJson(config.config()));
    return;
  }
  inference::ModelMetadataResponse metadata;
  FillModelMetadata(*target, &metadata);
  Ok(connection, clock, ModelMetadataJson(metadata));
}

}  // namespace qmm
