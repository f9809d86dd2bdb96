// What the wgmma GEMM's formats with 16-bit activations (W4A16, W8A16) share: fp32
// accumulation by the fp16 / bf16 wgmma, the activations permuted straight from the
// caller's x into the workspace, two A register sets in flight (wgmma_gemm.cuh lists what
// a format provides; w4a16_wgmma.cuh and w8a16_wgmma.cuh add the weight side).
#ifndef QMM_KERNELS_CUDA_WGMMA_A16_FORMAT_CUH_
#define QMM_KERNELS_CUDA_WGMMA_A16_FORMAT_CUH_

#include <cstdint>

#include "kernels/cuda/gemm_args.h"
#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace qmm::cuda::wgmma_gemm {

struct A16Format {
  using Params = w4a16::Params;
  using Acc = float;
  static constexpr int kXBytes = 2;
  static constexpr bool kXPermuted = false;
  // The largest token tile whose activations the GEMM permutes in its stages (XPermute,
  // wgmma_gemm.cuh); larger tiles take PermuteKernel's copy. Each format sets its own.
  static constexpr int kStagePermuteTokens = 0;
  static constexpr int kSteps = 8;
  // Twelve stages instead of six measured from 1.7% faster to 3.7% slower by shape
  // (H200, docs/performance-log.md, session 33), so these formats keep six.
  static constexpr int kMaxStages = 6;
  // Stages whose weights the copier fetches before the kernel's wait (wgmma_gemm.cuh):
  // three for tiles of up to 64 tokens, the whole ring for larger ones. On the H200
  // (session 48, every stage against three, M = 32-64 on the five benchmark shapes)
  // three took W4A16 up to 4.7% off (4096x4096 at 48 tokens 12.58 -> 11.98 us) and W8A16
  // up to 9.4% (4096x4096 at 32 10.05 -> 9.10, 8192x8192 at 48 23.38 -> 22.11), but
  // W8A16 14336x4096 at 32 (22.28 -> 24.32); with one stage W8A16 at 32 lost more. At 256
  // tokens fewer stages cost up to 5.6% (W8A16 8192x8192).
  static constexpr int PreWaitStages(int nt) { return nt <= 64 ? 3 : kMaxStages; }
  // Half a chunk a batch: a whole chunk's A registers (32) twice would not fit.
  static constexpr bool kWholeChunks = false;
  // 256-token tiles: W4A16's (w4a16_wgmma.cuh). W8A16's stages of 81 KB fit only twice,
  // and its 256-token tiles took 8-11% longer than 128-token ones at 192 and 256 tokens
  // on the shapes whose row groups fill the SMs (H200, session 44).
  static constexpr bool kWideTiles = false;
  // K splits of any count up to 8 for one token tile of up to 64 tokens (MakeGroupPlans),
  // where powers of two left SMs idle or their clusters a second turn: H100, session 74,
  // against powers of two, 32 / 64 tokens, W4A16 14336 x 4096 21.43 / 27.61 -> 17.73 /
  // 23.22 us (two groups split 6 ways, 96 CTAs, against 4 ways, 64), 28672 x 4096 -23%,
  // 4096 x 4096 at 64 -12%; W8A16 14336 x 4096 -16 / -10%, 28672 x 4096 -19 / -16%. At 128
  // and 256 tokens they were mixed (W8A16 14336 x 4096 at 256 +7%, 28672 x 4096 -5%).
  static constexpr bool kAnySplits = true;

  // What a one-group CTA's chunk costs against a two-group one's (wgmma_gemm_launch.cuh
  // Plan) at NT tokens, where the one-group plan splits K `splits` ways (`paired`: its
  // CTAs share SMs two at a time, which changed nothing measurable here). H200, M = 48 and
  // 64, both forced: one group is 3-8% faster on 4096 x 4096 and 4096 x 14336 (K split at
  // most two ways), two 5-9% on 8192 x 28672 (224 row tiles in two turns against 112 in
  // one) and on 14336 x 4096 (one group split 8 ways); the plan's costs put the first
  // three between 0.50 and 0.545.
  static constexpr double OneGroupChunkCost(int nt, int splits, bool /*paired*/) {
    return nt == 64 && splits <= 2 ? 0.52 : 0.65;
  }

  template <int J, bool kBf16>
  __device__ static void Mma(float (&d)[J][4], const uint32_t (&a)[4], uint64_t desc,
                             bool accumulate) {
#ifdef QMM_WGMMA
    wgmma::MmaRs<J, kBf16>(d, a, desc, accumulate);
#endif
  }

  static const void* PermuteSource(const GemmArgs& args) { return args.x; }
  static uint8_t* PermutedX(const GemmArgs& args) { return static_cast<uint8_t*>(args.workspace); }
};

}  // namespace qmm::cuda::wgmma_gemm

#endif  // QMM_KERNELS_CUDA_WGMMA_A16_FORMAT_CUH_
