// qmm-forward-bench: the Forward target of issue 7 on a Llama-3-8B-shaped MLP block,
// RMSNorm -> SwiGLU (gate, up: 4096 -> 14336; down: 14336 -> 4096) -> residual, at decode
// sizes (DyT in its place until session 66). With `bitnet`, BitNet b1.58 2B4T's block
// instead: ternary weights (W2A8), relu2 for SiLU and the product's RMSNorm (ffn_sub_norm)
// before down, 2560 -> 6912 -> 2560 unless hidden and intermediate say otherwise.
//
// Three numbers per (scheme, M), all medians:
// - "alone": each of the block's kernels timed by itself (the launches the chain plan
//   makes: RMSNorm, gate, up, silu(gate) * up, down, + residual), per launch from replays of a
//   CUDA graph of back-to-back launches (no host gaps), weights rotated over enough copies
//   that every launch streams them from HBM. Their sum is the floor a chain can reach.
// - "forward": one replay of the block's captured ChainGraph between its own event pair,
//   which is exactly what the CUDA backend reports as Forward's compute time once the
//   (model, batch size) graph exists; blocks rotated over copies as above. Every launch
//   in it may start during the one before it (cuda/dependent_launch.h); "serialized" is
//   the same graph captured with that off.
// - "eager": the same block enqueued kernel by kernel (the backend's first run of a shape).
// - "stacked": a block's share of one ChainGraph of `stack` blocks in a row (the copies in
//   turn), as a model's Forward runs its layers: no graph launch and no drained GPU at each
//   block's edges, which the one-block "forward" has, and every kernel starting in its
//   predecessor's tail.
// The block runs with W4A16 (BitNet: W2A8; or `scheme`) weights and FP16 weights through
// cuBLAS (the baseline); the report gives forward / sum(alone) and fp16 forward / quantized
// forward.
#ifndef QMM_KERNELS_BENCH_FORWARD_BENCH_H_
#define QMM_KERNELS_BENCH_FORWARD_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/format.h"

namespace qmm::bench {

struct ForwardBenchOptions {
  int device = 0;
  bool bitnet = false;
  Scheme scheme = Scheme::kW4A16;  // the quantized weights'
  int64_t hidden = 4096;
  int64_t intermediate = 14336;
  std::vector<int64_t> ms = {1, 16};
  int copies = 3;         // weight sets rotated over (Llama's block is > 80 MB at W4A16)
  int iters = 200;        // timed runs per number
  int graph_batch = 48;   // launches per graph for the "alone" numbers
  int stack = 16;         // blocks in the "stacked" chain (0: not measured)
  std::string json_path;  // empty: no JSON
  std::string command;    // recorded in the JSON
};

absl::Status RunForwardBench(const ForwardBenchOptions& options);

}  // namespace qmm::bench

#endif  // QMM_KERNELS_BENCH_FORWARD_BENCH_H_
