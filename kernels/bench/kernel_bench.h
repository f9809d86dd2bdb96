// qmm-kernel-bench: times each scheme's CUDA kernel, cuBLAS fp16 on the same shape and a
// large device-to-device copy, in one run, and reports the ratios.
//
// Method: each launch reads a different copy of the weights, with enough copies that
// together they exceed l2_multiple times the L2 cache, so that every launch streams its
// weights from HBM. Three times per row, all medians: the headline "us" is per launch
// from replays of a CUDA graph of graph_batch back-to-back launches (no host launch gaps,
// as in a decode loop; each launch a dependent launch that may start during the previous
// one, as our kernels are launched everywhere: cuda/dependent_launch.h); "serial" is the
// same graph with dependent launch off; "single" is one launch between its own event
// pair, which includes whatever host submission gap the machine has. cuBLAS fp16 is timed
// the same way and compared on the graph number. Weights and activations are random
// (never zeros).
#ifndef QMM_KERNELS_BENCH_KERNEL_BENCH_H_
#define QMM_KERNELS_BENCH_KERNEL_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dtype.h"
#include "kernels/format.h"

namespace qmm::bench {

struct BenchShape {
  int64_t k = 0;
  int64_t n = 0;
};

struct BenchOptions {
  int device = 0;
  std::vector<Scheme> schemes;  // each must have a CUDA kernel
  std::vector<BenchShape> shapes;
  std::vector<int64_t> ms;
  DType x_dtype = DType::kF16;
  DType y_dtype = DType::kF16;
  int warmup = 10;
  int iters = 100;
  int graph_batch = 64;  // launches per captured graph (rounded up to whole rotations)
  int graph_replays = 20;
  double l2_multiple = 3.0;
  std::string json_path;  // empty: no JSON
  std::string command;    // recorded in the JSON
  // Tuning overrides (0: the launcher's own choice): cuda::W8A16Options,
  // cuda::W4A16Options and cuda::W2A8Options.
  int w8a16_splits = 0;
  int w8a16_wgmma_groups = 0;
  int w8a16_decode_rows = 0;
  bool w8a16_tile = false;
  int w8a16_decode_warps = 0;
  int w4a16_splits = 0;
  int w4a16_wgmma_groups = 0;
  int w4a16_decode_strips = 0;
  int w4a16_decode_warps = 0;
  bool w4a16_zero_points = false;  // W4A16 weights with zero points (rows "W4A16-ZP")
  bool w4a16_act_order = false;    // W4A16 g128 weights in activation order (rows "...-ACT")
  int w2a8_wgmma_groups = 0;
  int w2a8_wgmma_splits = 0;
  int w2a8_decode_units = 0;
  int w2a8_decode_groups = 0;
  int decode_cluster = 0;  // every scheme's decode_cluster
  int decode_stream = 0;   // every scheme's decode_stream
  int wgmma_tokens = 0;    // W4A16's and W2A8's wgmma_tokens
};

// Runs every (scheme, shape, M), prints a table to stdout and writes the JSON file.
absl::Status RunKernelBench(const BenchOptions& options);

}  // namespace qmm::bench

#endif  // QMM_KERNELS_BENCH_KERNEL_BENCH_H_
