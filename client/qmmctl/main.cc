// qmmctl: the command-line client of qmm-server. Flags are read here only; each
// subcommand gets an option struct (client/qmmctl/commands.h).
//
// Exit status: 0 on success, 1 when the server or a file reported an error or a
// verification failed (health: when the server is not serving), 2 for a usage error.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/qmmctl/bench.h"
#include "client/qmmctl/commands.h"
#include "client/qmmctl/model_commands.h"
#include "client/qmmctl/names.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "qmm-server address, HOST:PORT");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20, "largest gRPC message sent or received");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60), "deadline of each unary call");
ABSL_FLAG(bool, tls, false, "TLS to the server, checked against the system's CAs (or --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificates the server's certificate must chain to");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain, for a server that requires one (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "the name the server's certificate must carry, when not the host of --server");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10),
          "how long to wait for the connection to the server");

ABSL_FLAG(std::string, service, "",
          "health: the service to ask about (\"\" = the whole server, or qmm.v1.Qmm)");
ABSL_FLAG(std::string, name, "", "upload: name of the new weight; rm: the weight to delete");
ABSL_FLAG(std::string, scheme, "",
          "upload: fp16, bf16, w8a16, w4a16 or w2a8; matmul: checked against the weight");
ABSL_FLAG(int32_t, group_size, -1,
          "W4A16 group size along K: 128, or 0 for one group per row (default: 128 for w4a16, "
          "0 otherwise)");
ABSL_FLAG(bool, zero_points, false,
          "upload, W4A16: a zero point per group (asymmetric int4, as AWQ and GPTQ with "
          "sym=False quantize); --random, --npy and float --safetensors values are then "
          "quantized over each group's range, and a --packed file holds them after the "
          "scales. A checkpoint's tensors say it themselves");
ABSL_FLAG(bool, act_order, false,
          "upload, W4A16 with --group_size=128, --packed: the weight's columns are in "
          "activation order (GPTQ's desc_act): a canonical file ends with the order, a "
          "checkpoint payload with its group index. A --safetensors checkpoint layer's "
          "g_idx says it itself");
ABSL_FLAG(bool, random, false,
          "upload: a random [--n, --k] weight (--seed); matmul: random [--m, K] activations");
ABSL_FLAG(int64_t, n, 0, "out_features (rows of the weight)");
ABSL_FLAG(int64_t, k, 0, "in_features (columns of the weight)");
ABSL_FLAG(int64_t, m, 1, "matmul: rows of random activations");
ABSL_FLAG(uint64_t, seed, 1, "seed of --random values");
ABSL_FLAG(bool, pack_locally, false,
          "upload: quantize here and upload the packed form instead of float values");
ABSL_FLAG(std::string, safetensors, "", "upload: a .safetensors file (with --tensor)");
ABSL_FLAG(std::string, checkpoint, "",
          "upload: a Hugging Face checkpoint directory quantized with GPTQ, AWQ or "
          "compressed-tensors (int4, W4A16) or BitNet b1.58 (ternary, W2A8): every "
          "quantized linear layer of its .safetensors files, as its config.json (or "
          "quantize_config.json, quant_config.json) says, each named --name (a prefix, may "
          "be empty) + its layer's name; or with --tensor=LAYER that one, named --name");
ABSL_FLAG(std::string, tensor, "",
          "upload: the tensor of the --safetensors file, [N, K]; with --encoding=gptq, "
          "gptq_v2, awq, pack_quantized or bitnet_hf the linear layer (its tensors' common "
          "prefix), or none for every layer in the file, each named --name (a prefix, may "
          "be empty) + its layer's name");
ABSL_FLAG(std::string, npy, "", "upload: a 2-D float .npy weight; matmul: .npy activations [M, K]");
ABSL_FLAG(std::string, packed, "",
          "upload: a file of the scheme's canonical packed bytes (with --n, --k)");
ABSL_FLAG(std::string, encoding, "",
          "upload: what the --packed file holds: packed (default; the scheme's canonical "
          "form), bitnet_hf (Hugging Face BitLinear.weight, [ceil(N/4), K]) or bitnet_liger "
          "(Liger-Kernel, [K/4, N]), both W2A8 and ending with 0, 1 or N scales, or gptq, "
          "gptq_v2, awq or pack_quantized (W4A16: a GPTQ, AWQ or compressed-tensors layer's "
          "tensors one after the other, as qmm.proto lists them); with --safetensors, gptq, "
          "gptq_v2, awq, pack_quantized or bitnet_hf (LAYER.weight and LAYER.weight_scale) "
          "read the layer that --tensor names");
ABSL_FLAG(bool, scale_multiplies, false,
          "upload with --encoding=bitnet_hf or bitnet_liger: the weight scale multiplies (w = "
          "t * scale, transformers' AutoBitLinear, linear_class autobitlinear) instead of "
          "dividing (BitLinear)");
ABSL_FLAG(std::string, scale_dtype, "",
          "upload --packed with a BitNet or checkpoint --encoding: dtype of the scales "
          "(default fp32 for BitNet, fp16 for the int4 checkpoints)");
ABSL_FLAG(std::string, weight, "", "matmul, bench: the weight to multiply with");
ABSL_FLAG(std::string, dtype, "",
          "matmul: activation dtype on the wire, fp32, fp16 or bf16 (default fp32, or the "
          ".npy file's f4/f2)");
ABSL_FLAG(std::string, out_dtype, "", "matmul: result dtype (default: the activations')");
ABSL_FLAG(int32_t, repeat, 1, "matmul: calls to time (latency percentiles)");
ABSL_FLAG(bool, stream, false,
          "matmul, forward: send the --repeat calls over one MatMulStream / ForwardStream");
ABSL_FLAG(std::string, output, "", "matmul: write the result to this .npy file");
ABSL_FLAG(int64_t, verify_seed, -1,
          "matmul: the weight was uploaded with --random --seed=S; check the result against "
          "a float64 reference of it (exit 1 on FAIL)");
ABSL_FLAG(double, tolerance, 0,
          "matmul --verify_seed: accepted max|y-ref|/max|ref| (default: per scheme, backend "
          "and dtype)");
ABSL_FLAG(int32_t, concurrency, 1, "bench: concurrent callers (threads)");
ABSL_FLAG(int64_t, requests, 0, "bench: requests to send in all (or --duration)");
ABSL_FLAG(std::string, duration, "",
          "bench: how long to send requests, in seconds or as a duration (30s, 2m)");
ABSL_FLAG(int64_t, rows, 1, "bench: rows (M) of every request");
ABSL_FLAG(bool, verify, false,
          "bench: check every result against a float64 reference (needs --verify_seed)");
ABSL_FLAG(std::string, json, "", "bench: also write the report to this JSON file");
ABSL_FLAG(int32_t, channels, 0,
          "bench: connections the callers share; 0 = one per 16 requests in flight, at most 16");
ABSL_FLAG(int32_t, inputs, 64, "bench: distinct random activation sets, sent round robin");
ABSL_FLAG(int32_t, warmup, 0, "bench: requests per caller before the clock starts");
ABSL_FLAG(int32_t, inflight, 1,
          "bench --stream or --local: requests each caller sends ahead of their answers (1 to "
          "16)");
ABSL_FLAG(std::string, protocol, "qmm",
          "bench: qmm (MatMul, MatMulStream) or oip (the Open Inference Protocol's ModelInfer, "
          "ModelStreamInfer)");
ABSL_FLAG(std::string, local, "",
          "bench: send MatMul through the server's local transport at this Unix socket path "
          "(qmm-server --local_listen) instead of gRPC; --channels sessions, --inflight slots a "
          "caller");
ABSL_FLAG(int64_t, local_spin_us, 0,
          "bench --local: how long a caller polls for its answer before sleeping (us)");
ABSL_FLAG(std::string, model, "", "forward, bench: the model to run");
ABSL_FLAG(std::string, tokens, "", "forward: comma-separated token ids (models with an embedding)");
ABSL_FLAG(std::string, verify_seeds, "",
          "forward, bench: NAME=SEED,... the --seed each of the model's weights was uploaded with "
          "(--random); checks the result against a float64 reference of the model");

namespace qmm::ctl {
namespace {

constexpr char kUsage[] =
    "qmmctl --server=HOST:PORT [--tls [--tls_ca=F] [--tls_cert=F --tls_key=F]] COMMAND [flags]\n"
    "\n"
    "  info     the server's version, backend, device, memory and limits\n"
    "  health   [--service=S]  SERVING (exit 0) or NOT_SERVING (exit 1), the standard\n"
    "           grpc.health.v1 check, for probes\n"
    "  ls       the weights held\n"
    "  stats [NAME]  each weight's and model's requests, launches and mean times in the\n"
    "           server since it was stored (ModelStatistics)\n"
    "  rm NAME  delete a weight (or --name)\n"
    "  upload   --name=N --scheme=S [--group_size=128|0] [--zero_points] [--act_order]\n"
    "           and one source:\n"
    "             --random --n --k [--seed] | --npy FILE | --safetensors FILE --tensor T |\n"
    "             --packed FILE --n --k [--encoding=packed|bitnet_hf|bitnet_liger|gptq|\n"
    "             gptq_v2|awq|pack_quantized [--scale_dtype]] | --safetensors FILE\n"
    "             [--tensor LAYER] --encoding=gptq|gptq_v2|awq|pack_quantized|bitnet_hf\n"
    "             (no --tensor: every layer, named --name + its name); the BitNet encodings\n"
    "             take [--scale_multiplies]; --pack_locally quantizes here\n"
    "  upload   --checkpoint DIR [--name=PREFIX] [--tensor LAYER]  every quantized layer of\n"
    "           a GPTQ, AWQ, compressed-tensors or BitNet checkpoint directory, as its\n"
    "           config says\n"
    "  matmul   --weight=N, --random --m [--seed] [--dtype] or --npy FILE, [--out_dtype]\n"
    "           [--repeat R] [--stream] [--output FILE.npy]\n"
    "           [--verify_seed S [--n --k --scheme --group_size] [--tolerance]]\n"
    "  bench    (--weight=N | --model=M) --concurrency=C (--requests=R | --duration=S)\n"
    "           [--rows=M]\n"
    "           [--stream [--inflight=N]] [--dtype] [--out_dtype]\n"
    "           [--verify (--verify_seed=S | --verify_seeds=W1=S1,..) [--tolerance]]\n"
    "           [--json FILE] [--channels] [--inputs] [--warmup] [--seed] [--protocol=qmm|oip]\n"
    "           [--local=PATH [--local_spin_us] [--inflight=N]]\n"
    "  create-model SPEC.json   a model from a JSON layer list (client/model_spec.h)\n"
    "  ls-models                the models held\n"
    "  rm-model NAME            delete a model (its weights stay)\n"
    "  forward  --model=M, --random --m [--seed] [--dtype] or --npy FILE or --tokens=1,2,..\n"
    "           [--out_dtype] [--repeat R] [--stream] [--output FILE.npy]\n"
    "           [--verify_seeds=W1=S1,W2=S2,.. [--tolerance]]\n";

template <typename T>
std::optional<T> NonDefault(T value, T unset) {
  return value == unset ? std::nullopt : std::optional<T>(value);
}

absl::StatusOr<std::optional<Scheme>> SchemeFlag() {
  const std::string name = absl::GetFlag(FLAGS_scheme);
  if (name.empty()) return std::nullopt;
  absl::StatusOr<Scheme> scheme = ParseScheme(name);
  if (!scheme.ok()) return scheme.status();
  return *scheme;
}

absl::StatusOr<std::optional<DType>> DTypeFlag(const std::string& name) {
  if (name.empty()) return std::nullopt;
  absl::StatusOr<DType> dtype = ParseDType(name);
  if (!dtype.ok()) return dtype.status();
  return *dtype;
}

// --checkpoint: its settings say what the other upload flags would.
absl::StatusOr<UploadOptions> CheckpointFlags(std::optional<Scheme> scheme, UploadOptions o) {
  if (scheme && *scheme != Scheme::kW4A16 && *scheme != Scheme::kW2A8) {
    return absl::InvalidArgumentError(
        "--checkpoint uploads int4 (w4a16) or BitNet (w2a8) layers: --scheme=w4a16, w2a8 or "
        "none");
  }
  o.checkpoint_scheme = scheme;
  const bool restated = o.group_size || o.zero_points || o.act_order || o.scale_multiplies ||
                        o.n > 0 || o.k > 0 || o.pack_locally ||
                        !absl::GetFlag(FLAGS_encoding).empty() ||
                        !absl::GetFlag(FLAGS_scale_dtype).empty();
  if (restated) {
    return absl::InvalidArgumentError(
        "--checkpoint reads the encoding, group size, zero points, activation order, scales "
        "and shapes from the checkpoint itself: --encoding, --group_size, --zero_points, "
        "--act_order, --scale_multiplies, --n, --k, --scale_dtype and --pack_locally do not "
        "apply");
  }
  return o;
}

absl::StatusOr<UploadOptions> UploadFlags() {
  UploadOptions o;
  o.name = absl::GetFlag(FLAGS_name);
  absl::StatusOr<std::optional<Scheme>> scheme = SchemeFlag();
  if (!scheme.ok()) return scheme.status();
  o.group_size = NonDefault(absl::GetFlag(FLAGS_group_size), -1);
  o.zero_points = absl::GetFlag(FLAGS_zero_points);
  o.act_order = absl::GetFlag(FLAGS_act_order);
  o.scale_multiplies = absl::GetFlag(FLAGS_scale_multiplies);
  o.n = absl::GetFlag(FLAGS_n);
  o.k = absl::GetFlag(FLAGS_k);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.pack_locally = absl::GetFlag(FLAGS_pack_locally);
  int sources = 0;
  if (absl::GetFlag(FLAGS_random)) {
    o.source = UploadOptions::Source::kRandom;
    ++sources;
  }
  for (const auto& [path, source] :
       {std::pair{absl::GetFlag(FLAGS_npy), UploadOptions::Source::kNpy},
        std::pair{absl::GetFlag(FLAGS_safetensors), UploadOptions::Source::kSafetensors},
        std::pair{absl::GetFlag(FLAGS_packed), UploadOptions::Source::kPacked},
        std::pair{absl::GetFlag(FLAGS_checkpoint), UploadOptions::Source::kCheckpoint}}) {
    if (path.empty()) continue;
    o.source = source;
    o.path = path;
    ++sources;
  }
  if (sources != 1) {
    return absl::InvalidArgumentError(
        "upload needs exactly one of --random, --npy, --safetensors, --packed, --checkpoint");
  }
  o.tensor = absl::GetFlag(FLAGS_tensor);
  if (o.source == UploadOptions::Source::kCheckpoint) return CheckpointFlags(*scheme, o);
  if (!*scheme) return absl::InvalidArgumentError("upload needs --scheme");
  o.scheme = **scheme;
  const std::string encoding = absl::GetFlag(FLAGS_encoding);
  const std::pair<const char*, UploadSpec::Encoding> encodings[] = {
      {"packed", UploadSpec::Encoding::kPacked},
      {"bitnet_hf", UploadSpec::Encoding::kBitnetHf},
      {"bitnet_liger", UploadSpec::Encoding::kBitnetLiger},
      {"gptq", UploadSpec::Encoding::kGptq},
      {"gptq_v2", UploadSpec::Encoding::kGptqV2},
      {"awq", UploadSpec::Encoding::kAwq},
      {"pack_quantized", UploadSpec::Encoding::kPackQuantized}};
  bool known = encoding.empty();
  for (const auto& [flag, value] : encodings) {
    if (encoding == flag) {
      o.encoding = value;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--encoding = '", encoding,
        "' is not one of packed, bitnet_hf, bitnet_liger, gptq, gptq_v2, awq, pack_quantized"));
  }
  const bool checkpoint = IsCheckpointLayer(o.encoding);
  if (o.source == UploadOptions::Source::kSafetensors) {
    if (!encoding.empty() && !checkpoint) {
      return absl::InvalidArgumentError(
          "--safetensors takes --encoding=gptq, gptq_v2, awq, pack_quantized or bitnet_hf, or "
          "none (a float tensor)");
    }
    if (!checkpoint) o.encoding = UploadSpec::Encoding::kFloat;
    if (!checkpoint && o.tensor.empty()) {
      return absl::InvalidArgumentError(
          "--safetensors needs --tensor (or a checkpoint --encoding)");
    }
  } else if (!encoding.empty() && o.source != UploadOptions::Source::kPacked) {
    return absl::InvalidArgumentError("--encoding applies to --packed and --safetensors sources");
  }
  if (o.scale_multiplies && o.encoding != UploadSpec::Encoding::kBitnetHf &&
      o.encoding != UploadSpec::Encoding::kBitnetLiger) {
    return absl::InvalidArgumentError(
        "--scale_multiplies applies to --encoding=bitnet_hf and bitnet_liger");
  }
  absl::StatusOr<std::optional<DType>> scale_dtype = DTypeFlag(absl::GetFlag(FLAGS_scale_dtype));
  if (!scale_dtype.ok()) return scale_dtype.status();
  o.scale_dtype = *scale_dtype;
  if (o.scale_dtype &&
      (o.source != UploadOptions::Source::kPacked || o.encoding == UploadSpec::Encoding::kPacked)) {
    return absl::InvalidArgumentError(
        "--scale_dtype applies to --packed files of a BitNet or checkpoint --encoding (a "
        ".safetensors file says its scales' dtype)");
  }
  return o;
}

// The flags of CallOptions (the caller has checked --npy against the other inputs).
absl::Status CallFlags(CallOptions& o) {
  const std::string npy = absl::GetFlag(FLAGS_npy);
  if (!npy.empty()) o.npy_path = npy;
  o.m = absl::GetFlag(FLAGS_m);
  o.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::optional<DType>> dtype = DTypeFlag(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return dtype.status();
  o.dtype = *dtype;
  absl::StatusOr<std::optional<DType>> out_dtype = DTypeFlag(absl::GetFlag(FLAGS_out_dtype));
  if (!out_dtype.ok()) return out_dtype.status();
  o.output_dtype = *out_dtype;
  o.repeat = absl::GetFlag(FLAGS_repeat);
  o.stream = absl::GetFlag(FLAGS_stream);
  o.output_path = absl::GetFlag(FLAGS_output);
  o.tolerance = absl::GetFlag(FLAGS_tolerance);
  return absl::OkStatus();
}

absl::StatusOr<MatMulOptions> MatMulFlags() {
  MatMulOptions o;
  o.weight = absl::GetFlag(FLAGS_weight);
  if (!absl::GetFlag(FLAGS_npy).empty() && absl::GetFlag(FLAGS_random)) {
    return absl::InvalidArgumentError("matmul takes --random or --npy, not both");
  }
  if (absl::Status s = CallFlags(o); !s.ok()) return s;
  const int64_t verify_seed = absl::GetFlag(FLAGS_verify_seed);
  if (verify_seed >= 0) o.verify_seed = static_cast<uint64_t>(verify_seed);
  absl::StatusOr<std::optional<Scheme>> scheme = SchemeFlag();
  if (!scheme.ok()) return scheme.status();
  o.scheme = *scheme;
  o.n = NonDefault<int64_t>(absl::GetFlag(FLAGS_n), 0);
  o.k = NonDefault<int64_t>(absl::GetFlag(FLAGS_k), 0);
  o.group_size = NonDefault(absl::GetFlag(FLAGS_group_size), -1);
  return o;
}

// --verify_seeds=NAME=SEED,... (forward, bench --model).
absl::StatusOr<std::map<std::string, uint64_t>> VerifySeedsFlag() {
  std::map<std::string, uint64_t> out;
  for (absl::string_view pair :
       absl::StrSplit(absl::GetFlag(FLAGS_verify_seeds), ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    uint64_t seed = 0;
    if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtoi(parts[1], &seed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--verify_seeds: '", pair, "' is not NAME=SEED"));
    }
    out[std::string(parts[0])] = seed;
  }
  return out;
}

absl::StatusOr<BenchOptions> BenchFlags() {
  BenchOptions o;
  o.weight = absl::GetFlag(FLAGS_weight);
  o.model = absl::GetFlag(FLAGS_model);
  absl::StatusOr<std::map<std::string, uint64_t>> seeds = VerifySeedsFlag();
  if (!seeds.ok()) return seeds.status();
  o.verify_seeds = *std::move(seeds);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.requests = NonDefault<int64_t>(absl::GetFlag(FLAGS_requests), 0);
  const std::string duration = absl::GetFlag(FLAGS_duration);
  if (!duration.empty()) {
    double seconds = 0;
    absl::Duration parsed;
    if (absl::SimpleAtod(duration, &seconds)) {
      o.duration = absl::Seconds(seconds);
    } else if (absl::ParseDuration(duration, &parsed)) {
      o.duration = parsed;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--duration = '", duration, "' is neither seconds nor a duration"));
    }
  }
  o.rows = absl::GetFlag(FLAGS_rows);
  o.stream = absl::GetFlag(FLAGS_stream);
  o.inflight = absl::GetFlag(FLAGS_inflight);
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "qmm" && protocol != "oip") {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol = '", protocol, "' must be qmm or oip"));
  }
  o.open_inference = protocol == "oip";
  o.local = absl::GetFlag(FLAGS_local);
  o.local_spin = absl::Microseconds(absl::GetFlag(FLAGS_local_spin_us));
  absl::StatusOr<std::optional<DType>> dtype = DTypeFlag(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return dtype.status();
  o.dtype = dtype->value_or(DType::kF32);
  absl::StatusOr<std::optional<DType>> out_dtype = DTypeFlag(absl::GetFlag(FLAGS_out_dtype));
  if (!out_dtype.ok()) return out_dtype.status();
  o.output_dtype = *out_dtype;
  o.inputs = absl::GetFlag(FLAGS_inputs);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.channels = absl::GetFlag(FLAGS_channels);
  const int64_t verify_seed = absl::GetFlag(FLAGS_verify_seed);
  if (verify_seed >= 0) o.verify_seed = static_cast<uint64_t>(verify_seed);
  if (absl::GetFlag(FLAGS_verify) && !o.verify_seed && o.verify_seeds.empty()) {
    return absl::InvalidArgumentError(
        "--verify needs --verify_seed=S, the --seed the weight was uploaded with (a model: "
        "--verify_seeds=NAME=SEED,... for its weights)");
  }
  o.tolerance = absl::GetFlag(FLAGS_tolerance);
  o.json_path = absl::GetFlag(FLAGS_json);
  if (absl::Status s = CheckBenchOptions(o); !s.ok()) return s;
  return o;
}

absl::StatusOr<ForwardOptions> ForwardFlags() {
  ForwardOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  const std::string npy = absl::GetFlag(FLAGS_npy);
  const std::string tokens = absl::GetFlag(FLAGS_tokens);
  if (static_cast<int>(!npy.empty()) + static_cast<int>(!tokens.empty()) +
          static_cast<int>(absl::GetFlag(FLAGS_random)) >
      1) {
    return absl::InvalidArgumentError("forward takes one of --random, --npy, --tokens");
  }
  if (absl::Status s = CallFlags(o); !s.ok()) return s;
  for (absl::string_view id : absl::StrSplit(tokens, ',', absl::SkipEmpty())) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(id, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("--tokens: '", id, "' is not an integer"));
    }
    o.token_ids.push_back(value);
  }
  absl::StatusOr<std::map<std::string, uint64_t>> seeds = VerifySeedsFlag();
  if (!seeds.ok()) return seeds.status();
  o.verify_seeds = *std::move(seeds);
  return o;
}

int Fail(absl::string_view command, const absl::Status& status) {
  std::fprintf(stderr, "qmmctl %s: %s\n", std::string(command).c_str(), status.ToString().c_str());
  return 1;
}

int Usage(absl::string_view message) {
  std::fprintf(stderr, "qmmctl: %s\n\n%s", std::string(message).c_str(), kUsage);
  return 2;
}

int Main(const std::vector<char*>& args) {
  if (args.size() < 2) return Usage("no command given");
  const std::string command = args[1];
  std::string rm_name = absl::GetFlag(FLAGS_name);  // or the positional argument
  // The commands that take one positional argument: a name or a file.
  const bool positional =
      command == "rm" || command == "rm-model" || command == "create-model" || command == "stats";
  if (positional && args.size() == 3) {
    rm_name = args[2];
  } else if (args.size() > 2) {
    return Usage(absl::StrCat("unexpected argument '", args[2], "'"));
  }

  // Parse the command's flags before connecting, so usage errors need no server.
  absl::StatusOr<UploadOptions> upload;
  absl::StatusOr<MatMulOptions> matmul;
  absl::StatusOr<BenchOptions> bench;
  absl::StatusOr<ForwardOptions> forward;
  if (command == "upload") {
    upload = UploadFlags();
    if (!upload.ok()) return Usage(upload.status().message());
  } else if (command == "matmul") {
    matmul = MatMulFlags();
    if (!matmul.ok()) return Usage(matmul.status().message());
  } else if (command == "bench") {
    bench = BenchFlags();
    if (!bench.ok()) return Usage(bench.status().message());
  } else if (command == "forward") {
    forward = ForwardFlags();
    if (!forward.ok()) return Usage(forward.status().message());
  } else if (command == "rm") {
    if (rm_name.empty()) return Usage("rm needs a weight name");
  } else if (command == "rm-model" || command == "create-model") {
    if (args.size() != 3) return Usage(command + " needs one argument");
  } else if (command != "info" && command != "health" && command != "ls" &&
             command != "ls-models" && command != "stats") {
    return Usage(absl::StrCat("unknown command '", command, "'"));
  }

  ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.call_timeout = absl::GetFlag(FLAGS_timeout);
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.tls = {.enabled = absl::GetFlag(FLAGS_tls),
                 .ca_file = absl::GetFlag(FLAGS_tls_ca),
                 .cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key),
                 .server_name = absl::GetFlag(FLAGS_tls_server_name)};
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(command, client.status());

  absl::Status status;
  if (command == "info") {
    status = RunInfo(**client);
  } else if (command == "health") {
    absl::StatusOr<bool> serving = RunHealth(**client, absl::GetFlag(FLAGS_service));
    if (!serving.ok()) return Fail(command, serving.status());
    return *serving ? 0 : 1;
  } else if (command == "ls") {
    status = RunList(**client);
  } else if (command == "stats") {
    status = RunStats(**client, rm_name);
  } else if (command == "rm") {
    status = RunDelete(**client, rm_name);
  } else if (command == "ls-models") {
    status = RunListModels(**client);
  } else if (command == "rm-model") {
    status = RunDeleteModel(**client, rm_name);
  } else if (command == "create-model") {
    status = RunCreateModel(**client, rm_name);
  } else if (command == "forward") {
    absl::StatusOr<bool> passed = RunForward(**client, *forward);
    if (!passed.ok()) return Fail(command, passed.status());
    return *passed ? 0 : 1;
  } else if (command == "upload") {
    status = RunUpload(**client, *upload);
  } else if (command == "bench") {
    absl::StatusOr<bool> passed = RunBench(**client, options, *bench);
    if (!passed.ok()) return Fail(command, passed.status());
    return *passed ? 0 : 1;
  } else {
    absl::StatusOr<bool> passed = RunMatMul(**client, *matmul);
    if (!passed.ok()) return Fail(command, passed.status());
    return *passed ? 0 : 1;
  }
  return status.ok() ? 0 : Fail(command, status);
}

}  // namespace
}  // namespace qmm::ctl

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(qmm::ctl::kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  // As in qmm-server: Debian's Abseil records every Mutex acquisition (gRPC's included) in
  // a deadlock graph, which bench's callers would pay for on every request.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return qmm::ctl::Main(args);
}
