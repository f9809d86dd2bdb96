// W4A16 launch: picks the kernel and tile for M and the K split for the shape (contract
// in w4a16.h, layout in w4a16_layout.h, kernels in w4a16_direct.cuh / w4a16_staged.cuh).
#include <algorithm>
#include <atomic>
#include <climits>

#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w4a16_decode.cuh"
#include "kernels/cuda/w4a16_direct.cuh"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_staged.cuh"
#include "kernels/cuda/w4a16_wgmma.cuh"

namespace qmm::cuda {
namespace {

using w4a16::kChunkK;
using w4a16::kGroupChunkBytes;
using w4a16::kGroupScaleBytes;
using w4a16::kMaxSplits;
using w4a16::kThreads;
using w4a16::Params;

// What fits on the device at once of one kernel: CTAs per SM, and clusters of 2, 4 and 8
// CTAs (index log2 of the size; a cluster's CTAs must share a GPC, so on the H200 a
// kernel of one CTA per SM fits 30 clusters of 4, not 33). The same on every device of
// one kind, so computed once per process; the first call also opts the kernel into
// `kSmem` bytes of dynamic shared memory (more than 48 KB needs that, once per device).
struct KernelFit {
  int occupancy = 0;
  int clusters[4] = {};
};

template <auto kKernel, int kSmem, int kBlock = kThreads>
cudaError_t FitOf(int device, int cc_major, KernelFit* fit) {
  static std::atomic<uint64_t> configured{0};
  static std::atomic<int> occupancy{0};
  static std::atomic<int> clusters[4] = {};
  if (device >= 64 || (configured.load() >> device & 1) == 0) {
    cudaError_t err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    int occ = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kKernel, kBlock, kSmem);
    if (err != cudaSuccess) return err;
    occupancy.store(std::max(occ, 1));
    for (int i = 1; cc_major >= 9 && i < 4; ++i) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(1, 1, 1u << i);
      config.blockDim = dim3(kBlock);
      config.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 1;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1u << i;
      config.attrs = &attr;
      config.numAttrs = 1;
      int n = 0;
      err = cudaOccupancyMaxActiveClusters(&n, kKernel, &config);
      if (err != cudaSuccess) return err;
      clusters[i].store(n);
    }
    if (device < 64) configured.fetch_or(uint64_t{1} << device);
  }
  fit->occupancy = occupancy.load();
  for (int i = 1; i < 4; ++i) fit->clusters[i] = clusters[i].load();
  return cudaSuccess;
}

struct SplitChoice {
  int splits = 1;
  double cost = 0;  // chunks on the busiest SM
};

// Work on the busiest SM, in chunks, for each split count; the least wins. CTAs beyond
// what fits at once (clusters included) run in a later turn. Each extra split costs a
// little reduction. For one token tile (pure streaming) one CTA per SM keeps too few
// bytes in flight where more could fit; with more tokens per CTA the longer per-CTA runs
// measured faster.
SplitChoice ChooseSplits(int64_t base_ctas, int chunks, int sms, const KernelFit& fit,
                         bool streaming) {
  SplitChoice best;
  for (int s = 1, log = 0; s <= kMaxSplits && (s == 1 || s <= chunks); s *= 2, ++log) {
    const int64_t ctas = base_ctas * s;
    const int64_t room = int64_t{sms} * fit.occupancy;
    const int64_t slots = s == 1 ? room : std::min<int64_t>(room, int64_t{fit.clusters[log]} * s);
    if (slots == 0) continue;
    int64_t per_sm = (ctas + sms - 1) / sms;
    // Fewer clusters fit than SMs would hold: whole turns of them.
    if (slots < room) per_sm = std::max(per_sm, (ctas + slots - 1) / slots * fit.occupancy);
    double cost = static_cast<double>(per_sm) * ((chunks + s - 1) / s);
    if (streaming && per_sm < 2 && fit.occupancy >= 2) cost *= 1.5;
    cost *= 1 + 0.03 * (s - 1);
    if (s == 1 || cost < best.cost) best = {s, cost};
  }
  return best;
}

// Launches `kKernel` with tiles of 8T tokens x 128R rows, kBlock threads and `kSmem` bytes
// of dynamic shared memory, as a dependent launch (dependent_launch.h) if kDependent.
template <auto kKernel, int T, int R, int kSmem, bool kDependent, int kBlock = kThreads>
cudaError_t Launch(const GemmArgs& args, const W4A16Options& options) {
  DeviceInfo device;
  cudaError_t err = CurrentDeviceInfo(&device);
  if (err != cudaSuccess) return err;
  KernelFit fit;
  if ((err = FitOf<kKernel, kSmem, kBlock>(device.ordinal, device.cc_major, &fit)) != cudaSuccess) {
    return err;
  }
  const int major = device.cc_major;
  const WeightShape& shape = args.shape;
  const int64_t token_tiles = (args.m + T * 8 - 1) / (T * 8);
  const int64_t groups = w4a16::NumGroups(shape);
  const int64_t row_tiles = (groups + R - 1) / R;
  const int chunks = static_cast<int>(w4a16::NumChunks(shape));
  if (token_tiles > INT_MAX || row_tiles > 65535 || chunks > 65535) return cudaErrorInvalidValue;
  int splits = options.splits;
  if (splits == 0) {
    splits = major >= 9 ? ChooseSplits(token_tiles * row_tiles, chunks, device.sms, fit,
                                       /*streaming=*/T == 1)
                              .splits
                        : 1;
  }
  if (splits > 1 && major < 9) return cudaErrorInvalidValue;
  Params p;
  p.w = static_cast<const uint8_t*>(args.weight);
  p.s = p.w + w4a16::WeightRegionBytes(shape);
  p.x = args.x;
  p.y = args.y;
  p.m = args.m;
  p.n = shape.n;
  p.k = shape.k;
  p.groups = groups;
  p.w_group_stride = chunks * int64_t{kGroupChunkBytes};
  p.w_chunk_stride = kGroupChunkBytes;
  p.s_group_stride = w4a16::ScaleGroups(shape) * kGroupScaleBytes;
  p.s_chunk_stride = shape.group_size == 0 ? 0 : kGroupScaleBytes;
  p.chunks = chunks;
  p.splits = splits;
  p.y_dtype = args.y_dtype;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(row_tiles),
                        static_cast<unsigned>(splits));
  config.blockDim = dim3(kBlock);
  config.dynamicSmemBytes = kSmem;
  config.stream = args.stream;
  cudaLaunchAttribute attrs[2] = {};
  int attr_count = 0;
  if (splits > 1) {
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = 1;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = static_cast<unsigned>(splits);
    attr_count = 1;
  }
  config.attrs = attrs;
  config.numAttrs = kDependent ? AppendDependentLaunch(major, attrs, attr_count) : attr_count;
  return cudaLaunchKernelEx(&config, kKernel, p);
}

template <int T, bool kBf16>
cudaError_t LaunchDirect(const GemmArgs& args, const W4A16Options& options) {
  return Launch<w4a16::DirectKernel<T, kBf16>, T, 1, 0, true>(args, options);
}

// Not a dependent launch: on the H200 it made this kernel slower at every M it serves
// (8192 x 28672 at M = 1: 43.3 us against 37.6; 4096 x 14336: 14.2 against 13.9).
template <int T, int R, bool kBf16>
cudaError_t LaunchStaged(const GemmArgs& args, const W4A16Options& options) {
  return Launch<w4a16::StagedKernel<T, R, kBf16>, T, R, w4a16::StagedTile<T, R>::kSmemBytes, false>(
      args, options);
}

template <int NT, int G, bool kBf16>
cudaError_t LaunchWgmma(const GemmArgs& args, const W4A16Options& options) {
  return Launch<w4a16::WgmmaKernel<NT, G, kBf16>, NT / 8, G, w4a16::WgmmaTile<NT, G>::kSmemBytes,
                true, w4a16::kWgmmaThreads>(args, options);
}

// The wgmma kernel's activations, permuted into the workspace (w4a16_wgmma.cuh).
template <int NT>
cudaError_t LaunchPermute(const GemmArgs& args, const DeviceInfo& device) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((args.m + NT - 1) / NT),
                        static_cast<unsigned>(w4a16::NumChunks(args.shape)));
  config.blockDim = dim3(kThreads);
  config.stream = args.stream;
  cudaLaunchAttribute pdl[1];
  config.attrs = pdl;
  config.numAttrs = AppendDependentLaunch(device.cc_major, pdl, 0);
  return cudaLaunchKernelEx(&config, w4a16::PermuteKernel<NT>, args.x,
                            static_cast<uint8_t*>(args.workspace), args.m, args.shape.k);
}

// The wgmma kernel's split and groups per CTA (G) for this launch, unless forced. Per
// chunk a CTA of one group does about half the work of one of two (the same activation
// traffic, half the weights and MMAs), measured on the H200 at kOneGroupChunkCost of it.
template <int NT, bool kBf16>
cudaError_t PlanWgmma(const GemmArgs& args, const DeviceInfo& device, W4A16Options* options) {
  constexpr double kOneGroupChunkCost = 0.6;
  const WeightShape& shape = args.shape;
  const int64_t token_tiles = (args.m + NT - 1) / NT;
  const int64_t groups = w4a16::NumGroups(shape);
  const int chunks = static_cast<int>(w4a16::NumChunks(shape));
  KernelFit fit;
  cudaError_t err = FitOf<w4a16::WgmmaKernel<NT, 1, kBf16>, w4a16::WgmmaTile<NT, 1>::kSmemBytes,
                          w4a16::kWgmmaThreads>(device.ordinal, device.cc_major, &fit);
  if (err != cudaSuccess) return err;
  const SplitChoice one = ChooseSplits(token_tiles * groups, chunks, device.sms, fit, false);
  SplitChoice two = one;
  // 128-token tiles take one group: two would need more registers than a thread has.
  if constexpr (NT < 128) {
    err = FitOf<w4a16::WgmmaKernel<NT, 2, kBf16>, w4a16::WgmmaTile<NT, 2>::kSmemBytes,
                w4a16::kWgmmaThreads>(device.ordinal, device.cc_major, &fit);
    if (err != cudaSuccess) return err;
    two = ChooseSplits(token_tiles * ((groups + 1) / 2), chunks, device.sms, fit, false);
    if (options->wgmma_groups == 0) {
      options->wgmma_groups = one.cost * kOneGroupChunkCost < two.cost ? 1 : 2;
    }
  } else {
    options->wgmma_groups = 1;
  }
  if (options->splits == 0) options->splits = options->wgmma_groups == 1 ? one.splits : two.splits;
  // Every CTA must own at least one chunk (the kernel's accumulators start at its first).
  while (options->splits > chunks) options->splits /= 2;
  return cudaSuccess;
}

// The wgmma kernel where it runs as sm_90a code: tiles of 32 tokens up to 32, of 64 up to
// 64, then of 128 (below); several token tiles read each weight tile together (mostly
// once from HBM, then from L2). A forced options.wgmma_groups of 2 keeps 64-token tiles.
// Sets *launched to whether it did.
template <bool kBf16>
cudaError_t LaunchWgmmaForM(const GemmArgs& args, W4A16Options options, bool* launched) {
  // Per device: bit 2d says device d was checked, bit 2d + 1 that it runs the kernel.
  static std::atomic<uint64_t> checked{0};
  DeviceInfo device;
  cudaError_t err = CurrentDeviceInfo(&device);
  if (err != cudaSuccess) return err;
  uint64_t bits = device.ordinal < 32 ? checked.load() >> (2 * device.ordinal) : 0;
  if ((bits & 1) == 0) {
    bool ok = false;
    err = wgmma::Available(w4a16::WgmmaKernel<32, 2, kBf16>, &ok);
    if (err != cudaSuccess) return err;
    bits = ok ? 3 : 1;
    if (device.ordinal < 32) checked.fetch_or(bits << (2 * device.ordinal));
  }
  *launched = (bits & 2) != 0;
  if (!*launched) return cudaSuccess;
  if (args.workspace == nullptr) return cudaErrorInvalidValue;
  // The matmul reads the permuted activations from the workspace.
  GemmArgs permuted = args;
  permuted.x = args.workspace;
  if (args.m <= 32) {
    if ((err = PlanWgmma<32, kBf16>(args, device, &options)) != cudaSuccess ||
        (err = LaunchPermute<32>(args, device)) != cudaSuccess) {
      return err;
    }
    return options.wgmma_groups == 1 ? LaunchWgmma<32, 1, kBf16>(permuted, options)
                                     : LaunchWgmma<32, 2, kBf16>(permuted, options);
  }
  // 128-token tiles (one group per CTA) halve the dequantization per product against 64;
  // on the H200 they won at M = 256 on every benchmark shape (8192 x 28672: 237 us
  // against 280), at M = 128 only from N = 8192 on (4096 x 4096: 27.9 against 17.5).
  const bool wide = args.m > 128 || (args.m > 64 && args.shape.n >= 8192);
  if (!wide || options.wgmma_groups == 2) {
    if ((err = PlanWgmma<64, kBf16>(args, device, &options)) != cudaSuccess ||
        (err = LaunchPermute<64>(args, device)) != cudaSuccess) {
      return err;
    }
    return options.wgmma_groups == 1 ? LaunchWgmma<64, 1, kBf16>(permuted, options)
                                     : LaunchWgmma<64, 2, kBf16>(permuted, options);
  }
  if ((err = PlanWgmma<128, kBf16>(args, device, &options)) != cudaSuccess ||
      (err = LaunchPermute<128>(args, device)) != cudaSuccess) {
    return err;
  }
  return LaunchWgmma<128, 1, kBf16>(permuted, options);
}

// Below this many bytes of weights the launch and pipeline fill dominate.
constexpr int64_t kSmallWeightBytes = int64_t{16} << 20;

// Warps per row set (S) for the decode kernel. Cost: the strips on the busiest SM (CTAs
// take row sets in turn, so SM b % sms holds CTAs b, b + sms, ...), 10% more when the
// row sets outnumber the CTAs that fit at once (the last turn leaves CTAs idle and fewer
// bytes in flight); ties go to more warps per set, which shortens each warp's run.
int ChooseStripWarps(int64_t sets, int chunks, int sms, int64_t slots) {
  int best = 1;
  double best_cost = -1;
  for (int s = w4a16::kWarps; s >= 1; s /= 2) {
    if (s > chunks && s > 1) continue;
    const int per_cta = w4a16::kWarps / s;
    const int64_t units = (sets + per_cta - 1) / per_cta;
    double cost = static_cast<double>((units + sms - 1) / sms * std::min<int64_t>(per_cta, sets));
    if (units > slots) cost *= 1.1;
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// CTAs of the decode kernel for up to 8T tokens, R strips per warp, that fit on the
// device at once (the occupancy is the same on every device of one kind).
template <int T, int R, bool kBf16>
cudaError_t DecodeSlots(const DeviceInfo& device, int64_t* slots) {
  static std::atomic<int> occupancy{0};
  int occ = occupancy.load();
  if (occ == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &occ, w4a16::DecodeKernel<T, R, kBf16>, kThreads, 0);
    if (err != cudaSuccess) return err;
    occ = std::max(occ, 1);
    occupancy.store(occ);
  }
  *slots = int64_t{device.sms} * occ;
  return cudaSuccess;
}

// Row sets (R strips each) of the decode kernel.
int64_t DecodeSets(const WeightShape& shape, int r) {
  return ((shape.n + w4a16::kStripRows - 1) / w4a16::kStripRows + r - 1) / r;
}

// The decode kernel (w4a16_decode.cuh) for up to 8T tokens, R strips per warp.
template <int T, int R, bool kBf16>
cudaError_t LaunchDecode(const GemmArgs& args, const DeviceInfo& device) {
  int64_t slots = 0;
  const cudaError_t err = DecodeSlots<T, R, kBf16>(device, &slots);
  if (err != cudaSuccess) return err;
  const WeightShape& shape = args.shape;
  const int chunks = static_cast<int>(w4a16::NumChunks(shape));
  const int64_t sets = DecodeSets(shape, R);
  const int split = ChooseStripWarps(sets, chunks, device.sms, slots);
  const int64_t per_cta = w4a16::kWarps / split;
  const int64_t units = (sets + per_cta - 1) / per_cta;
  const int64_t ctas = std::min(units, slots);

  Params p;
  p.w = static_cast<const uint8_t*>(args.weight);
  p.s = p.w + w4a16::WeightRegionBytes(shape);
  p.x = args.x;
  p.y = args.y;
  p.m = args.m;
  p.n = shape.n;
  p.k = shape.k;
  p.groups = w4a16::NumGroups(shape);
  p.w_group_stride = chunks * int64_t{kGroupChunkBytes};
  p.w_chunk_stride = kGroupChunkBytes;
  p.s_group_stride = w4a16::ScaleGroups(shape) * kGroupScaleBytes;
  p.s_chunk_stride = shape.group_size == 0 ? 0 : kGroupScaleBytes;
  p.chunks = chunks;
  p.splits = split;
  p.y_dtype = args.y_dtype;
  p.early_trigger = EarlyTrigger(ctas, slots);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(kThreads);
  config.stream = args.stream;
  cudaLaunchAttribute pdl[1];
  config.attrs = pdl;
  config.numAttrs = AppendDependentLaunch(device.cc_major, pdl, 0);
  return cudaLaunchKernelEx(&config, w4a16::DecodeKernel<T, R, kBf16>, p);
}

template <bool kBf16>
cudaError_t LaunchForM(const GemmArgs& args, const W4A16Options& options) {
  // Choices measured on the H200 (qmm-kernel-bench shapes). Up to 16 tokens the decode
  // kernel, except for up to 8 tokens on more strips than its CTAs cover at once (N >=
  // 14336 there): the last turn of its persistent grid leaves SMs with few bytes in
  // flight, and the cluster kernels were faster (36 against 40-42 us on 8192 x 28672).
  // Beyond 16 tokens the wgmma kernel (sm_90a). A forced split count (tuning) takes the
  // mma.sync cluster kernels at every M, as does a device without wgmma. Those: up to 8
  // tokens, small weights stream through registers and larger ones through 2-group
  // shared-memory stages; up to 16 tokens one group per CTA; beyond, 32 tokens x 256 rows
  // per CTA keeps the shared-memory traffic per mma low, and further token tiles run side
  // by side and re-read each weight tile mostly from L2.
  if (options.wgmma_groups != 0) {
    bool launched = false;
    const cudaError_t err = LaunchWgmmaForM<kBf16>(args, options, &launched);
    if (err != cudaSuccess || launched) return err;
  }
  if (options.splits == 0 && args.m <= 16) {
    DeviceInfo device;
    cudaError_t err = CurrentDeviceInfo(&device);
    if (err != cudaSuccess) return err;
    if (args.m > 8) return LaunchDecode<2, 2, kBf16>(args, device);
    int64_t slots = 0;
    err = DecodeSlots<1, 1, kBf16>(device, &slots);
    if (err != cudaSuccess) return err;
    if (DecodeSets(args.shape, 1) <= slots) return LaunchDecode<1, 1, kBf16>(args, device);
  }
  if (args.m <= 8) {
    return w4a16::DeviceBytes(args.shape) < kSmallWeightBytes
               ? LaunchDirect<1, kBf16>(args, options)
               : LaunchStaged<1, 2, kBf16>(args, options);
  }
  if (args.m <= 16) return LaunchStaged<2, 1, kBf16>(args, options);
  if (options.splits == 0) {
    bool launched = false;
    const cudaError_t err = LaunchWgmmaForM<kBf16>(args, options, &launched);
    if (err != cudaSuccess || launched) return err;
  }
  return LaunchStaged<4, 2, kBf16>(args, options);
}

}  // namespace

cudaError_t LaunchW4A16(const GemmArgs& args, const W4A16Options& options) {
  const WeightShape& shape = args.shape;
  const bool dtypes_ok =
      (args.x_dtype == DType::kF16 || args.x_dtype == DType::kBF16) &&
      (args.y_dtype == DType::kF32 || args.y_dtype == DType::kF16 || args.y_dtype == DType::kBF16);
  const bool shape_ok = shape.n >= 1 && shape.k >= kChunkK && shape.k % kChunkK == 0 &&
                        (shape.group_size == 0 || shape.group_size == kChunkK);
  const bool splits_ok = options.splits == 0 || options.splits == 1 || options.splits == 2 ||
                         options.splits == 4 || options.splits == kMaxSplits;
  const bool groups_ok = options.wgmma_groups >= 0 && options.wgmma_groups <= 2;
  if (!dtypes_ok || !shape_ok || !splits_ok || !groups_ok || args.m < 1 || args.weight == nullptr ||
      args.x == nullptr || args.y == nullptr || reinterpret_cast<uintptr_t>(args.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(args.weight) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return args.x_dtype == DType::kBF16 ? LaunchForM<true>(args, options)
                                      : LaunchForM<false>(args, options);
}

cudaError_t LaunchW4A16(const GemmArgs& args) { return LaunchW4A16(args, W4A16Options{}); }

}  // namespace qmm::cuda
