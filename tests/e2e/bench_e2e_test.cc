// End to end: `qmmctl bench` against the real qmm-server on loopback. Every result is
// verified, the JSON report agrees with itself and with the server's batch statistics,
// with --max_batch_rows=1 the server runs every request alone, the Open Inference
// Protocol's calls (--protocol=oip) are batched and right as qmm.v1's are, and one
// stream's requests sent ahead (--inflight) share launches, and so do callers through the
// local transport (--local), one slot a caller or several in flight each. Then the same qmmctl
// bench against qmm-echo-server, the transport by itself: every call answered, no batching
// reported.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/subprocess.h"

namespace qmm::e2e {
namespace {

constexpr char kServer[] = QMM_SERVER_PATH;
constexpr char kQmmctl[] = QMMCTL_PATH;

class BenchEndToEndTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    scratch_ = ::testing::TempDir();
    flags.insert(flags.begin(), {"--listen=127.0.0.1:0", "--backend=cpu", "--metrics_listen="});
    absl::StatusOr<ServerProcess> server =
        ServerProcess::Start(kServer, flags, scratch_, absl::Seconds(60));
    ASSERT_TRUE(server.ok()) << server.status();
    server_.emplace(*std::move(server));
    Ok({"upload", "--name=w", "--scheme=w4a16", "--random", "--n=256", "--k=512", "--seed=3"});
  }

  void TearDown() override {
    std::remove(json_.c_str());
    if (!server_) return;
    absl::StatusOr<int> code = server_->Stop(SIGTERM, absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << server_->Log();
    EXPECT_EQ(*code, 0) << server_->Log();
  }

  std::string Ok(std::vector<std::string> args) {
    const std::string command = absl::StrJoin(args, " ");
    args.insert(args.begin(), "--server=" + server_->address());
    absl::StatusOr<RunResult> r = RunProcess(kQmmctl, args, scratch_);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << "qmmctl " << command << "\n"
                               << r->output << "\nserver log:\n"
                               << server_->Log();
    return r->output;
  }

  // Runs a verified bench of `target` (a weight or model and its seeds) and returns its
  // JSON report.
  nlohmann::json Bench(std::vector<std::string> flags,
                       const std::vector<std::string>& target = {"--weight=w", "--verify_seed=3"}) {
    json_ = absl::StrCat(scratch_, "/bench_e2e_", getpid(), ".json");
    flags.insert(flags.end(), {"bench", "--verify", "--dtype=fp16", "--json=" + json_});
    flags.insert(flags.end(), target.begin(), target.end());
    const std::string output = Ok(flags);
    EXPECT_NE(output.find("0 mismatches"), std::string::npos) << output;
    std::ifstream in(json_);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  // A file in the scratch folder holding `text`; its path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(scratch_, "/", getpid(), "_", name);
    std::ofstream(path) << text;
    return path;
  }

  std::string scratch_;
  std::string json_;
  std::optional<ServerProcess> server_;
};

TEST_F(BenchEndToEndTest, ConcurrentCallersAreBatchedAndEveryResultIsRight) {
  Start({"--workers=1", "--cpu_threads=1"});
  const nlohmann::json j =
      Bench({"--concurrency=16", "--requests=400", "--rows=2", "--stream", "--warmup=1"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["ok"], 400);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["verified"], 400);
  EXPECT_EQ(j["mismatches"], 0);
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["setup"]["backend"], "cpu");
  const nlohmann::json& b = j["server_batching"];
  EXPECT_EQ(b["requests"], 400);
  EXPECT_EQ(b["rows"], 800);
  // Sixteen callers and one worker: while one launch runs the others' requests queue.
  EXPECT_LT(b["launches"].get<int64_t>(), 400);
  EXPECT_GT(b["multi_request_launches"].get<int64_t>(), 0);
  // The weight's own statistics say the same, and where the time went.
  const nlohmann::json& w = j["server_model"];
  EXPECT_EQ(w["requests"], 400);
  EXPECT_EQ(w["rows"], 800);
  EXPECT_EQ(w["failed"], 0);
  EXPECT_EQ(w["launches"], b["launches"]);
  EXPECT_GT(w["mean_ms"]["compute_infer"].get<double>(), 0);
  EXPECT_GT(w["mean_ms"]["total"].get<double>(), w["mean_ms"]["compute_infer"].get<double>());
}

TEST_F(BenchEndToEndTest, MaxBatchRowsOneRunsEveryRequestAlone) {
  Start({"--workers=1", "--cpu_threads=1", "--max_batch_rows=1"});
  const nlohmann::json j = Bench({"--concurrency=8", "--duration=0.5s", "--rows=1"});
  ASSERT_TRUE(j.is_object());
  EXPECT_GT(j["ok"].get<int64_t>(), 0);
  EXPECT_EQ(j["errors"], 0);
  const nlohmann::json& b = j["server_batching"];
  EXPECT_EQ(b["max_batch_rows"], 1);
  EXPECT_EQ(b["launches"], j["ok"]);
  EXPECT_EQ(b["multi_request_launches"], 0);
}

TEST_F(BenchEndToEndTest, LocalTransportCallersAreBatchedAndRight) {
  const std::string socket = absl::StrCat(::testing::TempDir(), "bench_local_", getpid(), ".sock");
  Start({"--workers=1", "--cpu_threads=1", "--local_listen=" + socket});
  // One slot a caller, polling or not; then callers with several requests in flight each.
  for (const std::vector<std::string>& callers :
       {std::vector<std::string>{"--concurrency=16", "--local_spin_us=0"},
        {"--concurrency=16", "--local_spin_us=200"},
        {"--concurrency=3", "--inflight=5"}}) {
    std::vector<std::string> args = {"--requests=400", "--rows=2", "--channels=3",
                                     "--local=" + socket};
    args.insert(args.end(), callers.begin(), callers.end());
    const nlohmann::json j = Bench(args);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["ok"], 400);
    EXPECT_EQ(j["errors"], 0);
    EXPECT_EQ(j["mismatches"], 0);
    EXPECT_EQ(j["setup"]["protocol"], "local");
    EXPECT_EQ(j["setup"]["inflight"], callers[0] == "--concurrency=3" ? 5 : 1);
    const nlohmann::json& b = j["server_batching"];
    EXPECT_EQ(b["requests"], 400);
    EXPECT_GT(b["multi_request_launches"].get<int64_t>(), 0);
  }
  // The local transport has no streams.
  const std::string address = "--server=" + server_->address();
  absl::StatusOr<RunResult> r = RunProcess(
      kQmmctl, {address, "bench", "--weight=w", "--requests=1", "--stream", "--local=" + socket},
      scratch_);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("--local carries unary MatMul only"), std::string::npos) << r->output;
}

TEST_F(BenchEndToEndTest, OpenInferenceCallsAreBatchedAndRight) {
  Start({"--workers=1", "--cpu_threads=1"});
  for (const char* mode : {"--stream", "--stream=false"}) {
    const nlohmann::json j = Bench(
        {"--protocol=oip", "--concurrency=16", "--requests=300", "--rows=2", mode, "--warmup=1"});
    ASSERT_TRUE(j.is_object()) << mode;
    EXPECT_EQ(j["setup"]["protocol"], "open-inference");
    EXPECT_EQ(j["ok"], 300) << mode;
    EXPECT_EQ(j["verified"], 300) << mode;
    EXPECT_EQ(j["mismatches"], 0) << mode;
    // ModelInfer's answers do not carry the server's compute time.
    EXPECT_TRUE(j["server_compute_p50_ms"].is_null()) << mode;
    EXPECT_EQ(j["server_batching"]["requests"], 300) << mode;
    EXPECT_GT(j["server_batching"]["multi_request_launches"].get<int64_t>(), 0) << mode;
    // ... which ModelStatistics gives.
    EXPECT_EQ(j["server_model"]["requests"], 300) << mode;
    EXPECT_GT(j["server_model"]["mean_ms"]["compute_infer"].get<double>(), 0) << mode;
  }
}

TEST_F(BenchEndToEndTest, OneStreamsRequestsInFlightGoTogether) {
  // One caller alone: only the requests its stream sends ahead can share a launch. The
  // queue delay gives the ones written behind the first time to arrive.
  Start({"--workers=1", "--cpu_threads=1", "--max_queue_delay_us=5000"});
  for (const char* protocol : {"--protocol=qmm", "--protocol=oip"}) {
    const nlohmann::json j = Bench(
        {protocol, "--concurrency=1", "--stream", "--inflight=8", "--requests=160", "--rows=2"});
    ASSERT_TRUE(j.is_object()) << protocol;
    EXPECT_EQ(j["setup"]["inflight"], 8);
    EXPECT_EQ(j["ok"], 160) << protocol;
    EXPECT_EQ(j["verified"], 160) << protocol;
    EXPECT_EQ(j["mismatches"], 0) << protocol;
    const nlohmann::json& b = j["server_batching"];
    EXPECT_EQ(b["requests"], 160) << protocol;
    EXPECT_GT(b["multi_request_launches"].get<int64_t>(), 0) << protocol;
    EXPECT_LT(b["launches"].get<int64_t>(), 80) << protocol;
  }
}

TEST_F(BenchEndToEndTest, ModelsAreBatchedAndEveryResultIsRight) {
  Start({"--workers=1", "--cpu_threads=1"});
  Ok({"upload", "--name=tok", "--scheme=bf16", "--random", "--n=100", "--k=512", "--seed=4"});
  Ok({"upload", "--name=down", "--scheme=w2a8", "--random", "--n=512", "--k=256", "--seed=5"});
  Ok({"create-model", Write("block.json", R"({"name": "block", "layers": [
        {"dyt": {"alpha": 0.5, "gamma": 1.0, "features": 512}},
        {"linear": {"weight": "w"}}, {"activation": "silu"}, {"linear": {"weight": "down"}}]})")});
  Ok({"create-model", Write("lm.json", R"({"name": "lm", "layers": [
        {"embedding": "tok"}, {"dyt": {"alpha": 0.8, "gamma": 1.5, "features": 512}},
        {"residual": 1}, {"linear": {"weight": "w"}}]})")});

  const std::vector<std::string> block = {"--model=block", "--verify_seeds=w=3,down=5"};
  for (const char* protocol : {"--protocol=qmm", "--protocol=oip"}) {
    for (const char* mode : {"--stream", "--stream=false"}) {
      const nlohmann::json j = Bench(
          {protocol, mode, "--concurrency=8", "--requests=120", "--rows=2", "--warmup=1"}, block);
      ASSERT_TRUE(j.is_object()) << protocol << mode;
      EXPECT_EQ(j["setup"]["model"], "block");
      EXPECT_EQ(j["setup"]["layers"], 4);
      EXPECT_EQ(j["setup"]["n"], 512);
      EXPECT_EQ(j["ok"], 120) << protocol << mode;
      EXPECT_EQ(j["verified"], 120) << protocol << mode;
      EXPECT_EQ(j["mismatches"], 0) << protocol << mode;
      EXPECT_EQ(j["server_batching"]["requests"], 120) << protocol << mode;
      EXPECT_GT(j["server_batching"]["multi_request_launches"].get<int64_t>(), 0)
          << protocol << mode;
    }
  }
  // A token model: three random ids a request, answered in fp32.
  for (const char* protocol : {"--protocol=qmm", "--protocol=oip"}) {
    const nlohmann::json j = Bench(
        {protocol, "--stream", "--inflight=4", "--concurrency=4", "--requests=80", "--rows=3"},
        {"--model=lm", "--verify_seeds=tok=4,w=3"});
    ASSERT_TRUE(j.is_object()) << protocol;
    EXPECT_EQ(j["setup"]["scheme"], "token model");
    EXPECT_EQ(j["setup"]["output_dtype"], "fp32");
    EXPECT_EQ(j["verified"], 80) << protocol;
    EXPECT_EQ(j["mismatches"], 0) << protocol;
  }

  // A wrong seed: every result mismatches (exit 1), which shows the check can fail.
  const absl::StatusOr<RunResult> wrong =
      RunProcess(kQmmctl,
                 {"--server=" + server_->address(), "bench", "--model=block", "--verify",
                  "--verify_seeds=w=3,down=6", "--requests=10", "--dtype=fp16"},
                 scratch_);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(wrong->exit_code, 1) << wrong->output;
  EXPECT_NE(wrong->output.find("10 mismatches"), std::string::npos) << wrong->output;
}

// qmmctl bench runs unchanged against the echo server: unary callers, and streams with
// requests sent ahead, every one answered; the echo neither batches nor computes, and the
// report says nothing of either rather than zeros.
TEST(EchoBenchEndToEndTest, BenchRunsAgainstTheEchoServer) {
  const std::string scratch = ::testing::TempDir();
  absl::StatusOr<ServerProcess> server = ServerProcess::Start(
      QMM_ECHO_SERVER_PATH, {"--listen=127.0.0.1:0", "--features=512"}, scratch, absl::Seconds(60));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->backend(), "echo");
  const std::string json = absl::StrCat(scratch, "/echo_bench_e2e_", getpid(), ".json");
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"--concurrency=4"},
        std::vector<std::string>{"--concurrency=8", "--stream", "--inflight=4"}}) {
    std::vector<std::string> args = {"--server=" + server->address(),
                                     "bench",
                                     "--weight=w",
                                     "--rows=2",
                                     "--dtype=fp16",
                                     "--requests=200",
                                     "--json=" + json};
    args.insert(args.end(), mode.begin(), mode.end());
    absl::StatusOr<RunResult> r = RunProcess(kQmmctl, args, scratch);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->output << "\nserver log:\n" << server->Log();
    EXPECT_EQ(r->output.find("server batching"), std::string::npos) << r->output;
    EXPECT_EQ(r->output.find("server compute"), std::string::npos) << r->output;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << r->output;
    EXPECT_EQ(j["setup"]["backend"], "echo");
    EXPECT_EQ(j["setup"]["k"], 512);
    EXPECT_EQ(j["ok"], 200);
    EXPECT_EQ(j["errors"], 0);
    EXPECT_FALSE(j.contains("server_batching"));
    EXPECT_TRUE(j["server_compute_p50_ms"].is_null());
  }
  std::remove(json.c_str());
  absl::StatusOr<int> code = server->Stop(SIGTERM, absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << server->Log();
}

}  // namespace
}  // namespace qmm::e2e
