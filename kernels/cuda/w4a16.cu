// W4A16 launch: picks the kernel and tile for M and the K split for the shape (contract
// in w4a16.h, layout in w4a16_layout.h, kernels in w4a16_direct.cuh / w4a16_staged.cuh).
#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/decode_launch.h"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/decode_stream.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w4a16_act_order.h"
#include "kernels/cuda/w4a16_decode.cuh"
#include "kernels/cuda/w4a16_direct.cuh"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_staged.cuh"
#include "kernels/cuda/w4a16_wgmma.cuh"
#include "kernels/cuda/w4a16_zero_points.h"
#include "kernels/cuda/wgmma_gemm_launch.cuh"

namespace qmm::cuda {
namespace {

using w4a16::kChunkK;
using w4a16::kThreads;
using w4a16::Params;

// Launches `kKernel` with tiles of 8T tokens x 128R rows and `kSmem` bytes of dynamic
// shared memory, as a dependent launch (dependent_launch.h) if kDependent.
template <auto kKernel, int T, int R, int kSmem, bool kDependent>
cudaError_t Launch(const GemmArgs& args, const W4A16Options& options) {
  DeviceInfo device;
  cudaError_t err = CurrentDeviceInfo(&device);
  if (err != cudaSuccess) return err;
  KernelFit fit;
  if ((err = FitOf<kKernel, kSmem, kThreads>(device.ordinal, device.cc_major, &fit)) !=
      cudaSuccess) {
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
  Params p = w4a16::MakeParams(args);
  p.splits = splits;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(row_tiles),
                        static_cast<unsigned>(splits));
  config.blockDim = dim3(kThreads);
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

// Below this many bytes of weights the launch and pipeline fill dominate.
constexpr int64_t kSmallWeightBytes = int64_t{16} << 20;

// What of the decode kernel for up to 8T tokens, R strips per warp, fits on the device at
// once (the same on every device of one kind): CTAs, and clusters of 2 and 4 CTAs.
template <int T, int R, bool kBf16, bool kGlu = false, bool kDeep = false, bool kCluster = false>
cudaError_t DecodeFit(const DeviceInfo& device, int64_t* slots, KernelFit* fit_out = nullptr) {
  KernelFit fit;
  const cudaError_t err =
      FitOf<w4a16::DecodeKernel<T, R, kBf16, kGlu, kDeep, kCluster>, 0, kThreads>(
          device.ordinal, device.cc_major, &fit);
  if (err != cudaSuccess) return err;
  *slots = int64_t{device.sms} * fit.occupancy;
  if (fit_out != nullptr) *fit_out = fit;
  return cudaSuccess;
}

// Row sets (R strips each) of the decode kernel.
int64_t DecodeSets(const WeightShape& shape, int r) {
  return ((shape.n + w4a16::kStripRows - 1) / w4a16::kStripRows + r - 1) / r;
}

// Clusters share the row sets of the two-strip tiles only: the others have no clustered
// instantiation (their row sets are many, as a gated MLP's are).
template <int R, bool kGlu>
inline constexpr bool kDecodeClusters = R == 2 && !kGlu;

// The stream-K grid (decode_stream.cuh) serves the two-strip tiles.
template <int R, bool kGlu>
inline constexpr bool kDecodeStream = R == 2 && !kGlu;

// The grid of the decode kernel for up to 8T tokens, R strips per warp (decode_plan.h),
// and the CTAs of it that fit at once. `cluster`: W4A16Options::decode_cluster.
template <int T, int R, bool kBf16, bool kGlu>
cudaError_t PlanDecode(const WeightShape& shape, const DeviceInfo& device, int cluster,
                       DecodeGrid* grid, int64_t* slots) {
  constexpr bool kClusters = kDecodeClusters<R, kGlu>;
  if (!kClusters) cluster = 1;
  if (cluster > 1 && device.cc_major < 9) return cudaErrorInvalidValue;
  cudaError_t err = DecodeFit<T, R, kBf16, kGlu>(device, slots);
  if (err != cudaSuccess) return err;
  KernelFit fit;  // the clustered kernel's clusters (none without one, or before sm_90)
  if constexpr (kClusters) {
    int64_t unused = 0;
    if ((err = DecodeFit<T, R, kBf16, false, false, true>(device, &unused, &fit)) != cudaSuccess) {
      return err;
    }
  }
  // A gated MLP: at most two warps per row set. Each set streams two weights, and the longer
  // runs per warp measured faster on the H200 (a 4096 x 14336 pair: 20.0 us against 21.4
  // with eight warps per set at M = 1, 26.0 against 29.2 at M = 16).
  // CTAs: as many units each (a gate and up pair of 4096 x 14336 at M = 1, 896 units on 264
  // slots, would otherwise leave 104 CTAs streaming alone at the end).
  static_assert(w4a16::kWarps == 8);
  *grid = MakeDecodeGrid(DecodeSets(shape, kGlu ? 1 : R), static_cast<int>(w4a16::NumChunks(shape)),
                         R * w4a16::kStripChunkBytes, device.sms, *slots, fit.clusters, 1,
                         kGlu ? 2 : 8, cluster);
  return cudaSuccess;
}

// The decode kernel (w4a16_decode.cuh) for up to 8T tokens, R strips per warp; with
// kGlu, act(x gate^T) * (x up^T) for gate = args.weight, `up` (one strip of each per row
// set) and act = `glu_act`. `cluster`, `stream`: W4A16Options::decode_cluster,
// decode_stream. kZp: args.weight has zero points, which the kernel takes in its
// dequantization.
template <int T, int R, bool kBf16, bool kGlu = false, bool kZp = false>
cudaError_t LaunchDecode(const GemmArgs& args, const DeviceInfo& device, const void* up = nullptr,
                         int cluster = 0, int stream = 0, Activation glu_act = Activation::kSilu) {
  DecodeGrid grid;
  int64_t slots = 0;
  if (const cudaError_t err =
          PlanDecode<T, R, kBf16, kGlu>(args.shape, device, cluster, &grid, &slots);
      err != cudaSuccess) {
    return err;
  }
  const WeightShape& shape = args.shape;
  const int64_t units = grid.units;
  const int64_t ctas = grid.ctas;

  Params p = w4a16::MakeParams(args);
  p.split_shift = grid.split_shift();
  p.cluster_shift = grid.cluster_shift();
  if (kGlu) {
    p.w_up = static_cast<const uint8_t*>(up);
    p.s_up = p.w_up + w4a16::WeightRegionBytes(shape);
    p.glu_act = glu_act;
    if (kZp) p.zb_up = p.w_up + w4a16::ZeroBiasesOf(shape, args.x_dtype);
  }
  // The stream-K grid (decode_stream.cuh) on every CTA that fits, where it pays, and up to
  // 8 tokens where it beats the clusters the plan chose (not where `cluster` forces them).
  if constexpr (kDecodeStream<R, kGlu>) {
    const int64_t sets = DecodeSets(shape, R);
    const bool beats_clusters =
        T == 1 && cluster == 0 &&
        W4A16StreamBeatsClusters(grid, w4a16::NumChunks(shape), R * w4a16::kStripChunkBytes, kZp);
    const bool on =
        stream == 2 || (stream == 0 && (StreamPays(grid, slots, sets, T == 1) || beats_clusters));
    if (on && args.sync != nullptr) {
      auto stream_grid = [&](auto early_x) {
        return LaunchStreamGrid(
            w4a16::DecodeKernel<T, R, kBf16, false, false, false, /*kTurns=*/T == 2, true,
                                w4a16::kWarps, decltype(early_x)::value, kZp>,
            p, args, slots, sets, w4a16::StreamTileFloats(T), kThreads, device.cc_major);
      };
      // Early activation loads (DecodeTile::kEarlyX) only where a warp's share of a set
      // takes more than two rounds: on 4096 x 14336 (two) they measured 1.5-1.7% slower at
      // M = 9.
      constexpr int kRoundChunks = w4a16::kWarps * w4a16::DecodeTile<T, R>::kSlots;
      if constexpr (T == 2) {
        if (p.chunks > 2 * kRoundChunks) return stream_grid(std::true_type{});
      }
      return stream_grid(std::false_type{});
    }
  }
  const DecodeLaunch launch(grid, kThreads, args.stream, device.cc_major);
  // The deep tile (twice the bytes in flight per warp, half the CTAs per SM) wherever its
  // grid is as large as the shallow one's (14336 x 4096 at M = 1, before the two-strip
  // clusters took it: 12.3 us against 15.1; not for a gated MLP, whose deep tile needs all
  // 128 registers and measured slower; not for two strips, whose tile already holds two
  // CTAs per SM).
  if constexpr (T == 1 && R == 1 && !kGlu) {
    int64_t deep_slots = 0;
    if (const cudaError_t e = DecodeFit<T, R, kBf16, kGlu, true>(device, &deep_slots);
        e != cudaSuccess) {
      return e;
    }
    if (std::min(units, deep_slots) >= ctas) {
      p.early_trigger = EarlyTrigger(ctas, deep_slots);
      return launch(w4a16::DecodeKernel<T, R, kBf16, kGlu, true, false, false, false, w4a16::kWarps,
                                        false, kZp>,
                    p);
    }
  }
  p.early_trigger = EarlyTrigger(ctas, slots);
  if constexpr (kDecodeClusters<R, kGlu>) {
    if (grid.cluster > 1) {
      return launch(w4a16::DecodeKernel<T, R, kBf16, false, false, true, false, false,
                                        w4a16::kWarps, T == 2, kZp>,
                    p);
    }
  }
  // Two token tiles refill late on a grid of several turns (DecodeTile::kTurns).
  if constexpr (T == 2 && R == 2 && !kGlu) {
    if (units > ctas) {
      return launch(w4a16::DecodeKernel<T, R, kBf16, false, false, false, true, false,
                                        w4a16::kWarps, true, kZp>,
                    p);
    }
  }
  return launch(w4a16::DecodeKernel<T, R, kBf16, kGlu, false, false, false, false, w4a16::kWarps,
                                    T == 2, kZp>,
                p);
}

// The decode kernel for up to 8T tokens on its wide CTAs (w4a16_decode.cuh kWideWarps):
// one strip a row set, all 16 warps of a CTA on it, two CTAs an SM; kStream: on the
// stream-K grid.
template <int T, bool kBf16, bool kZp = false, bool kStream = false>
constexpr auto* kWideDecode = w4a16::DecodeKernel<T, 1, kBf16, false, false, false, false, kStream,
                                                  w4a16::kWideWarps, T == 2, kZp>;

// The wide CTAs (above) that fit on the device at once.
template <int T, bool kBf16>
cudaError_t WideDecodeSlots(const DeviceInfo& device, int64_t* slots) {
  KernelFit fit;
  const cudaError_t err = FitOf<kWideDecode<T, kBf16>, 0, w4a16::kWideWarps * 32>(
      device.ordinal, device.cc_major, &fit);
  *slots = int64_t{device.sms} * fit.occupancy;
  return err;
}

// The wide CTAs on whole sets, in as few turns as fit, or on the stream-K grid
// (decode_stream.cuh) where `stream` (W4A16Options::decode_stream) is 2 and args.sync is
// set. kZp: LaunchDecode's.
template <int T, bool kBf16, bool kZp = false>
cudaError_t LaunchWideDecode(const GemmArgs& args, const DeviceInfo& device, int stream) {
  constexpr int kWide = w4a16::kWideWarps;
  constexpr auto* kStream = kWideDecode<T, kBf16, kZp, true>;
  int64_t slots = 0;
  if (const cudaError_t err = WideDecodeSlots<T, kBf16>(device, &slots); err != cudaSuccess) {
    return err;
  }
  const int64_t sets = DecodeSets(args.shape, 1);
  Params p = w4a16::MakeParams(args);
  if (stream == 2 && args.sync != nullptr) {
    return LaunchStreamGrid(kStream, p, args, slots, sets, w4a16::kStripRows * 8 * T, kWide * 32,
                            device.cc_major);
  }
  DecodeGrid grid;
  grid.units = sets;
  const int64_t turns = (sets + slots - 1) / slots;
  grid.ctas = (sets + turns - 1) / turns;
  p.early_trigger = EarlyTrigger(grid.ctas, slots);
  return DecodeLaunch(grid, kWide * 32, args.stream, device.cc_major)(kWideDecode<T, kBf16, kZp>,
                                                                      p);
}

// Turns of the two-strip decode grid measured faster than the cluster kernels on the
// H200 (M = 1, against the staged kernel): 4096 x 14336 (2 turns) 9.8 against 12.7 us,
// 8192 x 14336 17.6 against 20.7, 14336 x 14336 28.4 against 31.1, 8192 x 28672 (3.4
// turns) 35.0 against 35.5. Not measured beyond.
constexpr int64_t kMaxDecodeTurns = 4;

// The wgmma GEMM (sets *launched), its 64-token tiles permuting the activations in
// their stages on weights of at most kNarrowGroups row groups (w4a16::WgmmaFormatNarrow).
constexpr int64_t kNarrowGroups = 32;
template <bool kBf16, bool kZp = false>
cudaError_t LaunchWgmma(const GemmArgs& args, const wgmma_gemm::Options& options, bool* launched) {
  using w4a16::WgmmaFormat;
  using w4a16::WgmmaFormatNarrow;
  using w4a16::WgmmaZeroPoints;
  const bool narrow = w4a16::NumGroups(args.shape) <= kNarrowGroups;
  if constexpr (kZp) {
    return wgmma_gemm::Launch<WgmmaZeroPoints<WgmmaFormat>, kBf16,
                              WgmmaZeroPoints<WgmmaFormatNarrow>>(args, options, launched, narrow);
  } else {
    return wgmma_gemm::Launch<WgmmaFormat, kBf16, WgmmaFormatNarrow>(args, options, launched,
                                                                     narrow);
  }
}

// The wgmma GEMM's knobs in `options` (its K split is the mma.sync kernels' too).
wgmma_gemm::Options WgmmaOptions(const W4A16Options& options) {
  wgmma_gemm::Options wgmma_options;
  wgmma_options.groups = options.wgmma_groups;
  wgmma_options.splits = options.splits;
  wgmma_options.tokens = options.wgmma_tokens;
  return wgmma_options;
}

// The decode kernels up to 32 tokens, where the launch takes them (LaunchForM says
// which, where); *launched is false where it takes another kernel. kZp: LaunchDecode's.
template <bool kBf16, bool kZp>
cudaError_t LaunchDecodeForM(const GemmArgs& args, const W4A16Options& options, bool* launched) {
  *launched = false;
  if (options.splits != 0 || args.m > 32) return cudaSuccess;
  const wgmma_gemm::Options wgmma_options = WgmmaOptions(options);
  DeviceInfo device;
  cudaError_t err = CurrentDeviceInfo(&device);
  if (err != cudaSuccess) return err;
  const int cluster = options.decode_cluster;
  int64_t slots = 0;
  if (args.m > 16) {
    bool wgmma = false;
    if ((err = DecodeFit<4, 1, kBf16>(device, &slots)) != cudaSuccess ||
        (err = wgmma_gemm::Runs<w4a16::WgmmaFormat, kBf16>(device, &wgmma)) != cudaSuccess) {
      return err;
    }
    const int64_t sets = DecodeSets(args.shape, 1);
    if (sets <= (wgmma ? 1 : 2) * slots) {
      if (!(wgmma && W4A16GemmBeatsDecode(args.m, args.shape.k, sets, slots))) {
        *launched = true;
        return LaunchDecode<4, 1, kBf16, false, kZp>(args, device, nullptr, cluster);
      }
      // On weights this narrow two groups a CTA: on the H200 (session 52, M = 17-32)
      // 14336 x 4096 20.8 us against one group's 22.6, 28672 x 4096 37.8 against 42.1,
      // 14336 x 2048 12.9 against 13.3, 8192 x 2048 9.3 against 9.2.
      wgmma_gemm::Options two = wgmma_options;
      two.groups = 2;
      return LaunchWgmma<kBf16, kZp>(args, two, launched);
    }
  } else if (options.decode_warps == w4a16::kWideWarps) {
    *launched = true;
    return args.m > 8 ? LaunchWideDecode<2, kBf16, kZp>(args, device, options.decode_stream)
                      : LaunchWideDecode<1, kBf16, kZp>(args, device, options.decode_stream);
  } else if (args.m > 8) {
    if (options.decode_warps == 0 && cluster == 0) {
      DecodeGrid grid;
      int64_t wide_slots = 0;
      if ((err = PlanDecode<2, 2, kBf16, false>(args.shape, device, cluster, &grid, &slots)) !=
              cudaSuccess ||
          (err = WideDecodeSlots<2, kBf16>(device, &wide_slots)) != cudaSuccess) {
        return err;
      }
      if (W4A16WidePays(grid, device.sms, DecodeSets(args.shape, 1), wide_slots)) {
        *launched = true;
        return LaunchWideDecode<2, kBf16, kZp>(args, device, options.decode_stream);
      }
    }
    *launched = true;
    return LaunchDecode<2, 2, kBf16, false, kZp>(args, device, nullptr, cluster,
                                                 options.decode_stream);
  } else {
    DecodeGrid grid;
    if ((err = PlanDecode<1, 2, kBf16, false>(args.shape, device, cluster, &grid, &slots)) !=
        cudaSuccess) {
      return err;
    }
    const int64_t sets = DecodeSets(args.shape, 2);
    // Fewer sets than SMs: two strips still, where clusters share the sets.
    const bool clustered = grid.cluster > 1;
    const bool two = options.decode_strips == 2 ||
                     (options.decode_strips == 0 && (sets >= device.sms || clustered));
    if (two && sets <= kMaxDecodeTurns * slots) {
      *launched = true;
      return LaunchDecode<1, 2, kBf16, false, kZp>(args, device, nullptr, cluster,
                                                   options.decode_stream);
    }
    if ((err = DecodeFit<1, 1, kBf16>(device, &slots)) != cudaSuccess) return err;
    if (DecodeSets(args.shape, 1) <= slots) {
      *launched = true;
      return LaunchDecode<1, 1, kBf16, false, kZp>(args, device, nullptr, cluster);
    }
  }
  return cudaSuccess;
}

// kZp: args.weight has zero points, which the decode kernels and the wgmma GEMM take in
// their dequantization; the other kernels stream the symmetric weight of the same codes and
// scales with the zero points' term (w4a16_zero_points.h) and the caller's residual as
// their residual.
template <bool kBf16, bool kZp>
cudaError_t LaunchForM(const GemmArgs& args, const W4A16Options& options) {
  // Choices measured on the H200 (qmm-kernel-bench shapes). Up to 16 tokens the decode
  // kernel. Up to 8 tokens, two strips a warp wherever that grid still has a row set for
  // every SM (N above 4192 on the H200), or clusters of CTAs share its sets
  // (decode_plan.h), and it covers the row sets in at most kMaxDecodeTurns turns of its
  // persistent grid, else one strip where its grid covers them at once: two halve the
  // activation loads per weight byte and refill late (DecodeTile::kDeferRefill); at M =
  // 1, 8192 x 8192 10.2 against 12.7 us, 4096 x 6144 5.4 against 7.7, 14336 x 8192 16.0
  // against 20.4; with 128 sets for 132 SMs, 14336 x 4096 took 12.0 against 12.3 (one
  // strip, deep) before clusters of two took it to 10.55 (28672 x 2048, clusters of four:
  // 19.3 -> 14.7), and 4096 x 4096 (too few bytes a warp for clusters) 4.9 against 4.6;
  // where a cluster's warps would stream under 12 KB each, the stream-K grid on the same
  // two-strip sets (W4A16StreamBeatsClusters, decode_plan.h; session 71, H100).
  // Beyond those, the cluster kernels (one strip's grid in several turns left SMs with
  // few bytes in flight in its last: 40-42 against 36 us on 8192 x 28672). At 9-16
  // tokens, the wide CTAs where the two-strip sets would leave SMs starved
  // (W4A16WidePays, decode_plan.h).
  // Up to 32 tokens the decode kernel too (four token tiles a warp) where its grid
  // covers the strips in one turn (N <= 4224 on the H200), or in two (N <= 8448) on a
  // device without the wgmma GEMM, but for long K and the upper token counts, which the
  // wgmma GEMM takes (W4A16GemmBeatsDecode, decode_plan.h; session 52). On the H200 at
  // 17-32 tokens (session 39) the decode kernel won at N = 4096 (8192 x 4096: 12.0-14.0
  // us against the GEMM's 15.4-15.5, 13.7 since; 4096 x 4096 7.1-8.4 against 10.2-10.3,
  // 8.9 since), the GEMM from N = 6144 (8192 x 6144: 16.6-16.7 against 23.5-26.8; 8192 x
  // 8192 19.0-19.1 against 22.5-26.3; 4096 x 8192 11.3-11.4 against 12.6-14.8; 14336 x
  // 8192 30.4-30.6 against 38.3-45.0). Then the wgmma kernel (sm_90a). A forced split count
  // (tuning) takes the mma.sync cluster kernels at every M, as does a device without
  // wgmma. Those: up to 8 tokens, small weights stream through registers
  // and larger ones through 2-group shared-memory stages; up to 16 tokens one group per
  // CTA; beyond, 32 tokens x 256 rows per CTA keeps the shared-memory traffic per mma
  // low, and further token tiles run side by side and re-read each weight tile mostly
  // from L2.
  const wgmma_gemm::Options wgmma_options = WgmmaOptions(options);
  bool launched = false;
  if (options.wgmma_groups != 0) {
    const cudaError_t err = LaunchWgmma<kBf16, kZp>(args, wgmma_options, &launched);
    if (err != cudaSuccess || launched) return err;
  }
  if (const cudaError_t err = LaunchDecodeForM<kBf16, kZp>(args, options, &launched);
      err != cudaSuccess || launched) {
    return err;
  }
  if (options.splits == 0 && args.m > 16) {
    const cudaError_t err = LaunchWgmma<kBf16, kZp>(args, wgmma_options, &launched);
    if (err != cudaSuccess || launched) return err;
  }
  GemmArgs run = args;
  if constexpr (kZp) {
    void* scratch =
        static_cast<char*>(args.workspace) + W4A16ZeroPointScratchOffset(args.shape, args.m);
    if (const cudaError_t err = LaunchZeroPointTerm(args, scratch); err != cudaSuccess) {
      return err;
    }
    run.residual = ZeroPointTermOf(scratch);
    run.residual_dtype = DType::kF32;
  }
  if (run.m <= 8) {
    return w4a16::DecodeBytes(run.shape) < kSmallWeightBytes
               ? LaunchDirect<1, kBf16>(run, options)
               : LaunchStaged<1, 2, kBf16>(run, options);
  }
  if (run.m <= 16) return LaunchStaged<2, 1, kBf16>(run, options);
  return LaunchStaged<4, 2, kBf16>(run, options);
}

// The contract of w4a16.h: dtypes, a shape the layout holds, aligned device pointers.
bool ArgsOk(const GemmArgs& args) {
  const WeightShape& shape = args.shape;
  const auto out_dtype = [](DType d) {
    return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
  };
  const bool dtypes_ok = (args.x_dtype == DType::kF16 || args.x_dtype == DType::kBF16) &&
                         out_dtype(args.y_dtype) &&
                         (args.residual == nullptr || out_dtype(args.residual_dtype));
  const bool shape_ok = shape.n >= 1 && shape.k >= kChunkK && shape.k % kChunkK == 0 &&
                        (shape.group_size == 0 || shape.group_size == kChunkK);
  return dtypes_ok && shape_ok && args.m >= 1 && args.weight != nullptr && args.x != nullptr &&
         args.y != nullptr && reinterpret_cast<uintptr_t>(args.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(args.weight) % 16 == 0;
}

}  // namespace

cudaError_t LaunchW4A16(const GemmArgs& args, const W4A16Options& options) {
  // The K split: 1 to w4a16::kMaxSplits, as the wgmma GEMM's.
  static_assert(w4a16::kMaxSplits == kMaxClusterCtas);
  const bool wgmma_ok = wgmma_gemm::Valid(WgmmaOptions(options));
  const bool strips_ok = options.decode_strips >= 0 && options.decode_strips <= 2;
  const bool cluster_ok =
      options.decode_cluster >= 0 && options.decode_cluster <= 4 && options.decode_cluster != 3;
  const bool stream_ok = options.decode_stream >= 0 && options.decode_stream <= 2;
  const bool warps_ok = options.decode_warps == 0 || options.decode_warps == w4a16::kWarps ||
                        options.decode_warps == w4a16::kWideWarps;
  if (!wgmma_ok || !strips_ok || !cluster_ok || !stream_ok || !warps_ok || !ArgsOk(args)) {
    return cudaErrorInvalidValue;
  }
  GemmArgs run = args;
  if ((args.shape.zero_points || args.shape.act_order) && args.workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (args.shape.act_order) {
    // The inputs gathered into the stored columns' order (w4a16_act_order.h) are the x of
    // everything that follows.
    void* gathered = static_cast<char*>(args.workspace) + W4A16GatherOffset(args.shape, args.m);
    if (const cudaError_t err = LaunchGatherInputs(args, gathered); err != cudaSuccess) {
      return err;
    }
    run.x = gathered;
  }
  const bool bf16 = run.x_dtype == DType::kBF16;
  if (args.shape.zero_points) {
    return bf16 ? LaunchForM<true, true>(run, options) : LaunchForM<false, true>(run, options);
  }
  return bf16 ? LaunchForM<true, false>(run, options) : LaunchForM<false, false>(run, options);
}

cudaError_t LaunchW4A16(const GemmArgs& args) { return LaunchW4A16(args, W4A16Options{}); }

cudaError_t LaunchW4A16Glu(const GemmArgs& args, const void* up, Activation act) {
  if (!ArgsOk(args) || !GluArgsOk(args, up, kW4A16GluMaxM) || args.shape.act_order) {
    return cudaErrorInvalidValue;
  }
  DeviceInfo device;
  if (const cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  auto launch = [&](auto zp) {
    constexpr bool kZp = decltype(zp)::value;
    const bool bf16 = args.x_dtype == DType::kBF16;
    if (args.m > 8) {
      return bf16 ? LaunchDecode<2, 2, true, true, kZp>(args, device, up, 0, 0, act)
                  : LaunchDecode<2, 2, false, true, kZp>(args, device, up, 0, 0, act);
    }
    return bf16 ? LaunchDecode<1, 2, true, true, kZp>(args, device, up, 0, 0, act)
                : LaunchDecode<1, 2, false, true, kZp>(args, device, up, 0, 0, act);
  };
  return args.shape.zero_points ? launch(std::true_type{}) : launch(std::false_type{});
}

}  // namespace qmm::cuda
