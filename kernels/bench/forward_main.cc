// qmm-forward-bench: parses flags into ForwardBenchOptions and runs the benchmark
// (forward_bench.h says what it measures and how).
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/bench/forward_bench.h"

ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, block, "llama",
          "llama (Llama-3-8B's MLP block, W4A16) or bitnet (BitNet b1.58 2B4T's, W2A8 with "
          "relu2 and its ffn_sub_norm)");
ABSL_FLAG(std::string, scheme, "",
          "the quantized weights' scheme: W8A16, W4A16 or W2A8 (empty: the block's own)");
ABSL_FLAG(int64_t, hidden, 0, "the block's input and output features (0: the block's own)");
ABSL_FLAG(int64_t, intermediate, 0, "the MLP's inner features (0: the block's own)");
ABSL_FLAG(std::string, m, "1,16", "comma-separated row counts M");
ABSL_FLAG(int, copies, 0,
          "weight sets rotated over, so that weights stream from HBM (0: 3 for llama's "
          "116 MB at W4A16, 16 for bitnet's 13 MB at W2A8)");
ABSL_FLAG(int, iters, 200, "timed runs per number (the median is reported)");
ABSL_FLAG(int, graph_batch, 48, "launches per graph for the kernels-alone numbers");
ABSL_FLAG(int, stack, 16,
          "blocks in one chain for the stacked number (a model's layers in a row; 0: skip)");
ABSL_FLAG(std::string, json, "", "write the results to this JSON file");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times an LLM's MLP block through qmm's chain runner (Llama-3-8B's with W4A16 weights, "
      "or BitNet b1.58 2B4T's with W2A8; --scheme picks others) against cuBLAS fp16, and "
      "against the sum of its kernels alone.");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::cerr << "qmm-forward-bench: unexpected argument " << args[1] << "\n";
    return 1;
  }
  qmm::bench::ForwardBenchOptions o;
  o.command = absl::StrJoin(argv, argv + argc, " ");
  o.device = absl::GetFlag(FLAGS_device);
  const std::string block = absl::GetFlag(FLAGS_block);
  if (block != "llama" && block != "bitnet") {
    std::cerr << "qmm-forward-bench: --block is llama or bitnet, not " << block << "\n";
    return 1;
  }
  o.bitnet = block == "bitnet";
  const std::string scheme = absl::GetFlag(FLAGS_scheme);
  o.scheme = o.bitnet ? qmm::Scheme::kW2A8 : qmm::Scheme::kW4A16;
  if (!scheme.empty()) {
    bool known = false;
    for (qmm::Scheme s : {qmm::Scheme::kW8A16, qmm::Scheme::kW4A16, qmm::Scheme::kW2A8}) {
      if (scheme == qmm::SchemeName(s)) {
        o.scheme = s;
        known = true;
      }
    }
    if (!known) {
      std::cerr << "qmm-forward-bench: --scheme is W8A16, W4A16 or W2A8, not " << scheme << "\n";
      return 1;
    }
  }
  o.hidden = absl::GetFlag(FLAGS_hidden);
  if (o.hidden == 0) o.hidden = o.bitnet ? 2560 : 4096;
  o.intermediate = absl::GetFlag(FLAGS_intermediate);
  if (o.intermediate == 0) o.intermediate = o.bitnet ? 6912 : 14336;
  o.copies = absl::GetFlag(FLAGS_copies);
  if (o.copies == 0) o.copies = o.bitnet ? 16 : 3;
  o.iters = absl::GetFlag(FLAGS_iters);
  o.graph_batch = absl::GetFlag(FLAGS_graph_batch);
  o.stack = absl::GetFlag(FLAGS_stack);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.ms.clear();
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_m), ',', absl::SkipEmpty())) {
    int64_t m = 0;
    if (!absl::SimpleAtoi(s, &m) || m < 1) {
      std::cerr << "qmm-forward-bench: bad --m value " << s << "\n";
      return 1;
    }
    o.ms.push_back(m);
  }
  if (absl::Status s = qmm::bench::RunForwardBench(o); !s.ok()) {
    std::cerr << "qmm-forward-bench: " << s << "\n";
    return 1;
  }
  return 0;
}
