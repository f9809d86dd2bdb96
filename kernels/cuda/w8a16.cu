// Device side of W8A16 (see w8a16.h for the layout and the plan).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/decode_launch.h"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/tile_splits.h"
#include "kernels/cuda/w8a16.h"
#include "kernels/cuda/w8a16_decode.cuh"
#include "kernels/cuda/w8a16_ptx.cuh"
#include "kernels/cuda/w8a16_wgmma.cuh"
#include "kernels/cuda/wgmma_gemm_launch.cuh"

namespace qmm::cuda {
namespace {

using w8a16::Dequant;
using w8a16::Mma;

constexpr int kChunkK = 32;        // k per chunk: two m16n8k16 steps
constexpr int kChunkVectors = 32;  // uint4 per (row tile, chunk): one per lane

struct Params {
  const uint4* w;       // [rt_count][chunks][32]
  const float* scales;  // [rt_count * 16]
  const void* x;        // [m][k]
  void* y;              // [m][n]
  int64_t m;
  int32_t n;
  int32_t k;
  int32_t rt_count;
  int32_t chunks;
  int32_t splits;
  int32_t groups;
  int32_t chunks_per_split;
  DType y_dtype;
  const void* residual;  // [m][n], added to y (GemmArgs::residual), or nullptr
  DType residual_dtype;
};

// Weights are read exactly once: cp.async.cg bypasses L1 (which keeps the activations
// that every warp of the CTA re-reads) and lands in the issuing lane's own ring slot.
__device__ __forceinline__ void CpAsync16(const void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
// Activations are re-read by every warp of the CTA: .ca keeps them in L1.
__device__ __forceinline__ void CpAsync16Cached(const void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// One CTA: kWN warps side by side along N, each owning kR row tiles (16 rows each) for
// the CTA's kNT token tiles (8 tokens each) over the CTA's K range. Each warp streams its
// weights and its activation fragments through a private ring of kStages shared-memory
// slots of kU chunks (cp.async; kStages - 1 groups in flight while one is multiplied),
// so that no load latency is ever exposed and registers hold only accumulators. Every
// lane reads back only the 16-byte vectors it copied itself: the ring needs no barrier.
template <int kNT, int kR, int kWN, int kU, int kStages>
struct Tile {
  static constexpr int kThreads = 32 * kWN;
  static constexpr int kTokens = 8 * kNT;
  static constexpr int kRows = 16 * kR * kWN;
  static constexpr int kRowTiles = kR * kWN;
  static constexpr int kGroupChunks = kU;
  static constexpr int kRingStages = kStages;
  // Per chunk a warp holds kR weight vectors and kNT activation vectors per lane.
  static constexpr int kSlotsPerChunk = kR + kNT;
  static constexpr size_t kRingBytes =
      size_t{kWN} * kStages * kU * kSlotsPerChunk * kChunkVectors * 16;
  // Partial-sum tile for the cluster reduction, [kTokens][kRows + 4], in the ring's
  // memory once the ring is drained: the pad makes the accumulator stores (8 rows x 4
  // token pairs per warp) hit 32 distinct banks.
  static constexpr int kPartStride = kRows + 4;
  static constexpr size_t kPartBytes = sizeof(float) * kTokens * kPartStride;
  static constexpr size_t kSmemBytes = kRingBytes > kPartBytes ? kRingBytes : kPartBytes;
};

template <typename T, typename TileT, bool kSplit>
__global__ void __launch_bounds__(TileT::kThreads) W8A16Kernel(const Params p) {
  constexpr int kNT = TileT::kTokens / 8;
  constexpr int kU = TileT::kGroupChunks;
  constexpr int kStages = TileT::kRingStages;
  constexpr int kR = TileT::kRowTiles / (TileT::kThreads / 32);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  int bid = blockIdx.x;
  int split = 0;
  if constexpr (kSplit) {
    split = bid % p.splits;
    bid /= p.splits;
  }
  const int group = bid % p.groups;
  const int rowblock = bid / p.groups;
  const int c0 = split * p.chunks_per_split;
  const int c1 = min(p.chunks, c0 + p.chunks_per_split);

  const uint4* wp[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    // Tiles past the last one (a partial row block) re-read the last tile: valid memory,
    // results never stored.
    const int rt = min(rowblock * TileT::kRowTiles + warp * kR + r, p.rt_count - 1);
    wp[r] = p.w + static_cast<int64_t>(rt) * p.chunks * kChunkVectors + lane;
  }
  const uint4* xp[kNT];
#pragma unroll
  for (int t = 0; t < kNT; ++t) {
    // Tokens past M read the last row likewise.
    const int64_t token = min(static_cast<int64_t>(group) * TileT::kTokens + 8 * t + g, p.m - 1);
    xp[t] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + token * p.k) + t4;
  }

  float acc[kR][kNT][4];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < kNT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][t][i] = 0.0f;

  extern __shared__ uint4 smem[];
  // This lane's slots: ring[stage][u][slot], slot r < kR a weight vector and slot kR + t
  // an activation vector, at a stride of one warp-chunk (32 vectors).
  constexpr int kSlots = TileT::kSlotsPerChunk;
  uint4* const ring = smem + warp * (kStages * kU * kSlots * kChunkVectors) + lane;
  auto slot = [&](int stage, int u, int s) {
    return ring + ((stage * kU + u) * kSlots + s) * kChunkVectors;
  };
  auto issue_weights = [&](int c, int stage) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (c + u < c1) {
#pragma unroll
        for (int r = 0; r < kR; ++r) CpAsync16(slot(stage, u, r), wp[r] + (c + u) * kChunkVectors);
      }
    }
  };
  auto issue_x = [&](int c, int stage) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (c + u < c1) {
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
          CpAsync16Cached(slot(stage, u, kR + t), xp[t] + (c + u) * (kChunkK / 8));
        }
      }
    }
    // Empty groups too, so that group g is always the g-th commit.
    CpAsyncCommit();
  };

  // The ring's weights while the previous kernel may still run (dependent launch), the
  // activations once it is done; the weights all join the first commit group.
#pragma unroll
  for (int stage = 0; stage < kStages; ++stage) issue_weights(c0 + stage * kU, stage);
  WaitForPrerequisiteGrid();
#pragma unroll
  for (int stage = 0; stage < kStages; ++stage) issue_x(c0 + stage * kU, stage);
  int stage = 0;
#pragma unroll 1
  for (int c = c0; c < c1; c += kU) {
    CpAsyncWait<kStages - 1>();  // this group has landed
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (c + u < c1) {
        uint4 xv[kNT];
#pragma unroll
        for (int t = 0; t < kNT; ++t) xv[t] = *slot(stage, u, kR + t);
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          uint32_t a[2][4];
          Dequant<T>(*slot(stage, u, r), a);
#pragma unroll
          for (int t = 0; t < kNT; ++t) {
            Mma<T>(acc[r][t], a[0], xv[t].x, xv[t].y);
            Mma<T>(acc[r][t], a[1], xv[t].z, xv[t].w);
          }
        }
      }
    }
    // The stage was just read into registers that the MMAs above consumed: refill it.
    // Once the refills run past c1, the next kernel may take this CTA's place.
    if (c + (kStages + 1) * kU >= c1) AllowDependentLaunch();
    issue_weights(c + kStages * kU, stage);
    issue_x(c + kStages * kU, stage);
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  CpAsyncWait<0>();

  // Accumulator element i of tile (r, t): row g (+8 for i >= 2), token 2*t4 + (i & 1).
  const int row_base = rowblock * TileT::kRows;
  const int64_t token_base = static_cast<int64_t>(group) * TileT::kTokens;
  if constexpr (!kSplit) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row_base + (warp * kR + r) * 16 + g + 8 * half;
        if (row >= p.n) continue;
        const float scale = p.scales[row];
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int64_t token = token_base + 8 * t + 2 * t4 + j;
            if (token < p.m) {
              StoreWithResidual(p.y_dtype, p.y, p.residual, p.residual_dtype, token * p.n + row,
                                acc[r][t][2 * half + j] * scale);
            }
          }
        }
      }
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The partial tile overlays the rings: every warp must be done with its own first.
    __syncthreads();
    float* const part = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < kNT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = (warp * kR + r) * 16 + g + 8 * (i >> 1);
          const int token = 8 * t + 2 * t4 + (i & 1);
          part[token * TileT::kPartStride + row] = acc[r][t][i];
        }
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    // Each CTA of the cluster sums 1/splits of the tile over every CTA's partials, in rank
    // order (deterministic), and stores it: consecutive threads, consecutive rows.
    constexpr int kElements = TileT::kTokens * TileT::kRows;
    const int per = (kElements + p.splits - 1) / p.splits;
    const int end = min(kElements, (split + 1) * per);
    for (int e = split * per + threadIdx.x; e < end; e += TileT::kThreads) {
      const int token = e / TileT::kRows;
      const int row = e % TileT::kRows;
      float sum = 0.0f;
      for (int s = 0; s < p.splits; ++s) {
        sum += cluster.map_shared_rank(part, s)[token * TileT::kPartStride + row];
      }
      const int n = row_base + row;
      const int64_t m = token_base + token;
      if (n < p.n && m < p.m) {
        StoreWithResidual(p.y_dtype, p.y, p.residual, p.residual_dtype, m * p.n + n,
                          sum * p.scales[n]);
      }
    }
    // No CTA may exit while another still reads its shared memory.
    cluster.sync();
#else
    __trap();  // split launches are refused before sm_90
#endif
  }
}

template <typename T, typename TileT>
cudaError_t LaunchTile(const GemmArgs& args, const W8A16Options& options,
                       const DeviceInfo& device) {
  constexpr auto* kPlain = &W8A16Kernel<T, TileT, false>;
  constexpr auto* kSplitKernel = &W8A16Kernel<T, TileT, true>;
  constexpr int kSmem = static_cast<int>(TileT::kSmemBytes);
  // How many CTAs fit at once (the plain kernel), and clusters of the split one.
  KernelFit fit, split_fit;
  if (cudaError_t err =
          FitOf<kPlain, kSmem, TileT::kThreads>(device.ordinal, device.cc_major, &fit);
      err != cudaSuccess) {
    return err;
  }
  if (cudaError_t err =
          FitOf<kSplitKernel, kSmem, TileT::kThreads>(device.ordinal, device.cc_major, &split_fit);
      err != cudaSuccess) {
    return err;
  }
  std::copy(std::begin(split_fit.clusters), std::end(split_fit.clusters), fit.clusters);

  Params p{};
  p.w = static_cast<const uint4*>(args.weight);
  p.n = static_cast<int32_t>(args.shape.n);
  p.k = static_cast<int32_t>(args.shape.k);
  p.rt_count = static_cast<int32_t>((args.shape.n + 15) / 16);
  p.chunks = static_cast<int32_t>(args.shape.k / kChunkK);
  p.scales = reinterpret_cast<const float*>(static_cast<const uint8_t*>(args.weight) +
                                            int64_t{p.rt_count} * 16 * args.shape.k);
  p.y_dtype = args.y_dtype;
  p.residual_dtype = args.residual_dtype;
  const int64_t rowblocks = (p.rt_count + TileT::kRowTiles - 1) / TileT::kRowTiles;
  const int64_t all_groups = (args.m + TileT::kTokens - 1) / TileT::kTokens;

  int splits = options.splits;
  if (splits == 0) {
    splits = device.clusters() ? TileSplits(rowblocks * all_groups, device.sms, fit, p.chunks,
                                            TileT::kGroupChunks, TileT::kTokens)
                               : 1;
  }
  if (splits < 1 || splits > kMaxClusterCtas) return cudaErrorInvalidValue;
  if (splits > 1 && !device.clusters()) return cudaErrorInvalidValue;
  p.splits = splits;
  // Whole load groups per split, so only the last split has a partial group.
  constexpr int kU = TileT::kGroupChunks;
  p.chunks_per_split = ((p.chunks + splits - 1) / splits + kU - 1) / kU * kU;

  // Token groups per launch: the grid's x extent must stay below 2^31.
  const int64_t max_groups = std::max<int64_t>(1, (int64_t{1} << 30) / (rowblocks * splits));
  const size_t x_row_bytes = static_cast<size_t>(args.shape.k) * DTypeSize(args.x_dtype);
  const size_t y_row_bytes = static_cast<size_t>(args.shape.n) * DTypeSize(args.y_dtype);
  for (int64_t g0 = 0; g0 < all_groups; g0 += max_groups) {
    const int64_t groups = std::min(max_groups, all_groups - g0);
    const int64_t token0 = g0 * TileT::kTokens;
    p.x = static_cast<const uint8_t*>(args.x) + token0 * x_row_bytes;
    p.y = static_cast<uint8_t*>(args.y) + token0 * y_row_bytes;
    p.residual = args.residual == nullptr
                     ? nullptr
                     : static_cast<const uint8_t*>(args.residual) +
                           token0 * args.shape.n * DTypeSize(args.residual_dtype);
    p.m = std::min<int64_t>(args.m - token0, groups * TileT::kTokens);
    p.groups = static_cast<int32_t>(groups);
    const unsigned ctas = static_cast<unsigned>(rowblocks * groups * splits);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(TileT::kThreads);
    config.dynamicSmemBytes = TileT::kSmemBytes;
    config.stream = args.stream;
    cudaLaunchAttribute attrs[2] = {};
    int attr_count = 0;
    if (splits > 1) {
      attrs[0].id = cudaLaunchAttributeClusterDimension;
      attrs[0].val.clusterDim.x = static_cast<unsigned>(splits);
      attrs[0].val.clusterDim.y = 1;
      attrs[0].val.clusterDim.z = 1;
      attr_count = 1;
    }
    config.attrs = attrs;
    config.numAttrs = AppendDependentLaunch(device.cc_major, attrs, attr_count);
    if (cudaError_t err = cudaLaunchKernelEx(&config, splits == 1 ? kPlain : kSplitKernel, p);
        err != cudaSuccess) {
      return err;
    }
  }
  return cudaSuccess;
}

// CTAs of the decode kernel for up to 8NT tokens, R row tiles per warp (and kWarps warps;
// kGlu: a gated MLP's), that fit on the device at once, and its clusters (`fit`; the same
// on every device of one kind).
template <typename T, int NT, int R, bool kDeep = false, bool kCluster = false,
          int kWarps = w8a16::kDecodeWarps, bool kGlu = false>
cudaError_t DecodeFit(const DeviceInfo& device, int64_t* slots, KernelFit* fit_out = nullptr) {
  KernelFit fit;
  const cudaError_t err =
      FitOf<w8a16::DecodeKernel<T, NT, R, kDeep, kCluster, kWarps, false, kGlu>, 0, kWarps * 32>(
          device.ordinal, device.cc_major, &fit);
  if (err != cudaSuccess) return err;
  *slots = int64_t{device.sms} * fit.occupancy;
  if (fit_out != nullptr) *fit_out = fit;
  return cudaSuccess;
}

// The grid of the decode kernel for up to 8NT tokens, R row tiles per warp
// (decode_plan.h), and the CTAs of it that fit at once. Clusters (`cluster`:
// W8A16Options::decode_cluster) share the row sets of the two-row-tile tiles only: the
// one-row-tile grid has a row set for every SM wherever it is chosen.
template <typename T, int NT, int R>
cudaError_t PlanDecode(const WeightShape& shape, const DeviceInfo& device, int cluster,
                       DecodeGrid* grid, int64_t* slots) {
  if (R != 2) cluster = 1;
  if (cluster > 1 && device.cc_major < 9) return cudaErrorInvalidValue;
  cudaError_t err = DecodeFit<T, NT, R>(device, slots);
  if (err != cudaSuccess) return err;
  KernelFit fit;  // the clustered kernel's clusters (none for one row tile, or before sm_90)
  if constexpr (R == 2) {
    int64_t unused = 0;
    if ((err = DecodeFit<T, NT, R, false, true>(device, &unused, &fit)) != cudaSuccess) return err;
  }
  const int64_t sets = ((shape.n + 15) / 16 + R - 1) / R;
  *grid = MakeDecodeGrid(sets, static_cast<int>(shape.k / kChunkK),
                         R * w8a16::DecodeTile<NT, R>::kChunkBytes, device.sms, *slots,
                         fit.clusters, 1, 8, cluster);
  return cudaSuccess;
}

// The decode kernel's operands for `args`.
w8a16::DecodeParams MakeDecodeParams(const GemmArgs& args) {
  w8a16::DecodeParams p{};
  p.row_tiles = static_cast<int32_t>((args.shape.n + 15) / 16);
  p.chunks = static_cast<int32_t>(args.shape.k / kChunkK);
  p.w = static_cast<const uint8_t*>(args.weight);
  p.scales = reinterpret_cast<const float*>(p.w + int64_t{p.row_tiles} * 16 * args.shape.k);
  p.x = args.x;
  p.y = args.y;
  p.m = args.m;
  p.n = args.shape.n;
  p.k = args.shape.k;
  p.y_dtype = args.y_dtype;
  p.residual = args.residual;
  p.residual_dtype = args.residual_dtype;
  return p;
}

// The decode kernel (w8a16_decode.cuh) for up to 8NT tokens, R row tiles per warp, when
// its row sets fit on the device at once and each CTA's share of K is at most
// kDecodeMaxK, or on the stream-K grid of 16-warp CTAs (W8A16StreamPays); otherwise
// *launched stays false. Measured on the H200 (qmm-kernel-bench
// shapes): with more row sets than CTAs at once (N >= 14336 there) the last turn of the
// persistent grid leaves SMs with few bytes in flight, and with K = 14336 on one CTA each
// warp's run grows long; the cluster tiles were faster on those (64.5 against 84 us on
// 8192 x 28672; 14336 x 4096: 28.2 against 26.3). Clusters of two CTAs a row set took
// 14336 x 4096 to 21.0 us at M = 1 (22.9 at M = 16, against 32.4) and 4096 x 4096 from
// 8.7 to 7.7 (M = 16: 11.7 -> 8.5).
// Deep tiles (one token tile: twice the bytes in flight per warp, w8a16_decode.cuh) where
// the grid is no larger than they fit at once and no cluster shares a set: 4096 x 4096 at
// M = 1, 10.2 -> 8.8 us. The 16-warp CTAs (kWideWarps) split a set's K over twice the
// warps, so they take twice the K.
constexpr int64_t kDecodeMaxK = 8192;
// `may_defer`: leave the launch to the tile kernel where that streams faster
// (TileBeatsDecode, tile_splits.h). `cluster`, `warps`, `stream`:
// W8A16Options::decode_cluster, decode_warps, decode_stream.
template <typename T, int NT, int R>
cudaError_t LaunchDecode(const GemmArgs& args, const DeviceInfo& device, int cluster, int warps,
                         int stream, bool may_defer, bool* launched) {
  *launched = false;
  DecodeGrid grid;
  int64_t slots = 0;
  if (cudaError_t err = PlanDecode<T, NT, R>(args.shape, device, cluster, &grid, &slots);
      err != cudaSuccess) {
    return err;
  }
  int64_t deep_slots = 0;
  int64_t wide_slots = 0;
  if constexpr (NT == 1) {
    if (cudaError_t err = DecodeFit<T, NT, R, true>(device, &deep_slots); err != cudaSuccess) {
      return err;
    }
  }
  if (cudaError_t err = DecodeFit<T, NT, R, false, false, w8a16::kWideWarps>(device, &wide_slots);
      err != cudaSuccess) {
    return err;
  }
  w8a16::DecodeParams p = MakeDecodeParams(args);
  const int64_t sets = (p.row_tiles + R - 1) / R;
  // Where the two-row-tile sets outnumber the 16-warp CTAs that fit, or fit them with
  // more K than one takes, the stream-K grid of those CTAs (W8A16StreamPays,
  // decode_plan.h). On the H200 against the tile kernel (session 35), M = 1 / 8 / 16: 4096
  // x 14336 17.59 / 18.23 / 22.25 -> 16.83 / 17.28 / 20.67 us, 8192 x 10240 23.95 / 24.22
  // / 36.74 -> 22.31 / 22.80 / 26.63, 8192 x 28672 61.84 / 62.84 (-> 57.34 / 59.45) /
  // 66.17 (-> 72.70, not taken).
  if constexpr (R == 2) {
    constexpr auto* kStreamKernel =
        w8a16::DecodeKernel<T, NT, R, false, false, w8a16::kWideWarps, true>;
    const bool on = stream == 2 || (stream == 0 && W8A16StreamPays(grid, wide_slots, sets, NT == 1,
                                                                   args.shape.k > 2 * kDecodeMaxK));
    if (on && args.sync != nullptr && grid.cluster == 1 && warps != w8a16::kDecodeWarps) {
      *launched = true;
      return LaunchStreamGrid(kStreamKernel, p, args, wide_slots, sets, R * NT * 32 * 4,
                              w8a16::kWideWarps * 32, device.cc_major);
    }
  }
  // Where clusters of two 8-warp CTAs would share the two-row-tile sets, clusters of two
  // 16-warp CTAs if those all fit at once, up to twice the K (14336 x 4096: 128 sets, 14
  // chunks a warp). On the H200 against the 8-warp clusters (session 35), M = 1 / 8 / 16:
  // 14336 x 4096 20.36 / 20.67 / 22.55 -> 17.47 / 17.72 / 18.33 us, 14336 x 2048 13.62
  // -> 12.54 at M = 1.
  if constexpr (R == 2) {
    if (grid.cluster == 2 && warps != w8a16::kDecodeWarps &&
        args.shape.k <= 2 * kDecodeMaxK * grid.cluster) {
      constexpr auto* kWideCluster = w8a16::DecodeKernel<T, NT, R, false, true, w8a16::kWideWarps>;
      KernelFit fit;
      int64_t unused = 0;
      if (cudaError_t err =
              DecodeFit<T, NT, R, false, true, w8a16::kWideWarps>(device, &unused, &fit);
          err != cudaSuccess) {
        return err;
      }
      if (sets <= fit.clusters[2]) {
        DecodeGrid pairs;
        pairs.cluster = 2;
        pairs.units = sets;
        pairs.ctas = sets * 2;
        p.cluster_shift = pairs.cluster_shift();
        p.early_trigger = EarlyTrigger(pairs.ctas, int64_t{fit.clusters[2]} * 2);
        *launched = true;
        return DecodeLaunch(pairs, w8a16::kWideWarps * 32, args.stream, device.cc_major)(
            kWideCluster, p);
      }
    }
  }
  // One row set a CTA on at most two CTAs an SM: 16 warps on each set (kWideWarps,
  // w8a16_decode.cuh).
  const bool wide = warps != w8a16::kDecodeWarps && TakesWideCtas(grid, wide_slots);
  const int64_t max_k = kDecodeMaxK * grid.cluster * (wide ? 2 : 1);
  if (sets > slots || args.shape.k > max_k) return cudaSuccess;
  if (may_defer && TileBeatsDecode(grid, p.chunks, device.sms, wide)) return cudaSuccess;
  p.split_shift = grid.split_shift();
  p.cluster_shift = grid.cluster_shift();
  const bool deep = grid.cluster == 1 && grid.ctas <= deep_slots;
  p.early_trigger = EarlyTrigger(grid.ctas, wide ? wide_slots : deep ? deep_slots : slots);
  const DecodeLaunch launch(grid, (wide ? w8a16::kWideWarps : w8a16::kDecodeWarps) * 32,
                            args.stream, device.cc_major);
  *launched = true;
  if constexpr (R == 2) {
    if (grid.cluster > 1) return launch(w8a16::DecodeKernel<T, NT, R, false, true>, p);
  }
  if (wide) return launch(w8a16::DecodeKernel<T, NT, R, false, false, w8a16::kWideWarps>, p);
  if constexpr (NT == 1) {
    if (deep) return launch(w8a16::DecodeKernel<T, NT, R, true>, p);
  }
  return launch(w8a16::DecodeKernel<T, NT, R>, p);
}

// The wgmma GEMM's knobs in `options`: a forced split is the GEMM's only with forced groups.
wgmma_gemm::Options WgmmaOptions(const W8A16Options& options) {
  wgmma_gemm::Options wgmma_options;
  wgmma_options.groups = options.wgmma_groups;
  wgmma_options.splits = options.wgmma_groups != 0 ? options.splits : 0;
  return wgmma_options;
}

template <typename T>
cudaError_t LaunchFor(const GemmArgs& args, const W8A16Options& options, const DeviceInfo& device) {
  // Beyond 16 tokens (or forced) the wgmma GEMM where K allows it (K % 128 == 0) and the
  // device runs it (sm_90a), and at 9-16 tokens on the widths where it streams faster than
  // the decode kernels (W8A16GemmBeatsDecode, decode_plan.h). Up to 16 tokens the decode
  // kernel where it is faster (LaunchDecode), unless a split count is forced (tuning).
  // Otherwise (and wherever the wgmma GEMM cannot run) the mma.sync kernel with the token
  // tile by M. Each config takes 96 KB of ring per CTA (two CTAs per SM). Up to 32 tokens:
  // 4 warps x 2 row tiles, 32-48 KB of weights in flight per CTA. From 33 tokens on:
  // 64-token tiles with 4 row tiles per warp, so that each activation fragment feeds 4
  // MMAs (the MMA and shared-memory rates, not HBM, set the pace there).
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  bool gemm = options.wgmma_groups != 0 || (options.splits == 0 && args.m > 16);
  if (!gemm && args.m > 8 && options.splits == 0 && !options.tile && options.decode_rows == 0 &&
      options.decode_cluster == 0 && options.decode_warps == 0 && options.decode_stream == 0) {
    int64_t wide_slots = 0;
    if (cudaError_t err = DecodeFit<T, 2, 2, false, false, w8a16::kWideWarps>(device, &wide_slots);
        err != cudaSuccess) {
      return err;
    }
    gemm = W8A16GemmBeatsDecode(args.shape.n, args.shape.k, wide_slots, device.sms);
  }
  if (gemm && args.shape.k % 128 == 0) {
    bool launched = false;
    const cudaError_t err =
        wgmma_gemm::Launch<w8a16::WgmmaFormat, kBf16>(args, WgmmaOptions(options), &launched);
    if (err != cudaSuccess || launched) return err;
  }
  if (options.splits == 0 && !options.tile && args.m <= 16) {
    bool launched = false;
    // Up to 8 tokens, two row tiles a warp (late refills, w8a16_decode.cuh) wherever that
    // grid still has a row set for every SM, or clusters of CTAs share its sets
    // (decode_plan.h), else one. At M = 1 on the H200: 8192 x 6144 19.7 against 23.2 us,
    // 4096 x 6144 10.4 against 12.4, 8192 x 8192 21.8 against 22.5, and 8192 x 11008,
    // whose one-row-tile grid does not fit (the cluster tiles took it), 25.3 against
    // 29.6; 4096 x 4096 (128 sets for 132 SMs) took 10.2 against 8.8 before clusters.
    const int cluster = options.decode_cluster;
    const int64_t pairs = ((args.shape.n + 15) / 16 + 1) / 2;
    const int warps = options.decode_warps;
    bool wide_one = false;
    bool two = options.decode_rows == 2 || (options.decode_rows == 0 && pairs >= device.sms);
    if (options.decode_rows == 0 && !two && args.m <= 8) {
      DecodeGrid grid;
      int64_t slots = 0;
      if (cudaError_t err = PlanDecode<T, 1, 2>(args.shape, device, cluster, &grid, &slots);
          err != cudaSuccess) {
        return err;
      }
      two = grid.cluster > 1;
      // Where the two-row-tile sets need clusters and K is short, the one-row-tile sets on
      // 16-warp CTAs if those all fit at once. On the H200 at M = 1 (session 35), against
      // the 16-warp clusters of two-row-tile sets (LaunchDecode): 4096 x 4096 6.53 against
      // 7.16 us, 4096 x 2048 5.48 against 5.69; from K = 8192 no faster (8192 x 4096
      // 11.32 against 11.21) or slower (14336 x 4096 18.61 against 17.47, 14336 x 2048
      // 15.90 against 12.54).
      if (two && cluster == 0 && warps == 0 && args.shape.k < kDecodeMaxK) {
        int64_t wide_slots = 0;
        if (cudaError_t err =
                DecodeFit<T, 1, 1, false, false, w8a16::kWideWarps>(device, &wide_slots);
            err != cudaSuccess) {
          return err;
        }
        wide_one = (args.shape.n + 15) / 16 <= wide_slots;
        two = !wide_one;
      }
    }
    const int stream = options.decode_stream;
    const bool may_defer = options.decode_rows == 0 && cluster == 0 && warps == 0;
    // The one-row-tile tile's 16-warp CTAs only where chosen above or forced.
    const int one_warps = wide_one ? w8a16::kWideWarps : warps == 0 ? w8a16::kDecodeWarps : warps;
    const cudaError_t err =
        args.m > 8
            ? LaunchDecode<T, 2, 2>(args, device, cluster, warps, stream, may_defer, &launched)
        : two
            ? LaunchDecode<T, 1, 2>(args, device, cluster, warps, stream, may_defer, &launched)
            : LaunchDecode<T, 1, 1>(args, device, cluster, one_warps, stream, may_defer, &launched);
    if (err != cudaSuccess || launched) return err;
  }
  if (args.m <= 8) return LaunchTile<T, Tile<1, 2, 4, 4, 4>>(args, options, device);
  if (args.m <= 16) return LaunchTile<T, Tile<2, 2, 4, 2, 6>>(args, options, device);
  if (args.m <= 32) return LaunchTile<T, Tile<4, 2, 4, 2, 4>>(args, options, device);
  return LaunchTile<T, Tile<8, 4, 4, 1, 4>>(args, options, device);
}

// A gated MLP's decode kernel (kGlu) for up to 16 tokens: a row set is a gate row tile and
// its up row tile (for one token tile of two beyond 8 rows), one set a CTA at a time on the
// 16-warp CTAs (kWideWarps), two an SM, each CTA striding over the sets; the CTAs are as
// many as give each the same number of sets in the fewest turns. On the 8-warp grid, whose
// tiles of two row tiles fit two CTAs (16 warps) an SM, the pair streamed slower: on an
// H100 the Llama-3-8B pair (4096 x 14336 twice) at M = 1 took 40.9 us there against 43.8
// (and 44.6 as gate, up and their product apart); on the H200 the 8-warp grid took 34.2 us
// against 34.9 apart. Taking every CTA that fits (uneven sets a CTA) measured 40.1 us
// against 39.8 on an H100.
template <typename T>
cudaError_t LaunchGlu(const GemmArgs& args, const DeviceInfo& device, const void* up,
                      Activation act) {
  constexpr int kWarps = w8a16::kWideWarps;
  constexpr auto kKernel = w8a16::DecodeKernel<T, 1, 2, false, false, kWarps, false, true>;
  int64_t slots = 0;
  if (cudaError_t err = DecodeFit<T, 1, 2, false, false, kWarps, true>(device, &slots);
      err != cudaSuccess) {
    return err;
  }
  w8a16::DecodeParams p = MakeDecodeParams(args);
  p.w_up = static_cast<const uint8_t*>(up);
  p.scales_up = reinterpret_cast<const float*>(p.w_up + int64_t{p.row_tiles} * 16 * args.shape.k);
  p.glu_act = act;
  p.glu_tile_shift = args.m > 8 ? 1 : 0;
  const int64_t sets = int64_t{p.row_tiles} << p.glu_tile_shift;
  DecodeGrid grid;
  grid.split = kWarps;
  grid.units = sets;
  const int64_t turns = (sets + slots - 1) / slots;
  grid.ctas = (sets + turns - 1) / turns;
  p.early_trigger = EarlyTrigger(grid.ctas, slots);
  return DecodeLaunch(grid, kWarps * 32, args.stream, device.cc_major)(kKernel, p);
}

// The checks every launch makes of `args`.
bool ArgsOk(const GemmArgs& args) {
  const auto out_dtype = [](DType d) {
    return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
  };
  return args.m >= 1 && args.shape.k % 64 == 0 && args.shape.n >= 1 && args.weight != nullptr &&
         args.x != nullptr && args.y != nullptr &&
         (args.x_dtype == DType::kF16 || args.x_dtype == DType::kBF16) && out_dtype(args.y_dtype) &&
         (args.residual == nullptr || out_dtype(args.residual_dtype));
}

}  // namespace

cudaError_t LaunchW8A16(const GemmArgs& args, const W8A16Options& options) {
  if (!ArgsOk(args) || !wgmma_gemm::Valid(WgmmaOptions(options)) || options.decode_rows < 0 ||
      options.decode_rows > 2 || options.decode_cluster < 0 || options.decode_cluster > 4 ||
      options.decode_cluster == 3 || options.decode_stream < 0 || options.decode_stream > 2 ||
      (options.decode_warps != 0 && options.decode_warps != w8a16::kDecodeWarps &&
       options.decode_warps != w8a16::kWideWarps) ||
      options.splits < 0 || options.splits > kMaxClusterCtas) {
    return cudaErrorInvalidValue;
  }
  DeviceInfo device;
  if (cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  return args.x_dtype == DType::kF16 ? LaunchFor<__half>(args, options, device)
                                     : LaunchFor<__nv_bfloat16>(args, options, device);
}

cudaError_t LaunchW8A16(const GemmArgs& args) { return LaunchW8A16(args, W8A16Options{}); }

cudaError_t LaunchW8A16Glu(const GemmArgs& args, const void* up, Activation act) {
  if (!ArgsOk(args) || !GluArgsOk(args, up, kW8A16GluMaxM)) {
    return cudaErrorInvalidValue;
  }
  DeviceInfo device;
  if (cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  return args.x_dtype == DType::kF16 ? LaunchGlu<__half>(args, device, up, act)
                                     : LaunchGlu<__nv_bfloat16>(args, device, up, act);
}

}  // namespace qmm::cuda
