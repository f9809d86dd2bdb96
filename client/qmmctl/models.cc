// qmmctl create-model SPEC.json, ls-models, rm-model NAME.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_join.h"
#include "client/file_io.h"
#include "client/model_spec.h"
#include "client/qmmctl/model_commands.h"

namespace qmm::ctl {
namespace {

void PrintModel(const v1::ModelInfo& m) {
  std::printf("%-32s %6d %8s %8lld %12lld  %s\n", m.name().c_str(), m.layers_size(),
              m.token_input() ? "tokens" : std::to_string(m.in_features()).c_str(),
              static_cast<long long>(m.out_features()), static_cast<long long>(m.param_bytes()),
              absl::StrJoin(m.weights(), ",").c_str());
}

void PrintHeader() {
  std::printf("%-32s %6s %8s %8s %12s  %s\n", "NAME", "LAYERS", "IN", "OUT", "PARAM_BYTES",
              "WEIGHTS");
}

}  // namespace

absl::Status RunCreateModel(Client& client, const std::string& spec_path) {
  absl::StatusOr<std::vector<uint8_t>> text = ReadFile(spec_path);
  if (!text.ok()) return text.status();
  // A vector read from a file names it relative to the spec's folder.
  absl::StatusOr<v1::CreateModelRequest> request =
      ParseModelSpec(std::string_view(reinterpret_cast<const char*>(text->data()), text->size()),
                     std::filesystem::path(spec_path).parent_path().string());
  if (!request.ok()) {
    return absl::Status(request.status().code(),
                        spec_path + ": " + std::string(request.status().message()));
  }
  absl::StatusOr<v1::ModelInfo> model = client.CreateModel(*request);
  if (!model.ok()) return model.status();
  std::printf("created model %s\n", model->name().c_str());
  PrintHeader();
  PrintModel(*model);
  return absl::OkStatus();
}

absl::Status RunListModels(Client& client) {
  absl::StatusOr<std::vector<v1::ModelInfo>> models = client.ListModels();
  if (!models.ok()) return models.status();
  PrintHeader();
  for (const v1::ModelInfo& m : *models) PrintModel(m);
  return absl::OkStatus();
}

absl::Status RunDeleteModel(Client& client, const std::string& name) {
  if (absl::Status status = client.DeleteModel(name); !status.ok()) return status;
  std::printf("deleted model %s\n", name.c_str());
  return absl::OkStatus();
}

}  // namespace qmm::ctl
