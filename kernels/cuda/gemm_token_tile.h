// The wgmma GEMM's tuning knobs and its token tile for a launch (wgmma_gemm_launch.cuh).
// Host code only, so that a CPU test pins the choices measured on the H200
// (tests/kernels/cuda/gemm_token_tile_test.cc).
#ifndef QMM_KERNELS_CUDA_GEMM_TOKEN_TILE_H_
#define QMM_KERNELS_CUDA_GEMM_TOKEN_TILE_H_

#include <cstdint>

namespace qmm::cuda::wgmma_gemm {

// Tuning knobs (0: the launch's choice): 128-row groups per CTA (1 or 2), the K split
// (1, 2, 4 or 8) and the token tile: 64 up to 64 tokens (where 32 would be the choice up
// to 32), or beyond 128 tokens 128 or 256 (for formats that have it).
struct Options {
  int groups = 0;
  int splits = 0;
  int tokens = 0;
};

// Whether forced knobs are ones the GEMM has: a split is a cluster of at most 8 CTAs.
inline bool Valid(const Options& options) {
  return options.groups >= 0 && options.groups <= 2 && options.splits >= 0 && options.splits <= 8 &&
         (options.tokens == 0 || options.tokens == 64 || options.tokens == 128 ||
          options.tokens == 256);
}

// The token tile for a launch of m rows on N = n on `sms` SMs, of a format with 256-token
// tiles or not (`wide_tiles`, F::kWideTiles in wgmma_gemm.cuh): 32 up to 32 tokens, 64 up
// to 64, then 128 (a forced options.groups of 2 keeps 64). 128-token tiles (one group per
// CTA) halve the dequantization per product against 64; on the H200 (W4A16) they won at M
// = 256 on every benchmark shape (8192 x 28672: 237 us against 280), at M = 128 only from
// N = 8192 on (4096 x 4096: 27.9 against 17.5). Beyond 128 tokens, 256-token tiles halve
// it again (W4A16 8192 x 28672 at M = 256 on the H200: tensor pipe active 77% of the
// cycles against 63%; ncu, session 44), but with half as many CTAs they pay only where
// they pad no more tokens and their grid takes half the turns of the SMs or fewer.
// Measured at M = 192, 256, 384 and 512 on the five benchmark shapes (W4A16 and W2A8,
// both tiles forced), that picks the faster tile in 38 of the 40 cases, and in the other
// two (W4A16 14336 x 4096 at M = 384 and 512) one 0.6-2.9% slower: e.g. 8192 x 28672 at M
// = 256 8% (W2A8 12%) faster with 256, at M = 512 1-13% slower; 4096 x 14336 at M = 512
// 12-19% faster, at M = 384 18-22% slower; where they need a K split to fill the SMs (N =
// 4096 and 8192 at M = 256) 6-77% slower.
//
// A format that permutes 64-token tiles in its stages but not 128-token ones
// (`stage_permute_tokens`, F::kStagePermuteTokens: W8A16, and W4A16 on weights of at most
// 32 row groups) pays a permute kernel ahead of 128-token tiles, a second dependency between
// grids; on a short GEMM (K <= 4096, 128-token tiles too few to fill the SMs unsplit)
// 64-token tiles, two groups a CTA, cost less at 129-256 tokens: on the H200 W8A16 4096 x
// 4096 at M = 256 18.46 us against 20.28 (session 50), W4A16 at M = 192 / 256 17.84 / 18.47
// against 19.07 / 19.40 (session 53), where 8192 x 8192 and 14336 x 4096 (longer K) were 7-8%
// slower on them (W8A16).
inline int TokenTile(int64_t m, int64_t n, int64_t k, const Options& options, int sms,
                     bool wide_tiles, int stage_permute_tokens) {
  if (options.tokens == 64 && m <= 64) return 64;
  if (m <= 32) return 32;
  const bool wide = m > 128 || (m > 64 && n >= 8192);
  if (!wide || options.groups == 2) return 64;
  const int64_t groups = (n + 127) / 128;
  if (stage_permute_tokens >= 64 && options.tokens == 0 && m > 128 && m <= 256 && k <= 4096 &&
      groups * ((m + 127) / 128) < sms) {
    return 64;
  }
  if (m <= 128 || !wide_tiles) return 128;
  if (options.tokens != 0) return options.tokens;
  const int64_t wide_ctas = groups * ((m + 255) / 256);
  const int64_t narrow_ctas = groups * ((m + 127) / 128);
  const auto turns = [&](int64_t ctas) { return (ctas + sms - 1) / sms; };
  return narrow_ctas == 2 * wide_ctas && 2 * turns(wide_ctas) <= turns(narrow_ctas) ? 256 : 128;
}

}  // namespace qmm::cuda::wgmma_gemm

#endif  // QMM_KERNELS_CUDA_GEMM_TOKEN_TILE_H_
