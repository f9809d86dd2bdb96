// qmm-kernel-bench: parses flags into BenchOptions and runs the benchmark
// (kernel_bench.h says what it measures and how).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/bench/kernel_bench.h"
#include "kernels/cuda/kernels.h"

ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, schemes, "",
          "comma-separated schemes (FP16, BF16, W8A16, W4A16, W2A8); empty = every quantized "
          "scheme with a CUDA kernel");
ABSL_FLAG(std::string, shapes, "4096x4096,4096x14336,14336x4096,8192x8192,8192x28672",
          "comma-separated KxN shapes (K = in_features, N = out_features)");
ABSL_FLAG(std::string, m, "1,4,16,64,256", "comma-separated row counts M");
ABSL_FLAG(std::string, x_dtype, "fp16", "activation dtype of the A16 kernels: fp16 or bf16");
ABSL_FLAG(std::string, y_dtype, "fp16", "result dtype: fp32, fp16 or bf16");
ABSL_FLAG(int, warmup, 10, "untimed launches before each measurement");
ABSL_FLAG(int, iters, 100, "timed launches per measurement (the median is reported)");
ABSL_FLAG(int, graph_batch, 64, "launches per captured CUDA graph (the headline time)");
ABSL_FLAG(int, graph_replays, 20, "graph replays per measurement (the median is reported)");
ABSL_FLAG(double, l2_multiple, 3.0, "rotate over weight copies totalling this many L2 sizes");
ABSL_FLAG(std::string, json, "", "write every measurement to this JSON file");
ABSL_FLAG(int, w8a16_splits, 0,
          "W8A16 tuning: force the split-K count (1 to 8, with --w8a16_wgmma_groups a power of "
          "two; 0 = auto)");
ABSL_FLAG(int, w8a16_wgmma_groups, 0,
          "W8A16 tuning: force the wgmma GEMM at every M with 1 or 2 row groups per CTA");
ABSL_FLAG(int, w8a16_decode_rows, 0,
          "W8A16 tuning: row tiles per warp of the decode kernel up to 8 tokens (1 or 2; 0 = "
          "auto)");
ABSL_FLAG(bool, w8a16_tile, false,
          "W8A16 tuning: the split-K tile kernel up to 16 tokens, where the launch would take "
          "the decode kernel");
ABSL_FLAG(int, w8a16_decode_warps, 0,
          "W8A16 tuning: warps per CTA of the decode kernel where each CTA has one row set (8, "
          "or 16 for the wide CTAs; 0 = auto; 8 also keeps its stream-K grid and 16-warp "
          "clusters off)");
ABSL_FLAG(int, w4a16_splits, 0,
          "W4A16 tuning: force the split-K count (1, 2, 4, 8; 0 = auto; alone it forces the "
          "mma.sync cluster kernels)");
ABSL_FLAG(int, w4a16_wgmma_groups, 0,
          "W4A16 tuning: force the wgmma kernel at every M with 1 or 2 row groups per CTA");
ABSL_FLAG(int, w4a16_decode_strips, 0,
          "W4A16 tuning: strips per warp of the decode kernel up to 8 tokens (1 or 2; 0 = auto)");
ABSL_FLAG(int, w4a16_decode_warps, 0,
          "W4A16 tuning: warps a CTA of the decode kernel (8 or 16; 0 = auto)");
ABSL_FLAG(bool, w4a16_zero_points, false,
          "W4A16 with a zero point per group (AWQ's asymmetric int4: their term's two small "
          "kernels ahead of the matmul, w4a16_zero_points.h), labelled W4A16-ZP");
ABSL_FLAG(bool, w4a16_act_order, false,
          "W4A16 with group size 128 in activation order (GPTQ's desc_act: the inputs gathered "
          "ahead of the matmul, w4a16_act_order.h), labelled -ACT");
ABSL_FLAG(int, w2a8_decode_units, 0,
          "W2A8 tuning: weight units per slot of the decode kernel at M <= 8 (1 or 2; 0 = auto)");
ABSL_FLAG(int, w2a8_decode_groups, 0,
          "W2A8 tuning: row groups per row set of the decode kernel at M <= 8 (1 or 2; 0 = auto)");
ABSL_FLAG(int, decode_stream, 0,
          "Tuning: the stream-K grid of the W4A16, W2A8 and W8A16 decode kernels up to 16 tokens "
          "(1 never, 2 wherever they run; 0 = auto)");
ABSL_FLAG(int, decode_cluster, 0,
          "Tuning: CTAs (a cluster) sharing each row set of the W8A16, W4A16 and W2A8 decode "
          "kernels (1, 2 or 4; 0 = auto)");
ABSL_FLAG(int, w2a8_wgmma_groups, 0,
          "W2A8 tuning: force the wgmma kernel at every M with 1 or 2 row groups per CTA");
ABSL_FLAG(int, wgmma_tokens, 0,
          "Tuning: the W4A16 and W2A8 wgmma kernels' token tile: 64 up to 64 tokens, or "
          "beyond 128 tokens 128 or 256 (0 = auto)");
ABSL_FLAG(int, w2a8_wgmma_splits, 0,
          "W2A8 tuning: the wgmma kernel's K split (1, 2, 4 or 8; 0 = auto)");

namespace {

int Fail(const std::string& message) {
  std::cerr << "qmm-kernel-bench: " << message << "\n";
  return 1;
}

bool ParseDType(const std::string& s, qmm::DType* out) {
  for (qmm::DType d : {qmm::DType::kF32, qmm::DType::kF16, qmm::DType::kBF16}) {
    if (s == qmm::DTypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times qmm's CUDA kernels against cuBLAS fp16 and the device copy ceiling.");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) return Fail(std::string("unexpected argument ") + args[1]);

  qmm::bench::BenchOptions o;
  o.command = absl::StrJoin(argv, argv + argc, " ");
  o.device = absl::GetFlag(FLAGS_device);
  const std::string schemes = absl::GetFlag(FLAGS_schemes);
  if (schemes.empty()) {
    for (qmm::Scheme s : qmm::kAllSchemes) {
      const bool dense = s == qmm::Scheme::kFp16 || s == qmm::Scheme::kBf16;
      if (!dense && qmm::cuda::FindKernel(s) != nullptr) o.schemes.push_back(s);
    }
  }
  for (absl::string_view name : absl::StrSplit(schemes, ',', absl::SkipEmpty())) {
    bool found = false;
    for (qmm::Scheme s : qmm::kAllSchemes) {
      if (name == std::string(qmm::SchemeName(s))) {
        o.schemes.push_back(s);
        found = true;
      }
    }
    if (!found) return Fail("unknown scheme " + std::string(name));
  }
  for (absl::string_view shape :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    const std::vector<std::string> kn = absl::StrSplit(shape, 'x');
    qmm::bench::BenchShape s;
    if (kn.size() != 2 || !absl::SimpleAtoi(kn[0], &s.k) || !absl::SimpleAtoi(kn[1], &s.n)) {
      return Fail("bad shape " + std::string(shape) + " (want KxN)");
    }
    o.shapes.push_back(s);
  }
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_m), ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(m, &v) || v < 1) return Fail("bad M " + std::string(m));
    o.ms.push_back(v);
  }
  if (o.shapes.empty() || o.ms.empty()) return Fail("no shapes or no M given");
  if (!ParseDType(absl::GetFlag(FLAGS_x_dtype), &o.x_dtype) || o.x_dtype == qmm::DType::kF32) {
    return Fail("--x_dtype must be fp16 or bf16");
  }
  if (!ParseDType(absl::GetFlag(FLAGS_y_dtype), &o.y_dtype)) {
    return Fail("--y_dtype must be fp32, fp16 or bf16");
  }
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.iters = absl::GetFlag(FLAGS_iters);
  if (o.warmup < 0 || o.iters < 1) return Fail("--warmup must be >= 0 and --iters >= 1");
  o.graph_batch = absl::GetFlag(FLAGS_graph_batch);
  o.graph_replays = absl::GetFlag(FLAGS_graph_replays);
  if (o.graph_batch < 1 || o.graph_replays < 1) {
    return Fail("--graph_batch and --graph_replays must be >= 1");
  }
  o.l2_multiple = absl::GetFlag(FLAGS_l2_multiple);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.w8a16_splits = absl::GetFlag(FLAGS_w8a16_splits);
  o.w8a16_wgmma_groups = absl::GetFlag(FLAGS_w8a16_wgmma_groups);
  o.w8a16_decode_rows = absl::GetFlag(FLAGS_w8a16_decode_rows);
  o.w8a16_tile = absl::GetFlag(FLAGS_w8a16_tile);
  o.w8a16_decode_warps = absl::GetFlag(FLAGS_w8a16_decode_warps);
  o.w4a16_splits = absl::GetFlag(FLAGS_w4a16_splits);
  o.w4a16_wgmma_groups = absl::GetFlag(FLAGS_w4a16_wgmma_groups);
  o.w4a16_decode_strips = absl::GetFlag(FLAGS_w4a16_decode_strips);
  o.w4a16_decode_warps = absl::GetFlag(FLAGS_w4a16_decode_warps);
  o.w4a16_zero_points = absl::GetFlag(FLAGS_w4a16_zero_points);
  o.w4a16_act_order = absl::GetFlag(FLAGS_w4a16_act_order);
  o.w2a8_wgmma_groups = absl::GetFlag(FLAGS_w2a8_wgmma_groups);
  o.w2a8_wgmma_splits = absl::GetFlag(FLAGS_w2a8_wgmma_splits);
  o.w2a8_decode_units = absl::GetFlag(FLAGS_w2a8_decode_units);
  o.w2a8_decode_groups = absl::GetFlag(FLAGS_w2a8_decode_groups);
  o.decode_cluster = absl::GetFlag(FLAGS_decode_cluster);
  o.decode_stream = absl::GetFlag(FLAGS_decode_stream);
  o.wgmma_tokens = absl::GetFlag(FLAGS_wgmma_tokens);
  if (absl::Status s = qmm::bench::RunKernelBench(o); !s.ok()) return Fail(s.ToString());
  return 0;
}
