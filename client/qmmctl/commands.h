// qmmctl's subcommands. main.cc parses the flags into these option structs; each Run*
// talks to the server through `client`, prints its results on stdout (progress on
// stderr) and returns an error status for main to print.
#ifndef QMM_CLIENT_QMMCTL_COMMANDS_H_
#define QMM_CLIENT_QMMCTL_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::ctl {

absl::Status RunInfo(Client& client);
absl::Status RunList(Client& client);
// The server's statistics of the weight or model `name`, or of all of them ("").
absl::Status RunStats(Client& client, const std::string& name);
absl::Status RunDelete(Client& client, const std::string& name);
// Prints SERVING or NOT_SERVING for `service` ("" = the whole server); true when serving.
absl::StatusOr<bool> RunHealth(Client& client, const std::string& service);

struct UploadOptions {
  // kCheckpoint: a Hugging Face checkpoint directory, every quantized layer of it as its
  // quantization settings say (client/checkpoint_config.h).
  enum class Source { kRandom, kNpy, kSafetensors, kPacked, kCheckpoint };

  std::string name;
  Scheme scheme = Scheme::kFp16;
  std::optional<int32_t> group_size;  // nullopt: 128 for W4A16, 0 otherwise
  // W4A16: a zero point per group (WeightShape::zero_points); an int4 checkpoint's tensors
  // set it where they hold an asymmetric quantization.
  bool zero_points = false;
  // W4A16 with group_size 128: the columns are in activation order (WeightShape::act_order)
  // for a --packed file; a checkpoint's group index says it itself.
  bool act_order = false;
  Source source = Source::kRandom;
  int64_t n = 0;  // required for kRandom and kPacked; checked against files
  int64_t k = 0;
  uint64_t seed = 1;  // kRandom
  std::string path;   // kNpy, kSafetensors, kPacked, kCheckpoint
  // kSafetensors: the [N, K] float tensor, or with an int4 checkpoint encoding or
  // kBitnetHf the linear layer whose tensors to read (client/int4_checkpoint.h,
  // client/bitnet_checkpoint.h).
  std::string tensor;
  bool pack_locally = false;  // quantize here and upload the packed form
  // kPacked: what the file holds (kPacked: the canonical form; a BitNet planar packing or
  // an int4 checkpoint's tensors, whose scales are `scale_dtype` values). kSafetensors:
  // kFloat (a float tensor), an int4 checkpoint encoding or kBitnetHf.
  UploadSpec::Encoding encoding = UploadSpec::Encoding::kPacked;
  // nullopt: fp32 for the BitNet encodings, fp16 for the int4 checkpoints'.
  std::optional<DType> scale_dtype;
  // The BitNet encodings: the scales multiply (UploadSpec::scale_multiplies).
  bool scale_multiplies = false;
  // kCheckpoint: --scheme, if given, which the checkpoint's layers must be.
  std::optional<Scheme> checkpoint_scheme;
};

absl::Status RunUpload(Client& client, const UploadOptions& options);

// What matmul and forward (model_commands.h) share: their activations, how often they are
// sent, where the result goes and how closely it is verified.
struct CallOptions {
  // Activations: a 2-D .npy file, or m random rows (of the width the command says).
  std::optional<std::string> npy_path;
  int64_t m = 1;
  uint64_t seed = 1;
  // Wire dtype of the activations; nullopt: fp32 for random ones, the file's f4/f2 as is
  // (anything else converted to fp32).
  std::optional<DType> dtype;
  std::optional<DType> output_dtype;  // nullopt: the input's dtype (fp32 for token ids)
  int repeat = 1;
  bool stream = false;      // send the repeats over one stream (MatMulStream, ForwardStream)
  std::string output_path;  // write the result as .npy
  double tolerance = 0;     // 0: the command's default (DefaultTolerance, ForwardTolerance)
};

// Random activations are [m, K], K from the weight.
struct MatMulOptions : CallOptions {
  std::string weight;
  // Verification against the random weight of this seed.
  std::optional<uint64_t> verify_seed;
  // What the weight was uploaded as; each one given is checked against the server.
  std::optional<Scheme> scheme;
  std::optional<int64_t> n;
  std::optional<int64_t> k;
  std::optional<int32_t> group_size;
};

// OK with false when the verification failed (it printed FAIL).
absl::StatusOr<bool> RunMatMul(Client& client, const MatMulOptions& options);

}  // namespace qmm::ctl

#endif  // QMM_CLIENT_QMMCTL_COMMANDS_H_
