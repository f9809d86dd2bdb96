// The host half of decode_split.cuh: how many warps share each row set (S) and how many
// CTAs the persistent decode grids of w4a16.cu and w2a8.cu launch.
#ifndef QMM_KERNELS_CUDA_DECODE_PLAN_H_
#define QMM_KERNELS_CUDA_DECODE_PLAN_H_

#include <algorithm>
#include <cstdint>

namespace qmm::cuda {

struct DecodeGrid {
  int split = 1;      // S, warps per row set
  int64_t units = 0;  // groups of 8 / S row sets, one per CTA at a time
  int64_t ctas = 0;   // gridDim.x
};

// `sets` row sets of `chunks` chunks each, 8-warp CTAs of which `slots` fit on the device
// at once; S is the cheapest power of two from min_split up, capped at max_split. Cost: the row
// sets on the busiest SM (CTAs take units of 8 / S sets in turn, so SM b % sms holds CTAs b, b +
// sms, ...), 10% more when the units outnumber the CTAs that fit at once (the last turn leaves CTAs
// idle and fewer bytes in flight); ties go to more warps per set, which shortens each warp's run.
// Beyond one turn, CTAs = units / turns, so that every CTA has as many units and no last turn runs
// on a fraction of the grid.
inline DecodeGrid MakeDecodeGrid(int64_t sets, int chunks, int sms, int64_t slots,
                                 int min_split = 1, int max_split = 8) {
  constexpr int kWarps = 8;
  DecodeGrid grid;
  double best_cost = -1;
  for (int s = kWarps; s >= 1; s /= 2) {
    if (s < min_split || (s > chunks && s > min_split)) continue;
    const int per_cta = kWarps / s;
    const int64_t units = (sets + per_cta - 1) / per_cta;
    double cost = static_cast<double>((units + sms - 1) / sms * std::min<int64_t>(per_cta, sets));
    if (units > slots) cost *= 1.1;
    if (best_cost < 0 || cost < best_cost) {
      grid.split = s;
      best_cost = cost;
    }
  }
  grid.split = std::max(std::min(grid.split, max_split), min_split);
  const int64_t per_cta = kWarps / grid.split;
  grid.units = (sets + per_cta - 1) / per_cta;
  const int64_t turns = (grid.units + slots - 1) / slots;
  grid.ctas = (grid.units + turns - 1) / turns;
  return grid;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_PLAN_H_
