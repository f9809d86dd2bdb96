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
#include "kernels/dtype.h"

namespace qmm::ctl {

// The JSON format is in client/model_spec.h.
absl::Status RunCreateModel(Client& client, const std::string& spec_path);
absl::Status RunListModels(Client& client);
absl::Status RunDeleteModel(Client& client, const std::string& name);

struct ForwardOptions {
  std::string model;
  // Input of a model without an embedding: a 2-D .npy file, or random [m, in_features].
  std::optional<std::string> npy_path;
  // Input of a model with one: these token ids, or m random ones.
  std::vector<int32_t> token_ids;
  int64_t m = 1;
  uint64_t seed = 1;
  // Wire dtype of the activations; nullopt: fp32 for random ones, the file's f4/f2 as is.
  std::optional<DType> dtype;
  std::optional<DType> output_dtype;  // nullopt: the input's dtype (fp32 for tokens)
  int repeat = 1;
  bool stream = false;      // send the repeats over one ForwardStream
  std::string output_path;  // write the result as .npy
  // Verification: weight name -> the seed it was uploaded with (qmmctl upload --random).
  std::map<std::string, uint64_t> verify_seeds;
  double tolerance = 0;  // 0: ForwardTolerance()
};

// OK with false when the verification failed (it printed FAIL).
absl::StatusOr<bool> RunForward(Client& client, const ForwardOptions& options);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_MODEL_COMMANDS_H_
