// End to end: the real qmm-server process on loopback, driven by the real qmmctl.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/file_io.h"
#include "client/nd_array.h"
#include "client/npy.h"
#include "client/random_data.h"
#include "client/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/server_fixture.h"
#include "tests/e2e/subprocess.h"
#include "tests/int4_checkpoint_data.h"

namespace qmm::e2e {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kServer[] = QMM_SERVER_PATH;
constexpr char kQmmctl[] = QMMCTL_PATH;

class EndToEndTest : public ServerFixture {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--backend=auto"};
  }

  // The bytes of `weight` times the activations of the .npy file `x_path`, through
  // qmmctl matmul --output.
  std::vector<uint8_t> ResultBytes(const std::string& weight, const std::string& x_path) {
    const std::string y_path = Path(weight + ".npy");
    Ok({"matmul", "--weight=" + weight, "--npy=" + x_path, "--output=" + y_path});
    absl::StatusOr<NdArray> y = ReadNpy(y_path);
    EXPECT_TRUE(y.ok()) << y.status();
    return y.ok() ? y->data : std::vector<uint8_t>{};
  }
};

constexpr int64_t kN = 192;
constexpr int64_t kK = 256;

TEST_F(EndToEndTest, InfoAndEmptyList) {
  const std::string info = Ok({"info"});
  EXPECT_THAT(info, HasSubstr("backend:            " + server_->backend()));
  EXPECT_THAT(info, HasSubstr("schemes:            fp16 bf16 w8a16 w4a16 w2a8"));
  EXPECT_THAT(info, HasSubstr("weights:            0"));
  const std::string ls = Ok({"ls"});
  EXPECT_THAT(ls, HasSubstr("NAME"));
  EXPECT_THAT(ls, Not(HasSubstr("fp16")));
}

// What a container probe runs: exit 0 while the server serves, 1 with the reason otherwise.
TEST_F(EndToEndTest, HealthExitsZeroOnlyWhileServing) {
  EXPECT_EQ(Ok({"health"}), "SERVING\n");
  EXPECT_THAT(Ok({"health", "--service=qmm.v1.Qmm"}), HasSubstr("qmm.v1.Qmm: SERVING"));
  const RunResult unknown = Qmmctl({"health", "--service=qmm.v1.Other"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, HasSubstr("qmmctl health: NOT_FOUND"));
  const RunResult extra = Qmmctl({"health", "now"});
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_THAT(extra.output, HasSubstr("unexpected argument 'now'"));
}

// qmmctl stats: each weight's requests, rows and launches since its upload, every API's.
TEST_F(EndToEndTest, StatsCountEachWeightsRequests) {
  const std::string n = absl::StrCat("--n=", kN), k = absl::StrCat("--k=", kK);
  Ok({"upload", "--name=used", "--scheme=w4a16", "--random", n, k, "--seed=3"});
  Ok({"upload", "--name=idle", "--scheme=w8a16", "--random", n, k, "--seed=4"});
  Ok({"matmul", "--weight=used", "--random", "--m=2", "--repeat=3"});
  Ok({"matmul", "--weight=used", "--random", "--m=3", "--repeat=2"});
  // Name, requests, failed, rows, launches: one request a launch, one after another.
  const std::regex used(
      R"(\nused +5 +0 +12 +5 +2\.40 +[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ +20)");
  const std::regex idle(R"(\nidle +0 +0 +0 +0 +0\.00 +0\.000 0\.000 0\.000 0\.000 0\.000 +never)");
  const std::string all = Ok({"stats"});
  EXPECT_TRUE(std::regex_search(all, used)) << all;
  EXPECT_TRUE(std::regex_search(all, idle)) << all;
  EXPECT_LT(all.find("\nidle"), all.find("\nused")) << all;  // by name
  const std::string one = Ok({"stats", "used"});
  EXPECT_TRUE(std::regex_search(one, used)) << one;
  EXPECT_THAT(one, Not(HasSubstr("idle")));
  const RunResult unknown = Qmmctl({"stats", "nope"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, HasSubstr("qmmctl stats: NOT_FOUND: no model or weight named"));
}

// One weight per scheme and per upload path, each multiplied and checked against the
// float64 reference of the random weight it came from (tolerance: DefaultTolerance in
// client/qmmctl/verify.h, printed by qmmctl).
TEST_F(EndToEndTest, EverySchemeAndUploadPathMatchesTheReference) {
  struct Case {
    std::string name;
    std::vector<std::string> upload;  // beyond --name and the source
    std::vector<std::string> source;
    std::vector<std::string> matmul;  // beyond --weight and --verify_seed
    uint64_t seed;
  };
  const std::string n = absl::StrCat("--n=", kN), k = absl::StrCat("--k=", kK);

  // A .npy weight and a .safetensors weight, written from the same random values that
  // --verify_seed regenerates.
  const std::vector<float> npy_values = RandomWeightValues(kN, kK, 31);
  const std::string npy_path = Path("weight.npy");
  ASSERT_TRUE(WriteNpy(npy_path, FromFloats(DType::kF32, {kN, kK}, npy_values)).ok());
  const std::vector<float> st_values = RandomWeightValues(kN, kK, 32);
  const std::string st_path = Path("model.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(st_path, {{"bias", FromFloats(DType::kF32, {kN}, std::vector<float>(kN, 1))},
                                 {"layers.0.weight", FromFloats(DType::kF32, {kN, kK}, st_values)}})
          .ok());
  const std::string out_path = Path("y.npy");

  const std::vector<Case> cases = {
      {"fp16", {"--scheme=fp16"}, {"--random", n, k, "--seed=11"}, {"--repeat=5"}, 11},
      {"bf16", {"--scheme=bf16"}, {"--random", n, k, "--seed=12"}, {"--dtype=bf16"}, 12},
      {"w8a16", {"--scheme=w8a16"}, {"--random", n, k, "--seed=13"}, {"--out_dtype=fp16"}, 13},
      {"w4a16-g128",
       {"--scheme=w4a16", "--group_size=128"},
       {"--random", n, k, "--seed=14"},
       {"--repeat=4", "--stream", "--m=3"},
       14},
      {"w4a16-row",
       {"--scheme=w4a16", "--group_size=0"},
       {"--random", n, k, "--seed=15"},
       {"--dtype=fp16", "--out_dtype=fp32"},
       15},
      {"w2a8", {"--scheme=w2a8"}, {"--random", n, k, "--seed=16"}, {"--m=5"}, 16},
      {"w4a16-zp",
       {"--scheme=w4a16", "--zero_points"},
       {"--random", n, k, "--seed=18"},
       {"--m=3"},
       18},
      {"w4a16-zp-row-local",
       {"--scheme=w4a16", "--group_size=0", "--zero_points", "--pack_locally"},
       {"--random", n, k, "--seed=19"},
       {"--stream", "--dtype=bf16"},
       19},
      {"w4a16-local",
       {"--scheme=w4a16", "--pack_locally"},
       {"--random", n, k, "--seed=17"},
       {"--output=" + out_path, "--m=2"},
       17},
      {"w8a16-npy", {"--scheme=w8a16"}, {"--npy=" + npy_path}, {"--m=7"}, 31},
      {"w2a8-safetensors",
       {"--scheme=w2a8"},
       {"--safetensors=" + st_path, "--tensor=layers.0.weight"},
       {"--m=1", "--stream"},
       32},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"upload", "--name=" + c.name};
    args.insert(args.end(), c.upload.begin(), c.upload.end());
    args.insert(args.end(), c.source.begin(), c.source.end());
    EXPECT_THAT(Ok(args), HasSubstr("uploaded " + c.name + ": scheme="));
  }

  const std::string ls = Ok({"ls"});
  for (const Case& c : cases) EXPECT_THAT(ls, HasSubstr(c.name + " ")) << ls;
  // The ZP column: a weight with zero points, and one without.
  EXPECT_THAT(ls, ContainsRegex("w4a16-zp +w4a16 +192 +256 +128 +yes ")) << ls;
  EXPECT_THAT(ls, ContainsRegex("w4a16-g128 +w4a16 +192 +256 +128 +- ")) << ls;
  EXPECT_THAT(Ok({"info"}), HasSubstr(absl::StrCat("weights:            ", cases.size())));

  for (const Case& c : cases) {
    std::vector<std::string> args = {"matmul", "--weight=" + c.name, "--random",
                                     absl::StrCat("--verify_seed=", c.seed)};
    args.insert(args.end(), c.matmul.begin(), c.matmul.end());
    const std::string out = Ok(args);
    EXPECT_THAT(out, HasSubstr("matmul " + c.name + ": x [")) << out;
    EXPECT_THAT(out, HasSubstr("latency over")) << out;
    EXPECT_THAT(out, HasSubstr(": PASS")) << out;
  }

  // The .npy written by --output holds the [m, N] result.
  absl::StatusOr<NdArray> y = ReadNpy(out_path);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape, (std::vector<int64_t>{2, kN}));
  EXPECT_EQ(y->type, ElementType::kF32);

  // Activations from a .npy file, and the flags the weight was uploaded with, checked.
  const std::string x_path = Path("x.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF16, {2, kK}, RandomActivationValues(2, kK, 5))).ok());
  const std::string from_npy = Ok({"matmul", "--weight=w4a16-g128", "--npy=" + x_path,
                                   "--verify_seed=14", "--scheme=w4a16", n, k, "--group_size=128"});
  EXPECT_THAT(from_npy, HasSubstr("x [2, 256] fp16 -> y [2, 192] fp16"));
  EXPECT_THAT(from_npy, HasSubstr(": PASS"));
}

// GPTQ and compressed-tensors layers, read from a .safetensors checkpoint (and GPTQ's
// tensors from a plain file), must compute exactly as the same int4 values and scales
// uploaded in the canonical packed form.
TEST_F(EndToEndTest, Int4CheckpointsComputeAsTheirCanonicalForm) {
  const testing::Int4Weight gptq_w = testing::RandomInt4Weight(kN, kK, 128, DType::kF16, 41);
  const testing::Int4CheckpointTensors gptq = testing::GptqTensors(gptq_w, DType::kF16, 7);
  const testing::Int4Weight pq_w = testing::RandomInt4Weight(kN, kK, 0, DType::kBF16, 42);
  const testing::Int4CheckpointTensors pq = testing::PackQuantizedTensors(pq_w, DType::kBF16);
  const auto tensor = [](ElementType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    return NdArray{type, std::move(shape), std::move(data)};
  };
  std::vector<uint8_t> weight_shape;
  testing::AppendWord(&weight_shape, kN);
  testing::AppendWord(&weight_shape, kK);
  const std::string up = "model.layers.0.mlp.up_proj", down = "model.layers.0.mlp.down_proj";
  const std::string asym = "model.layers.1.mlp.down_proj";
  const std::string checkpoint = Path("int4.safetensors");
  ASSERT_TRUE(WriteSafetensors(
                  checkpoint,
                  {{up + ".qweight", tensor(ElementType::kI32, {kK / 8, kN}, gptq.codes)},
                   {up + ".qzeros", tensor(ElementType::kI32, {kK / 128, kN / 8}, gptq.zeros)},
                   {up + ".scales", tensor(ElementType::kF16, {kK / 128, kN}, gptq.scales)},
                   {up + ".g_idx", tensor(ElementType::kI32, {kK}, gptq.g_idx)},
                   {down + ".weight_packed", tensor(ElementType::kI32, {kN, kK / 8}, pq.codes)},
                   {down + ".weight_scale", tensor(ElementType::kBF16, {kN, 1}, pq.scales)},
                   {down + ".weight_shape", tensor(ElementType::kI32, {2}, weight_shape)},
                   {asym + ".weight_packed", tensor(ElementType::kI32, {kN, kK / 8}, pq.codes)},
                   {asym + ".weight_scale", tensor(ElementType::kBF16, {kN, 1}, pq.scales)},
                   {asym + ".weight_zero_point",
                    tensor(ElementType::kI32, {kN / 8, 1}, std::vector<uint8_t>(kN / 2, 0x88))}})
                  .ok());
  const std::string gptq_file = Path("gptq.bin"), gptq_canonical = Path("gptq-canonical.bin");
  const std::string pq_canonical = Path("pq-canonical.bin");
  ASSERT_TRUE(WriteFile(gptq_file, gptq.Payload(/*with_g_idx=*/false)).ok());
  ASSERT_TRUE(WriteFile(gptq_canonical, testing::CanonicalInt4(gptq_w)).ok());
  ASSERT_TRUE(WriteFile(pq_canonical, testing::CanonicalInt4(pq_w)).ok());
  const std::string n = absl::StrCat("--n=", kN), k = absl::StrCat("--k=", kK);

  EXPECT_THAT(Ok({"upload", "--name=gptq", "--scheme=w4a16", "--safetensors=" + checkpoint,
                  "--tensor=" + up, "--encoding=gptq"}),
              HasSubstr("group_size=128 packed_bytes=25344"));
  EXPECT_THAT(Ok({"upload", "--name=gptq-file", "--scheme=w4a16", "--packed=" + gptq_file, n, k,
                  "--encoding=gptq"}),
              HasSubstr("GPTQ payload"));
  Ok({"upload", "--name=gptq-canonical", "--scheme=w4a16", "--packed=" + gptq_canonical, n, k});
  EXPECT_THAT(Ok({"upload", "--name=pq", "--scheme=w4a16", "--safetensors=" + checkpoint,
                  "--tensor=" + down + ".weight_packed", "--encoding=pack_quantized"}),
              HasSubstr("group_size=0"));
  Ok({"upload", "--name=pq-canonical", "--scheme=w4a16", "--packed=" + pq_canonical, n, k,
      "--group_size=0"});

  const std::string x_path = Path("x.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF16, {3, kK}, RandomActivationValues(3, kK, 6))).ok());
  const auto result = [&](const std::string& weight) { return ResultBytes(weight, x_path); };
  const std::vector<uint8_t> gptq_y = result("gptq-canonical");
  ASSERT_EQ(gptq_y.size(), 3u * kN * 2);
  EXPECT_EQ(result("gptq"), gptq_y);
  EXPECT_EQ(result("gptq-file"), gptq_y);
  EXPECT_EQ(result("pq"), result("pq-canonical"));

  // Every layer of a file at once, each named --name + its layer's name: the GPTQ one;
  // the pack-quantized ones, the asymmetric one with its zero points (all 0 here, so it
  // computes as the symmetric one).
  EXPECT_THAT(Ok({"upload", "--name=all/", "--scheme=w4a16", "--safetensors=" + checkpoint,
                  "--encoding=gptq"}),
              HasSubstr("uploaded 1 layers of"));
  const std::string all_y = Path("all.npy");
  Ok({"matmul", "--weight=all/" + up, "--npy=" + x_path, "--output=" + all_y});
  absl::StatusOr<NdArray> y = ReadNpy(all_y);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data, gptq_y);
  const std::string every =
      Ok({"upload", "--scheme=w4a16", "--safetensors=" + checkpoint, "--encoding=pack_quantized"});
  EXPECT_THAT(every, HasSubstr("uploaded " + down + ": scheme=w4a16")) << every;
  EXPECT_THAT(every, HasSubstr("uploaded " + asym +
                               ": scheme=w4a16 n=192 k=256 group_size=0 "
                               "zero_points packed_bytes=25152"))
      << every;
  EXPECT_EQ(result(asym), result("pq-canonical"));

  // What the client refuses (a group size the file contradicts) and what the server does
  // (a "gptq_v2" reading of a "gptq" layer's zero points).
  RunResult r = Qmmctl({"upload", "--name=g0", "--scheme=w4a16", "--safetensors=" + checkpoint,
                        "--tensor=" + up, "--encoding=gptq", "--group_size=0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("the checkpoint's group size is 128, not --group_size=0"))
      << r.output;
  r = Qmmctl({"upload", "--name=v2", "--scheme=w4a16", "--safetensors=" + checkpoint,
              "--tensor=" + up, "--encoding=gptq_v2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT: qzeros: group 0, column 0 has zero point 7"))
      << r.output;
  EXPECT_THAT(Ok({"ls"}), Not(HasSubstr("v2 "))) << "a rejected upload left a weight";
}

// Asymmetric layers: AWQ's from a .safetensors checkpoint, and GPTQ's (sym=False) with
// --zero_points, compute exactly as the canonical form with zero points.
TEST_F(EndToEndTest, AsymmetricInt4CheckpointsComputeAsTheirCanonicalForm) {
  const testing::Int4Weight awq_w =
      testing::WithZeroPoints(testing::RandomInt4Weight(kN, kK, 128, DType::kF16, 43), -8, 7, 44);
  const testing::Int4CheckpointTensors awq = testing::AwqTensors(awq_w, DType::kF16);
  const testing::Int4Weight gptq_w =
      testing::WithZeroPoints(testing::RandomInt4Weight(kN, kK, 0, DType::kF16, 45), -7, 8, 46);
  const testing::Int4CheckpointTensors gptq = testing::GptqTensors(gptq_w, DType::kF16, 7);
  const auto tensor = [](ElementType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    return NdArray{type, std::move(shape), std::move(data)};
  };
  const std::string layer = "model.layers.0.self_attn.o_proj";
  const std::string checkpoint = Path("awq.safetensors");
  ASSERT_TRUE(WriteSafetensors(
                  checkpoint,
                  {{layer + ".qweight", tensor(ElementType::kI32, {kK, kN / 8}, awq.codes)},
                   {layer + ".qzeros", tensor(ElementType::kI32, {kK / 128, kN / 8}, awq.zeros)},
                   {layer + ".scales", tensor(ElementType::kF16, {kK / 128, kN}, awq.scales)}})
                  .ok());
  const std::string awq_canonical = Path("awq-canonical.bin"), gptq_file = Path("gptq-asym.bin");
  const std::string gptq_canonical = Path("gptq-asym-canonical.bin");
  ASSERT_TRUE(WriteFile(awq_canonical, testing::CanonicalInt4(awq_w)).ok());
  ASSERT_TRUE(WriteFile(gptq_file, gptq.Payload(/*with_g_idx=*/false)).ok());
  ASSERT_TRUE(WriteFile(gptq_canonical, testing::CanonicalInt4(gptq_w)).ok());
  const std::string n = absl::StrCat("--n=", kN), k = absl::StrCat("--k=", kK);

  // packed_bytes: codes, fp16 scales and int8 zero points.
  EXPECT_THAT(Ok({"upload", "--name=awq-", "--scheme=w4a16", "--safetensors=" + checkpoint,
                  "--encoding=awq"}),
              HasSubstr("group_size=128 zero_points packed_bytes=25728"));
  Ok({"upload", "--name=awq-canonical", "--scheme=w4a16", "--packed=" + awq_canonical, n, k,
      "--zero_points"});
  EXPECT_THAT(Ok({"upload", "--name=gptq-asym", "--scheme=w4a16", "--packed=" + gptq_file, n, k,
                  "--encoding=gptq", "--group_size=0", "--zero_points"}),
              HasSubstr("GPTQ payload"));
  Ok({"upload", "--name=gptq-asym-canonical", "--scheme=w4a16", "--packed=" + gptq_canonical, n, k,
      "--group_size=0", "--zero_points"});

  const std::string x_path = Path("x.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF16, {3, kK}, RandomActivationValues(3, kK, 7))).ok());
  const auto result = [&](const std::string& weight) { return ResultBytes(weight, x_path); };
  const std::vector<uint8_t> awq_y = result("awq-canonical");
  ASSERT_EQ(awq_y.size(), 3u * kN * 2);
  EXPECT_EQ(result("awq-" + layer), awq_y);
  EXPECT_EQ(result("gptq-asym"), result("gptq-asym-canonical"));

  // The same GPTQ layer without --zero_points is a symmetric one that is not: refused.
  const RunResult r = Qmmctl({"upload", "--name=gptq-sym", "--scheme=w4a16",
                              "--packed=" + gptq_file, n, k, "--encoding=gptq", "--group_size=0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("one quantized with sym=False uploads with zero_points set"))
      << r.output;
}

// Layers quantized with activation order (GPTQ's desc_act): from a .safetensors checkpoint
// (its g_idx says so), as a GPTQ payload with --act_order, and in the canonical form with its
// order; all three compute alike.
TEST_F(EndToEndTest, ActOrderCheckpointsComputeAsTheirCanonicalForm) {
  const testing::Int4Weight w =
      testing::WithActOrder(testing::RandomInt4Weight(kN, kK, 128, DType::kF16, 47), 48);
  const testing::Int4CheckpointTensors gptq = testing::GptqTensors(w, DType::kF16, 7);
  const auto tensor = [](ElementType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    return NdArray{type, std::move(shape), std::move(data)};
  };
  const std::string layer = "model.layers.0.mlp.down_proj";
  const std::string checkpoint = Path("gptq-act.safetensors");
  ASSERT_TRUE(WriteSafetensors(
                  checkpoint,
                  {{layer + ".qweight", tensor(ElementType::kI32, {kK / 8, kN}, gptq.codes)},
                   {layer + ".qzeros", tensor(ElementType::kI32, {kK / 128, kN / 8}, gptq.zeros)},
                   {layer + ".scales", tensor(ElementType::kF16, {kK / 128, kN}, gptq.scales)},
                   {layer + ".g_idx", tensor(ElementType::kI32, {kK}, gptq.g_idx)}})
                  .ok());
  const std::string payload = Path("gptq-act.bin"), canonical = Path("gptq-act-canonical.bin");
  ASSERT_TRUE(WriteFile(payload, gptq.Payload(/*with_g_idx=*/true)).ok());
  ASSERT_TRUE(WriteFile(canonical, testing::CanonicalInt4(w)).ok());
  const std::string n = absl::StrCat("--n=", kN), k = absl::StrCat("--k=", kK);

  // packed_bytes: codes, fp16 scales and the order (K int32).
  EXPECT_THAT(Ok({"upload", "--name=act-", "--scheme=w4a16", "--safetensors=" + checkpoint,
                  "--encoding=gptq"}),
              HasSubstr("group_size=128 act_order packed_bytes=26368"));
  Ok({"upload", "--name=act-gptq", "--scheme=w4a16", "--packed=" + payload, n, k, "--encoding=gptq",
      "--act_order"});
  Ok({"upload", "--name=act-canonical", "--scheme=w4a16", "--packed=" + canonical, n, k,
      "--act_order"});
  EXPECT_THAT(Ok({"ls"}), ContainsRegex("act-canonical +w4a16 +192 +256 +128 +- +yes "));

  const std::string x_path = Path("x-act.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF16, {3, kK}, RandomActivationValues(3, kK, 9))).ok());
  const std::vector<uint8_t> y = ResultBytes("act-canonical", x_path);
  ASSERT_EQ(y.size(), 3u * kN * 2);
  EXPECT_EQ(ResultBytes("act-" + layer, x_path), y);
  EXPECT_EQ(ResultBytes("act-gptq", x_path), y);

  // The payload without --act_order: its g_idx is not k / 128.
  const RunResult r = Qmmctl({"upload", "--name=act-refused", "--scheme=w4a16",
                              "--packed=" + payload, n, k, "--encoding=gptq"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("unless the weight is uploaded with act_order set")) << r.output;
}

// A whole checkpoint directory (GPTQ, sym=False, desc_act, in two shards with their index
// and a float tensor besides): --checkpoint uploads every int4 layer as its config.json
// says, each computing as its canonical form with zero points in activation order.
TEST_F(EndToEndTest, CheckpointDirectoryUploadsEveryLayerAsItsConfigSays) {
  const auto tensor = [](ElementType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    return NdArray{type, std::move(shape), std::move(data)};
  };
  const std::string dir = Path("llama-gptq");
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const auto write_text = [&](const std::string& name, const std::string& text) {
    ASSERT_TRUE(WriteFile(dir + "/" + name, std::vector<uint8_t>(text.begin(), text.end())).ok());
  };
  write_text("config.json", R"({"architectures": ["LlamaForCausalLM"], "quantization_config":
      {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": false, "desc_act": true}})");
  const std::vector<std::string> layers = {"model.layers.0.mlp.up_proj",
                                           "model.layers.0.mlp.down_proj"};
  std::vector<testing::Int4Weight> weights;
  std::string index = R"({"weight_map": {)";
  for (size_t i = 0; i < layers.size(); ++i) {
    weights.push_back(testing::WithActOrder(
        testing::WithZeroPoints(
            testing::RandomInt4Weight(kN, kK, 128, DType::kF16, static_cast<uint32_t>(50 + i)), -7,
            8, static_cast<uint32_t>(60 + i)),
        static_cast<uint32_t>(70 + i)));
    const testing::Int4CheckpointTensors t = testing::GptqTensors(weights[i], DType::kF16, 7);
    const std::string l = layers[i];
    const std::string shard = absl::StrCat("model-0000", i + 1, "-of-00002.safetensors");
    std::vector<std::pair<std::string, NdArray>> tensors = {
        {l + ".qweight", tensor(ElementType::kI32, {kK / 8, kN}, t.codes)},
        {l + ".qzeros", tensor(ElementType::kI32, {kK / 128, kN / 8}, t.zeros)},
        {l + ".scales", tensor(ElementType::kF16, {kK / 128, kN}, t.scales)},
        {l + ".g_idx", tensor(ElementType::kI32, {kK}, t.g_idx)}};
    if (i == 0) {
      tensors.emplace_back("model.embed_tokens.weight",
                           tensor(ElementType::kF16, {4, kK}, std::vector<uint8_t>(8 * kK, 0x3c)));
    }
    ASSERT_TRUE(WriteSafetensors(dir + "/" + shard, tensors).ok());
    for (const auto& [name, array] : tensors) {
      absl::StrAppend(&index, index.back() == '{' ? "" : ", ", "\"", name, "\": \"", shard, "\"");
    }
    const std::string canonical = Path(absl::StrCat("ck-canonical-", i, ".bin"));
    ASSERT_TRUE(WriteFile(canonical, testing::CanonicalInt4(weights[i])).ok());
    Ok({"upload", absl::StrCat("--name=ck-canonical-", i), "--scheme=w4a16",
        "--packed=" + canonical, absl::StrCat("--n=", kN), absl::StrCat("--k=", kK),
        "--zero_points", "--act_order"});
  }
  write_text("model.safetensors.index.json", index + "}}");

  const std::string out = Ok({"upload", "--name=ck.", "--checkpoint=" + dir});
  EXPECT_THAT(out, HasSubstr("config.json: GPTQ (gptq, sym=False, group_size 128, desc_act)"));
  EXPECT_THAT(out, HasSubstr("uploaded ck." + layers[1] +
                             ": scheme=w4a16 n=192 k=256 "
                             "group_size=128 zero_points act_order"));
  EXPECT_THAT(out, HasSubstr("uploaded 2 layers of " + dir)) << out;
  // One layer by name, named --name.
  EXPECT_THAT(Ok({"upload", "--name=one", "--checkpoint=" + dir, "--tensor=" + layers[1]}),
              HasSubstr("uploaded 1 layers of"));

  const std::string x_path = Path("x-ck.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF16, {2, kK}, RandomActivationValues(2, kK, 11))).ok());
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<uint8_t> y = ResultBytes(absl::StrCat("ck-canonical-", i), x_path);
    ASSERT_EQ(y.size(), 2u * kN * 2);
    EXPECT_EQ(ResultBytes("ck." + layers[i], x_path), y) << layers[i];
  }
  EXPECT_EQ(ResultBytes("one", x_path), ResultBytes("ck-canonical-1", x_path));

  // The settings are the checkpoint's: restating them is refused, and so is what it holds
  // that qmm cannot (8-bit layers), before anything is sent.
  RunResult r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir, "--zero_points"});
  EXPECT_EQ(r.exit_code, 2);  // a usage error
  EXPECT_THAT(r.output, HasSubstr("--checkpoint reads the encoding, group size, zero points"));
  r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir, "--tensor=model.layers.9.mlp"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("no layer 'model.layers.9.mlp' in its 2 .safetensors files"));
  write_text("config.json", R"({"quantization_config": {"quant_method": "gptq", "bits": 8,
                                                         "group_size": 128}})");
  r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("bits = 8: only 4-bit GPTQ layers are taken")) << r.output;
  EXPECT_THAT(Ok({"ls"}), Not(HasSubstr("x/"))) << "a refused upload left a weight";
}

// A BitNet b1.58 checkpoint directory as transformers stores AutoBitLinear layers
// (microsoft/bitnet-b1.58-2B-4T: uint8 [N/4, K] planar along N, a bf16 weight_scale of
// one value that multiplies): --checkpoint and --safetensors --scale_multiplies upload
// layers that compute exactly as their canonical W2A8 form with s = scale; without
// --scale_multiplies the scale divides (BitLinear), and computes otherwise.
TEST_F(EndToEndTest, BitnetCheckpointUploadsAsItsConfigSays) {
  const std::string dir = Path("bitnet");
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const std::string config = R"({"architectures": ["BitNetForCausalLM"], "quantization_config":
      {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "offline"}})";
  ASSERT_TRUE(
      WriteFile(dir + "/config.json", std::vector<uint8_t>(config.begin(), config.end())).ok());
  const std::vector<std::string> layers = {"model.layers.0.mlp.down_proj",
                                           "model.layers.0.mlp.up_proj"};
  const float scales[] = {0.0390625f, 1.625f};  // exact in bf16
  std::vector<std::pair<std::string, NdArray>> tensors = {
      {"model.norm.weight", FromFloats(DType::kBF16, {kK}, std::vector<float>(kK, 1.0f))}};
  std::mt19937 rng(77);
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<int> t(kN * kK);
    for (int& v : t) v = static_cast<int>(rng() % 3) - 1;
    // Hugging Face's packing: byte [r][k] holds rows r, r + N/4, r + N/2, r + 3N/4.
    std::vector<uint8_t> planar(kN / 4 * kK, 0);
    for (int64_t n = 0; n < kN; ++n) {
      for (int64_t k = 0; k < kK; ++k) {
        planar[(n % (kN / 4)) * kK + k] |=
            static_cast<uint8_t>((t[n * kK + k] + 1) << (2 * (n / (kN / 4))));
      }
    }
    tensors.emplace_back(layers[i] + ".weight", NdArray{ElementType::kU8, {kN / 4, kK}, planar});
    tensors.emplace_back(layers[i] + ".weight_scale",
                         FromFloats(DType::kBF16, {1}, {&scales[i], 1}));
    // The canonical W2A8 form (qmm.proto): codes t + 1 row-major, k = 4b + j in bits 2j.., then
    // N fp32 scales, here the multiplying scale itself.
    std::vector<uint8_t> canonical(kN * kK / 4 + 4 * kN, 0);
    for (int64_t n = 0; n < kN; ++n) {
      for (int64_t k = 0; k < kK; ++k) {
        canonical[n * kK / 4 + k / 4] |= static_cast<uint8_t>((t[n * kK + k] + 1) << (2 * (k % 4)));
      }
      std::memcpy(canonical.data() + kN * kK / 4 + 4 * n, &scales[i], 4);
    }
    const std::string path = Path(absl::StrCat("bitnet-canonical-", i, ".bin"));
    ASSERT_TRUE(WriteFile(path, canonical).ok());
    Ok({"upload", absl::StrCat("--name=bitnet-canonical-", i), "--scheme=w2a8", "--packed=" + path,
        absl::StrCat("--n=", kN), absl::StrCat("--k=", kK)});
  }
  const std::string checkpoint = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(checkpoint, tensors).ok());

  const std::string out = Ok({"upload", "--name=bn.", "--checkpoint=" + dir});
  EXPECT_THAT(out, HasSubstr("config.json: BitNet b1.58 (autobitlinear: the weight scale "
                             "multiplies)"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("uploaded bn.", layers[0], ": scheme=w2a8 n=192 k=256")));
  EXPECT_THAT(out, HasSubstr("BitNet (Hugging Face), scales multiplying payload"));
  EXPECT_THAT(out, HasSubstr("uploaded 2 layers of " + dir)) << out;
  // One file's layer, its scale's use given by the flag.
  Ok({"upload", "--name=one-multiplied", "--scheme=w2a8", "--safetensors=" + checkpoint,
      "--tensor=" + layers[1], "--encoding=bitnet_hf", "--scale_multiplies"});
  Ok({"upload", "--name=one-divided", "--scheme=w2a8", "--safetensors=" + checkpoint,
      "--tensor=" + layers[1] + ".weight", "--encoding=bitnet_hf"});

  const std::string x_path = Path("x-bitnet.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF32, {3, kK}, RandomActivationValues(3, kK, 12))).ok());
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<uint8_t> y = ResultBytes(absl::StrCat("bitnet-canonical-", i), x_path);
    ASSERT_EQ(y.size(), 3u * kN * 4);
    EXPECT_EQ(ResultBytes("bn." + layers[i], x_path), y) << layers[i];
  }
  EXPECT_EQ(ResultBytes("one-multiplied", x_path), ResultBytes("bitnet-canonical-1", x_path));
  EXPECT_NE(ResultBytes("one-divided", x_path), ResultBytes("bitnet-canonical-1", x_path));

  // The settings are the checkpoint's; it holds w2a8 layers; online ones are refused.
  RunResult r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir, "--scale_multiplies"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--scale_multiplies"));
  r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir, "--scheme=w4a16"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("config.json makes the layers w2a8, not --scheme=w4a16"));
  const std::string online = R"({"quantization_config": {"quant_method": "bitnet",
      "linear_class": "autobitlinear", "quantization_mode": "online"}})";
  ASSERT_TRUE(
      WriteFile(dir + "/config.json", std::vector<uint8_t>(online.begin(), online.end())).ok());
  r = Qmmctl({"upload", "--name=x/", "--checkpoint=" + dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("quantization_mode = \"online\": only offline checkpoints"));
  EXPECT_THAT(Ok({"ls"}), Not(HasSubstr("x/"))) << "a refused upload left a weight";
}

TEST_F(EndToEndTest, VerificationFailsOnTheWrongWeight) {
  Ok({"upload", "--name=w", "--scheme=w8a16", "--random", "--n=64", "--k=128", "--seed=1"});
  const RunResult r = Qmmctl({"matmul", "--weight=w", "--random", "--verify_seed=2"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(": FAIL"));
}

TEST_F(EndToEndTest, ErrorsCarryTheirCodeAndMessage) {
  RunResult r = Qmmctl({"matmul", "--weight=nope", "--random"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(r.output, HasSubstr("nope"));

  r = Qmmctl({"rm", "nope"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("NOT_FOUND"));

  Ok({"upload", "--name=dup", "--scheme=fp16", "--random", "--n=8", "--k=64"});
  r = Qmmctl({"upload", "--name=dup", "--scheme=fp16", "--random", "--n=8", "--k=64"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("ALREADY_EXISTS"));

  // K not a multiple of 128 for W4A16: the server's shape check.
  r = Qmmctl({"upload", "--name=bad", "--scheme=w4a16", "--random", "--n=8", "--k=100"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT"));

  // Activations whose K does not match the weight's.
  const std::string x_path = Path("bad_x.npy");
  ASSERT_TRUE(
      WriteNpy(x_path, FromFloats(DType::kF32, {1, 32}, RandomActivationValues(1, 32, 1))).ok());
  r = Qmmctl({"matmul", "--weight=dup", "--npy=" + x_path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT"));

  // A malformed file is reported before anything is sent.
  const std::string junk = Path("junk.npy");
  ASSERT_TRUE(WriteNpy(junk, FromFloats(DType::kF32, {3}, std::vector<float>{1, 2, 3})).ok());
  r = Qmmctl({"upload", "--name=junk", "--scheme=fp16", "--npy=" + junk});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("1 dimensions; a weight is 2-D"));

  r = Qmmctl({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown command 'frobnicate'"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("exactly one of --random"));
  // What --encoding and --scale_dtype apply to.
  r = Qmmctl(
      {"upload", "--name=x", "--scheme=w4a16", "--random", "--n=8", "--k=128", "--encoding=gptq"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--encoding applies to --packed and --safetensors sources"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16", "--safetensors=" + junk});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--safetensors needs --tensor (or a checkpoint --encoding)"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16", "--safetensors=" + junk, "--tensor=t",
              "--encoding=bitnet_liger"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output,
              HasSubstr("--safetensors takes --encoding=gptq, gptq_v2, awq, pack_quantized or "
                        "bitnet_hf"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16", "--safetensors=" + junk, "--encoding=gptq",
              "--scale_multiplies"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--scale_multiplies applies to --encoding=bitnet_hf"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16", "--safetensors=" + junk, "--encoding=gptq",
              "--scale_dtype=bf16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--scale_dtype applies to --packed files"));
  r = Qmmctl({"upload", "--name=x", "--scheme=w4a16", "--packed=" + junk, "--n=8", "--k=128",
              "--encoding=gptq4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--encoding = 'gptq4' is not one of packed, bitnet_hf"));

  // The server is still serving, and nothing failed left a weight behind.
  const std::string ls = Ok({"ls"});
  EXPECT_THAT(ls, HasSubstr("dup "));
  EXPECT_THAT(ls, Not(HasSubstr("bad ")));
  EXPECT_THAT(ls, Not(HasSubstr("junk ")));
}

TEST_F(EndToEndTest, RmRemovesTheWeight) {
  Ok({"upload", "--name=gone", "--scheme=w2a8", "--random", "--n=16", "--k=128"});
  EXPECT_THAT(Ok({"rm", "gone"}), HasSubstr("deleted gone"));
  EXPECT_THAT(Ok({"ls"}), Not(HasSubstr("gone")));
  const RunResult r = Qmmctl({"matmul", "--weight=gone", "--random"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("NOT_FOUND"));
}

TEST(EndToEndNoServerTest, UnreachableServerIsUnavailable) {
  absl::StatusOr<RunResult> r = RunProcess(
      kQmmctl, {"--server=127.0.0.1:1", "--connect_timeout=1s", "info"}, ::testing::TempDir());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->output, HasSubstr("UNAVAILABLE: cannot connect to 127.0.0.1:1 within 1s"));
}

TEST(EndToEndNoServerTest, HealthOfNoServerIsUnavailable) {
  absl::StatusOr<RunResult> r = RunProcess(
      kQmmctl, {"--server=127.0.0.1:1", "--connect_timeout=1s", "health"}, ::testing::TempDir());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->output, HasSubstr("qmmctl health: UNAVAILABLE"));
}

TEST(EndToEndNoServerTest, SigintAlsoStopsTheServerCleanly) {
  absl::StatusOr<ServerProcess> server = ServerProcess::Start(
      kServer, {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--backend=cpu"},
      ::testing::TempDir(), absl::Seconds(60));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->backend(), "cpu");
  absl::StatusOr<int> code = server->Stop(SIGINT, absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << server->Log();
}

}  // namespace
}  // namespace qmm::e2e
