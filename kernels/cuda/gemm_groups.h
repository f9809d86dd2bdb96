// The wgmma GEMM's row groups a CTA (wgmma_gemm_launch.cuh's Plan): one or two, from the
// plans ChooseSplits (cluster_fit.h) makes for each and the rules measured on the H200.
// Host code only, so that a CPU test pins the choices (tests/kernels/cuda/
// gemm_groups_test.cc).
#ifndef QMM_KERNELS_CUDA_GEMM_GROUPS_H_
#define QMM_KERNELS_CUDA_GEMM_GROUPS_H_

#include <cstdint>

#include "kernels/cuda/cluster_fit.h"

namespace qmm::cuda::wgmma_gemm {

// A CTA's pipeline fill and reduction, in chunks, as the plan counts them (ChooseSplits'
// fill_chunks) of every format's 128- and 256-token tiles, and by default.
inline constexpr int kFillChunks = 2;

// The fill of a one-group and of a two-group CTA, in chunks (each format's
// GroupFillChunks).
struct GroupFill {
  int one = kFillChunks;
  int two = kFillChunks;
};

// A launch's plans of one and of two row groups a CTA: each one's split and cost
// (ChooseSplits) and its CTAs.
struct GroupPlans {
  SplitChoice one;
  SplitChoice two;
  int64_t one_ctas = 0;
  int64_t two_ctas = 0;
  // Whether the one-group CTAs run two an SM at once (more than one an SM, all in one
  // turn), which the split's cost counts one after the other.
  bool paired = false;
};

// The plans for `token_tiles` x `groups` tiles (128 rows each) over `chunks` chunks of K,
// of CTAs that fit as `one_fit` (one group) and `two_fit` (two groups) on `sms` SMs, each
// CTA filling and reducing as `fill` counts, split K any number of ways up to 8
// (`any_splits`) or in powers of two.
inline GroupPlans MakeGroupPlans(int64_t token_tiles, int64_t groups, int chunks, int sms,
                                 const KernelFit& one_fit, const KernelFit& two_fit,
                                 const GroupFill& fill = {}, bool any_splits = false) {
  GroupPlans plans;
  plans.one = ChooseSplits(token_tiles * groups, chunks, sms, one_fit, false, fill.one, any_splits);
  plans.one_ctas = token_tiles * groups * plans.one.splits;
  plans.paired = one_fit.occupancy >= 2 && plans.one_ctas > sms &&
                 plans.one_ctas <= int64_t{sms} * one_fit.occupancy;
  const int64_t pairs = token_tiles * ((groups + 1) / 2);
  plans.two = ChooseSplits(pairs, chunks, sms, two_fit, false, fill.two, any_splits);
  plans.two_ctas = pairs * plans.two.splits;
  return plans;
}

// Whether a launch of m rows on nt-token tiles over `chunks` chunks of K takes two groups
// a CTA. Per chunk a CTA of one group does about half the work of one of two (the same
// activation traffic, half the weights and MMAs): `one_group_cost` of it
// (F::OneGroupChunkCost, measured on the H200 against these costs), unless a rule below
// takes two whatever the costs.
inline bool TakesTwoGroups(int nt, int64_t m, int chunks, int sms, const GroupPlans& plans,
                           double one_group_cost) {
  constexpr int kLongChunks = 64;  // K of 8192
  // Where both split K alike four ways or more (few row groups: N <= 4096 on the H200)
  // and K is 8192 or longer, at 33-64 tokens: on the H200 (session 52, M = 40 and 64)
  // W2A8 8192 x 4096 16.6-16.8 -> 16.3-16.4 us, 14336 x 4096 23.4-23.6 -> 22.3-22.4,
  // 28672 x 4096 39.3-39.5 -> 36.3-36.4; at K = 4096 one group stays 0.5-3% faster.
  const bool alike = nt == 64 && plans.one.splits >= 4 && plans.two.splits == plans.one.splits &&
                     chunks >= kLongChunks;
  // Where both run as many CTAs, all in one turn (the two-group ones split K twice as
  // many ways, with half the activation bytes a weight byte), and K is 8192 or longer or
  // the tiles are the 64-token ones beyond 128 tokens (TokenTile's short GEMMs of few row
  // groups). On the H200 (session 53): at M = 40 and 64 W8A16 8192 x 4096 / 5120 / 6144
  // 6-14% faster, W4A16 8192 x 4096 8.5%, W4A16 and W2A8 14336 x 6144 4-6%, W4A16 and
  // W2A8 8192 x 6144 (96 CTAs) 0.8-1.8% slower; at M = 136-256 W4A16 4096 x 4096 4-7%,
  // 2048 x 4096 16-19%, 4096 x 2048 at 136-192 (96 CTAs) 20%, W8A16 2048 x 4096 at 256
  // 3% slower. (4096 x 2048 at 256, where two groups would run half the CTAs, took 30%
  // longer on them.)
  const bool even = nt == 64 && plans.two_ctas == plans.one_ctas && plans.one_ctas <= sms &&
                    (chunks >= kLongChunks || m > 128);
  return alike || even || !(plans.one.cost * one_group_cost < plans.two.cost);
}

}  // namespace qmm::cuda::wgmma_gemm

#endif  // QMM_KERNELS_CUDA_GEMM_GROUPS_H_
