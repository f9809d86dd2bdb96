// qmmctl's model subcommands (create-model, ls-models, rm-model, forward), beside the
// weight ones of commands.h and with the same conventions: main.cc parses the flags into
// these options, each Run* prints its results on stdout and returns an error status.
#ifndef QMM_CLIENT_QMMCTL_MODEL_COMMANDS_H_
#define QMM_CLIENT_QMMCTL_MODEL_COMMANDS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/qmmctl/commands.h"
#include "kernels/dtype.h"

namespace qmm::ctl {

// The JSON format is in client/model_spec.h.
absl::Status RunCreateModel(Client& client, const std::string& spec_path);
absl::Status RunListModels(Client& client);
absl::Status RunDeleteModel(Client& client, const std::string& name);

// The input of a model without an embedding: the .npy file or random [m, in_features] of
// CallOptions; of a model with one: token_ids, or m random ones.
struct ForwardOptions : CallOptions {
  std::string model;
  std::vector<int32_t> token_ids;
  // Verification: weight name -> the seed it was uploaded with (qmmctl upload --random).
  std::map<std::string, uint64_t> verify_seeds;
};

// OK with false when the verification failed (it printed FAIL).
absl::StatusOr<bool> RunForward(Client& client, const ForwardOptions& options);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_MODEL_COMMANDS_H_
