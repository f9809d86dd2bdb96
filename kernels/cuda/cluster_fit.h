// How many CTAs of a kernel run at once, clusters included (FitOf: the decode kernels, the
// W8A16 split tiles, the W4A16 cluster kernels and the wgmma GEMM; SplitSlots: a split's
// clusters), and the K split that keeps the busiest SM's work least (ChooseSplits: the
// W4A16 cluster kernels and the wgmma GEMM; the W8A16 tiles have theirs, tile_splits.h).
#ifndef QMM_KERNELS_CUDA_CLUSTER_FIT_H_
#define QMM_KERNELS_CUDA_CLUSTER_FIT_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace qmm::cuda {

inline constexpr int kMaxClusterCtas = 8;  // the portable cluster size

// What fits on the device at once of one kernel: CTAs per SM, and clusters[c] clusters of
// c = 2 to 8 CTAs (a cluster's CTAs must share a GPC, so on the H200 a kernel of one CTA
// per SM fits 30 clusters of 4, not 33; none before sm_90).
struct KernelFit {
  int occupancy = 0;
  int clusters[kMaxClusterCtas + 1] = {};
};

// Appends a launch attribute for clusters of `cluster` x 1 x 1 CTAs to attrs[count] where
// cluster > 1; returns the new count.
inline int AppendClusterDim(cudaLaunchAttribute* attrs, int count, int cluster) {
  if (cluster <= 1) return count;
  attrs[count] = {};
  attrs[count].id = cudaLaunchAttributeClusterDimension;
  attrs[count].val.clusterDim.x = static_cast<unsigned>(cluster);
  attrs[count].val.clusterDim.y = 1;
  attrs[count].val.clusterDim.z = 1;
  return count + 1;
}

// KernelFit of `kKernel` launched with kBlock threads and kSmem bytes of dynamic shared
// memory. The same on every device of one kind, so computed once per process; the first
// call per device also opts the kernel into kSmem bytes (more than 48 KB needs that).
template <auto kKernel, int kSmem, int kBlock>
cudaError_t FitOf(int device, int cc_major, KernelFit* fit) {
  static std::atomic<uint64_t> configured{0};
  static std::atomic<int> occupancy{0};
  static std::atomic<int> clusters[kMaxClusterCtas + 1] = {};
  if (device >= 64 || (configured.load() >> device & 1) == 0) {
    cudaError_t err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    int occ = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kKernel, kBlock, kSmem);
    if (err != cudaSuccess) return err;
    occupancy.store(std::max(occ, 1));
    for (int c = 2; cc_major >= 9 && c <= kMaxClusterCtas; ++c) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(1, 1, static_cast<unsigned>(c));
      config.blockDim = dim3(kBlock);
      config.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 1;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = static_cast<unsigned>(c);
      config.attrs = &attr;
      config.numAttrs = 1;
      int n = 0;
      err = cudaOccupancyMaxActiveClusters(&n, kKernel, &config);
      if (err != cudaSuccess) return err;
      clusters[c].store(n);
    }
    if (device < 64) configured.fetch_or(uint64_t{1} << device);
  }
  fit->occupancy = occupancy.load();
  for (int c = 2; c <= kMaxClusterCtas; ++c) fit->clusters[c] = clusters[c].load();
  return cudaSuccess;
}

// CTAs of a kernel split s ways (clusters of s CTAs, s up to 8) that run at once: a cluster's CTAs
// must share a GPC, so fewer of them fit than the SMs' room (on the H200 at two CTAs an SM: 62
// clusters of 4, 248 CTAs, against 264). 0 where clusters of s do not run at all.
inline int64_t SplitSlots(int s, int sms, const KernelFit& fit) {
  const int64_t room = int64_t{sms} * fit.occupancy;
  if (s == 1) return room;
  return std::min<int64_t>(room, int64_t{fit.clusters[s]} * s);
}

struct SplitChoice {
  int splits = 1;
  double cost = 0;  // chunks on the busiest SM
};

// Work on the busiest SM, in chunks, for each split count up to 8 (clusters along z),
// every count or (`any_count` false) the powers of two: the least wins. CTAs beyond what
// fits at once (clusters included) run in a later turn, each CTA costing `fill_chunks`
// more (its pipeline fill and reduction). Each extra split costs a little reduction. For
// one token tile (pure streaming) one CTA per SM keeps too few bytes in flight where more
// could fit; with more tokens per CTA the longer per-CTA runs measured faster.
inline SplitChoice ChooseSplits(int64_t base_ctas, int chunks, int sms, const KernelFit& fit,
                                bool streaming, int fill_chunks = 0, bool any_count = false) {
  SplitChoice best;
  for (int s = 1; s <= 8 && (s == 1 || s <= chunks); s = any_count ? s + 1 : s * 2) {
    const int64_t ctas = base_ctas * s;
    const int64_t room = int64_t{sms} * fit.occupancy;
    const int64_t slots = SplitSlots(s, sms, fit);
    if (slots == 0) continue;
    int64_t per_sm = (ctas + sms - 1) / sms;
    // More CTAs than fit at once, counting the GPC limit on clusters: whole turns, each
    // placing ceil(slots / SMs) CTAs on the busiest SM. (Within one turn the CTAs spread:
    // 4096 x 14336 at M = 1 measured 12.7 us at 4 splits, 13.8 at 2, which counting the
    // occupancy per turn chose.)
    if (slots < room && ctas > slots) {
      per_sm = std::max(per_sm, (ctas + slots - 1) / slots * ((slots + sms - 1) / sms));
    }
    double cost = static_cast<double>(per_sm) * ((chunks + s - 1) / s + fill_chunks);
    if (streaming && per_sm < 2 && fit.occupancy >= 2) cost *= 1.5;
    cost *= 1 + 0.03 * (s - 1);
    if (s == 1 || cost < best.cost) best = {s, cost};
  }
  return best;
}

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_CLUSTER_FIT_H_
