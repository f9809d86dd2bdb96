// The W2A8 launcher: picks the matmul kernel and its grid, then enqueues the prologue and
// the matmul (w2a8.h).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/decode_launch.h"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/w2a8.h"
#include "kernels/cuda/w2a8_decode.cuh"
#include "kernels/cuda/w2a8_gemm.cuh"
#include "kernels/cuda/w2a8_layout.h"
#include "kernels/cuda/w2a8_prologue.cuh"
#include "kernels/cuda/w2a8_wgmma.cuh"
#include "kernels/cuda/wgmma_gemm_launch.cuh"

namespace qmm::cuda {
namespace {

using w2a8::GemmParams;
using w2a8::Geometry;
using w2a8::Workspace;

// Weight units in flight per warp of the mma.sync GEMM (eight token tiles).
constexpr int kGemmDepth = 2;
// Row, token and unit indices are ints on the device; far above any batch qmm forms.
constexpr int64_t kMaxRows = int64_t{1} << 24;

// Resident CTAs per SM of `kKernel` (`threads` each), read once per process (every device
// is assumed to be of one kind, as on the machines qmm serves from).
template <auto kKernel, int kThreads>
int CtasPerSm() {
  static std::atomic<int> cached{0};
  int ctas = cached.load(std::memory_order_relaxed);
  if (ctas == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kKernel, kThreads, 0) != cudaSuccess ||
        ctas < 1) {
      ctas = 1;
    }
    cached.store(ctas, std::memory_order_relaxed);
  }
  return ctas;
}

// The mma.sync GEMM's grid: 64 tokens per token group, and CTAs that split the K of each
// four row groups only as far as it takes to fill the GPU (a split K costs an atomic per
// token and row).
struct GemmPlan {
  int64_t token_groups;  // gridDim.y
  int64_t k_splits;      // CTAs per row group quad
  int64_t ctas;          // gridDim.x
  bool atomics;          // some row group's K is split (acc and counters must be zero)
};

GemmPlan MakeGemmPlan(const Geometry& geo, int64_t m, int sms, const W2A8Options& options) {
  GemmPlan plan{};
  constexpr int64_t kGroupTokens = int64_t{w2a8::kGemmTiles} * w2a8::kTokensPerTile;
  plan.token_groups = (m + kGroupTokens - 1) / kGroupTokens;
  const int ctas_per_sm = CtasPerSm<w2a8::W2A8GemmKernel<kGemmDepth>, w2a8::kGemmThreads>();
  const int64_t slots = std::max<int64_t>(1, int64_t{sms} * ctas_per_sm / plan.token_groups);
  const int64_t quads = (geo.row_groups + w2a8::kGemmWarps - 1) / w2a8::kGemmWarps;
  plan.k_splits =
      std::clamp(options.k_splits > 0 ? options.k_splits : slots / quads, int64_t{1}, geo.k_blocks);
  plan.ctas = quads * plan.k_splits;
  plan.atomics = plan.k_splits > 1 || geo.k_blocks > w2a8::kMaxSegmentBlocks;
  return plan;
}

// What either matmul kernel reads and writes, with the prologue's outputs `pro`.
w2a8::Operands MakeOperands(const GemmArgs& args, const Geometry& geo,
                            const w2a8::PrologueParams& pro) {
  w2a8::Operands o{};
  o.codes = static_cast<const uint4*>(args.weight);
  o.w_scale =
      reinterpret_cast<const float*>(static_cast<const uint8_t*>(args.weight) + geo.code_bytes());
  o.xq = pro.xq;
  o.x_scale = pro.x_scale;
  o.x_sum = pro.x_sum;
  o.y = args.y;
  o.y_dtype = args.y_dtype;
  o.residual = args.residual;
  o.residual_dtype = args.residual_dtype;
  // Every count fits in int: m <= kMaxRows, N and K <= kMaxDim.
  o.m = static_cast<int>(args.m);
  o.n = static_cast<int>(geo.n);
  o.k = static_cast<int>(geo.k);
  o.row_groups = static_cast<int>(geo.row_groups);
  o.k_blocks = static_cast<int>(geo.k_blocks);
  return o;
}

// A decode launch (w2a8_decode.cuh), planned: its grid of whole row sets, whether it takes
// the stream-K grid instead (decode_stream.cuh), and the CTAs it runs.
struct DecodePlan {
  DecodeGrid grid;
  int64_t slots = 0;  // its CTAs that fit at once
  int64_t sets = 0;
  bool stream = false;
  int64_t ctas = 0;
};

// The plan of the decode kernel for up to 8T tokens with kUnits units a slot and kGroups row
// groups a set. Clusters (`cluster`: W2A8Options::decode_cluster) share the row groups of the
// one-unit, one-group tiles only: the others are taken where the row groups are many. On the
// H200 clusters took 14336 x 4096 from 11.65 to 9.72 us at M = 1 (15.4 -> 14.5 at M = 16) and
// 28672 x 2048 from 19.7 to 16.0. `stream`: W2A8Options::decode_stream.
template <int T, int kUnits, int kGroups>
cudaError_t PlanDecode(const GemmArgs& args, const DeviceInfo& info, const Geometry& geo,
                       int cluster, int stream, DecodePlan* plan) {
  constexpr bool kClusters = kUnits == 1 && kGroups == 1;
  if (!kClusters) cluster = 1;
  if (cluster > 1 && info.cc_major < 9) return cudaErrorInvalidValue;
  KernelFit fit;  // the clustered kernel's clusters (none for the others, or before sm_90)
  if constexpr (kClusters) {
    constexpr auto kClustered = w2a8::W2A8DecodeKernel<T, kUnits, true>;
    if (const cudaError_t err =
            FitOf<kClustered, 0, w2a8::kDecodeThreads>(info.ordinal, info.cc_major, &fit);
        err != cudaSuccess) {
      return err;
    }
  }
  constexpr auto kKernel = w2a8::W2A8DecodeKernel<T, kUnits, false, false, kGroups>;
  plan->slots = int64_t{info.sms} * CtasPerSm<kKernel, w2a8::kDecodeThreads>();
  plan->sets = (geo.row_groups + kGroups - 1) / kGroups;
  const int64_t chunks = (geo.k_blocks + kUnits - 1) / kUnits;
  // Enough warps per row set that none sums more than kDecodeMaxBlocksPerWarp blocks
  // (K <= kMaxDim needs at most 4 of the 8).
  const int min_split = static_cast<int>(std::bit_ceil(static_cast<uint64_t>(
      (geo.k_blocks + w2a8::kDecodeMaxBlocksPerWarp - 1) / w2a8::kDecodeMaxBlocksPerWarp)));
  plan->grid =
      MakeDecodeGrid(plan->sets, static_cast<int>(chunks), kGroups * kUnits * w2a8::kUnitBytes,
                     info.sms, plan->slots, fit.clusters, min_split, 8, cluster,
                     W2A8MinClusterWarpBytes(T == 1, plan->sets, info.sms));
  // The stream-K grid where it pays (W2A8StreamPays, decode_plan.h).
  const bool pays = W2A8StreamPays(plan->grid, plan->slots, plan->sets, chunks,
                                   kUnits * w2a8::kKPerBlock, T == 1, kGroups == 2);
  plan->stream = (stream == 2 || (stream == 0 && pays)) && args.sync != nullptr;
  plan->ctas = plan->stream ? StreamCtas(plan->slots, plan->sets, w2a8::DecodeTileInts(T, kGroups))
                            : plan->grid.ctas;
  return cudaSuccess;
}

// The decode kernel of `plan` (PlanDecode's with the same T, kUnits and kGroups), after the
// prologue.
template <int T, int kUnits, int kGroups>
cudaError_t LaunchDecode(const GemmArgs& args, const DeviceInfo& info, const Geometry& geo,
                         const w2a8::PrologueParams& pro, const DecodePlan& plan) {
  w2a8::DecodeParams p{};
  static_cast<w2a8::Operands&>(p) = MakeOperands(args, geo, pro);
  p.split_shift = plan.grid.split_shift();
  p.cluster_shift = plan.grid.cluster_shift();
  if (plan.stream) {
    return LaunchStreamGrid(w2a8::W2A8DecodeKernel<T, kUnits, false, true, kGroups>, p, args,
                            plan.slots, plan.sets, w2a8::DecodeTileInts(T, kGroups),
                            w2a8::kDecodeThreads, info.cc_major);
  }
  p.early_trigger = EarlyTrigger(plan.grid.ctas, plan.slots);
  const DecodeLaunch launch(plan.grid, w2a8::kDecodeThreads, args.stream, info.cc_major);
  if constexpr (kUnits == 1 && kGroups == 1) {
    if (plan.grid.cluster > 1) return launch(w2a8::W2A8DecodeKernel<T, kUnits, true>, p);
  }
  return launch(w2a8::W2A8DecodeKernel<T, kUnits, false, false, kGroups>, p);
}

// PlanDecode, then LaunchDecode.
template <int T, int kUnits, int kGroups = 1>
cudaError_t PlanAndLaunchDecode(const GemmArgs& args, const DeviceInfo& info, const Geometry& geo,
                                const w2a8::PrologueParams& pro, int cluster, int stream) {
  DecodePlan plan;
  if (const cudaError_t err =
          PlanDecode<T, kUnits, kGroups>(args, info, geo, cluster, stream, &plan);
      err != cudaSuccess) {
    return err;
  }
  return LaunchDecode<T, kUnits, kGroups>(args, info, geo, pro, plan);
}

// The decode kernel for one token tile: slots of two units where the row groups outnumber
// twice the CTAs that fit at once (measured on the H200 at M = 1: 8192 x 28672, 896 row
// groups, 22.4 us against 24.0 with one; 4096 x 14336, 448 row groups, 9.0 against 8.75),
// of one otherwise; and row sets of two row groups where their grid keeps enough CTAs
// (W2A8TwoGroupsPay, decode_plan.h), unless the units or clusters are forced.
cudaError_t LaunchOneTileDecode(const GemmArgs& args, const DeviceInfo& info, const Geometry& geo,
                                const w2a8::PrologueParams& pro, const W2A8Options& options) {
  const int cluster = options.decode_cluster;
  const int stream = options.decode_stream;
  cudaError_t err = cudaSuccess;
  DecodePlan two_groups;
  if (options.decode_groups == 2 ||
      (options.decode_groups == 0 && options.decode_units == 0 && cluster == 0)) {
    if ((err = PlanDecode<1, 1, 2>(args, info, geo, cluster, stream, &two_groups)) != cudaSuccess) {
      return err;
    }
    if (options.decode_groups == 2) {
      return LaunchDecode<1, 1, 2>(args, info, geo, pro, two_groups);
    }
  }
  const int64_t slots =
      int64_t{info.sms} * CtasPerSm<w2a8::W2A8DecodeKernel<1, 1>, w2a8::kDecodeThreads>();
  const bool two_units =
      options.decode_units == 2 || (options.decode_units == 0 && geo.row_groups >= 2 * slots);
  DecodePlan one_group;
  err = two_units ? PlanDecode<1, 2, 1>(args, info, geo, cluster, stream, &one_group)
                  : PlanDecode<1, 1, 1>(args, info, geo, cluster, stream, &one_group);
  if (err != cudaSuccess) return err;
  if (two_groups.ctas > 0 && W2A8TwoGroupsPay(one_group.ctas, two_groups.ctas)) {
    return LaunchDecode<1, 1, 2>(args, info, geo, pro, two_groups);
  }
  return two_units ? LaunchDecode<1, 2, 1>(args, info, geo, pro, one_group)
                   : LaunchDecode<1, 1, 1>(args, info, geo, pro, one_group);
}

// The prologue for x_dtype, with a DyT, an RMSNorm or nothing on its input, writing xq
// or the wgmma GEMM's permuted activations.
template <w2a8::XTransform kTransform, bool kPermuted>
cudaError_t LaunchPrologueOf(const cudaLaunchConfig_t& config, const w2a8::PrologueParams& pro,
                             DType x_dtype) {
  using w2a8::XKind;
  switch (x_dtype) {
    case DType::kBF16:
      return cudaLaunchKernelEx(&config,
                                w2a8::W2A8PrologueKernel<XKind::kBF16, kTransform, kPermuted>, pro);
    case DType::kF32:
      return cudaLaunchKernelEx(&config,
                                w2a8::W2A8PrologueKernel<XKind::kF32, kTransform, kPermuted>, pro);
    case DType::kF16:
      return cudaLaunchKernelEx(&config,
                                w2a8::W2A8PrologueKernel<XKind::kF16, kTransform, kPermuted>, pro);
  }
  return cudaErrorInvalidValue;
}

template <w2a8::XTransform kTransform>
cudaError_t LaunchPrologueWith(const cudaLaunchConfig_t& config, const w2a8::PrologueParams& pro,
                               DType x_dtype) {
  return pro.permuted != nullptr ? LaunchPrologueOf<kTransform, true>(config, pro, x_dtype)
                                 : LaunchPrologueOf<kTransform, false>(config, pro, x_dtype);
}

cudaError_t LaunchPrologue(const cudaLaunchConfig_t& config, const w2a8::PrologueParams& pro,
                           DType x_dtype) {
  using w2a8::XTransform;
  if (pro.dyt_gamma != nullptr) return LaunchPrologueWith<XTransform::kDyT>(config, pro, x_dtype);
  if (pro.norm_weight != nullptr) {
    return LaunchPrologueWith<XTransform::kRmsNorm>(config, pro, x_dtype);
  }
  return LaunchPrologueWith<XTransform::kNone>(config, pro, x_dtype);
}

// The contract of w2a8.h: shapes, dtypes, pointers, at most one input transform.
bool ArgsOk(const GemmArgs& args) {
  return !(args.m < 1 || args.m > kMaxRows || args.weight == nullptr || args.x == nullptr ||
           args.y == nullptr || args.workspace == nullptr || args.shape.n < 1 ||
           args.shape.n > kMaxDim || args.shape.k < w2a8::kKPerBlock || args.shape.k > kMaxDim ||
           args.shape.k % w2a8::kKPerBlock != 0 ||
           (args.x_dtype != DType::kF16 && args.x_dtype != DType::kBF16 &&
            args.x_dtype != DType::kF32) ||
           (args.y_dtype != DType::kF32 && args.y_dtype != DType::kF16 &&
            args.y_dtype != DType::kBF16) ||
           (args.residual != nullptr && args.residual_dtype != DType::kF32 &&
            args.residual_dtype != DType::kF16 && args.residual_dtype != DType::kBF16) ||
           (args.dyt.gamma != nullptr && args.rms_norm.weight != nullptr) ||
           (args.rms_norm.weight != nullptr &&
            (!(args.rms_norm.epsilon > 0.0f) ||
             reinterpret_cast<uintptr_t>(args.rms_norm.weight) % 16 != 0)));
}

// The prologue's parameters for `args`: its rows into the workspace, no zeroing and no
// wgmma permute (the caller sets those where its matmul needs them).
w2a8::PrologueParams PrologueOf(const GemmArgs& args, const Geometry& geo) {
  const Workspace ws(geo, args.m);
  auto* base = static_cast<uint8_t*>(args.workspace);
  w2a8::PrologueParams pro{};
  pro.x = args.x;
  pro.m = args.m;
  pro.k = geo.k;
  pro.xq = reinterpret_cast<int8_t*>(base + ws.xq);
  pro.x_scale = reinterpret_cast<float*>(base + ws.x_scale);
  pro.x_sum = reinterpret_cast<int32_t*>(base + ws.x_sum);
  pro.zero = reinterpret_cast<uint4*>(base + ws.acc);
  pro.dyt_alpha = args.dyt.alpha;
  pro.dyt_gamma = args.dyt.gamma;
  pro.dyt_beta = args.dyt.beta;
  pro.norm_weight = args.rms_norm.weight;
  pro.norm_epsilon = args.rms_norm.epsilon;
  return pro;
}

}  // namespace

size_t W2A8WorkspaceBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>(w2a8::WgmmaWorkspaceBytes(Geometry(shape.n, shape.k), m));
}

cudaError_t LaunchW2A8(const GemmArgs& args) { return LaunchW2A8(args, W2A8Options{}); }

cudaError_t LaunchW2A8(const GemmArgs& args, const W2A8Options& options) {
  if (!ArgsOk(args)) return cudaErrorInvalidValue;
  wgmma_gemm::Options wgmma_options;
  wgmma_options.groups = options.wgmma_groups;
  wgmma_options.splits = options.wgmma_splits;
  wgmma_options.tokens = options.wgmma_tokens;
  if (!wgmma_gemm::Valid(wgmma_options) || options.decode_units < 0 || options.decode_units > 2 ||
      options.decode_cluster < 0 || options.decode_cluster > 4 || options.decode_cluster == 3 ||
      options.decode_stream < 0 || options.decode_stream > 2 || options.decode_groups < 0 ||
      options.decode_groups > 2 ||
      (options.decode_groups == 2 && (options.decode_units == 2 || options.decode_cluster > 1))) {
    return cudaErrorInvalidValue;
  }
  DeviceInfo info;
  if (cudaError_t err = CurrentDeviceInfo(&info); err != cudaSuccess) return err;
  const Geometry geo(args.shape.n, args.shape.k);
  const Workspace ws(geo, args.m);
  // Beyond 16 tokens (or forced, and unless a k split is) the wgmma GEMM where the device
  // runs it (sm_90a), after the prologue.
  bool wgmma = false;
  if (options.wgmma_groups != 0 || (args.m > 16 && options.k_splits == 0)) {
    if (cudaError_t err = wgmma_gemm::Runs<w2a8::WgmmaFormat, false>(info, &wgmma);
        err != cudaSuccess) {
      return err;
    }
  }
  // Up to 16 tokens (unless a k split is forced) the decode kernel, which needs no zeroed
  // workspace; beyond, on devices without wgmma, the mma.sync GEMM.
  const bool decode = !wgmma && args.m <= 16 && options.k_splits == 0;
  const bool gemm = !wgmma && !decode;
  const GemmPlan plan = gemm ? MakeGemmPlan(geo, args.m, info.sms, options) : GemmPlan{};
  auto* base = static_cast<uint8_t*>(args.workspace);

  w2a8::PrologueParams pro = PrologueOf(args, geo);
  pro.zero_vectors = gemm && plan.atomics ? (ws.zero_end - ws.acc) / 16 : 0;
  if (wgmma) {
    pro.permuted = w2a8::WgmmaFormat::PermutedX(args);
    pro.permuted_nt = wgmma_gemm::TokenTile(args.m, args.shape.n, geo.k, wgmma_options, info.sms,
                                            w2a8::WgmmaFormat::kWideTiles,
                                            w2a8::WgmmaFormat::kStagePermuteTokens);
    if (cudaError_t err = wgmma_gemm::Resolve<w2a8::WgmmaFormat, false>(args, &wgmma_options);
        err != cudaSuccess) {
      return err;
    }
    pro.trigger_at_exit =
        pro.permuted_nt > 32 || wgmma_options.groups == 2 || wgmma_options.splits < 4;
  }
  // About four 16-byte stores per thread for the zeroing blocks.
  constexpr int64_t kZeroPerBlock = w2a8::kPrologueThreads * 4;
  const int64_t zero_blocks =
      std::min<int64_t>((pro.zero_vectors + kZeroPerBlock - 1) / kZeroPerBlock, 1024);
  // Dependent launches (dependent_launch.h): the matmul starts (prefetching weights)
  // during the prologue, and the prologue during the previous kernel up to 16 rows and on
  // the wgmma path with 32-token tiles or beyond 128 rows. On the H200 (session 46, five
  // shapes and 4096 x 28672) that took 17-32 rows 1.8-6.1% faster but for 8192 x 28672
  // at 24-32 (within 0.7%), and 192-256 rows 0.8-4.6% faster; at 64-128 it was up to
  // 6.5% slower (14336 x 4096 at M = 128 26.0 -> 27.7 us). The mma.sync GEMM, with its
  // zeroing blocks, measured slower with it (8192 x 8192 at M = 64: 47.2 us against 43.4;
  // M = 256: 80.5 against 75.3).
  cudaLaunchAttribute pdl[1];
  const int pdl_count = AppendDependentLaunch(info.cc_major, pdl, 0);
  cudaLaunchConfig_t pro_config{};
  pro_config.gridDim = dim3(static_cast<unsigned>(args.m + zero_blocks));
  pro_config.blockDim = dim3(w2a8::kPrologueThreads);
  pro_config.stream = args.stream;
  pro_config.attrs = pdl;
  const bool early = args.m <= 16 || (wgmma && (pro.permuted_nt == 32 || args.m > 128));
  pro_config.numAttrs = early ? pdl_count : 0;
  if (const cudaError_t err = LaunchPrologue(pro_config, pro, args.x_dtype); err != cudaSuccess) {
    return err;
  }
  if (wgmma) {
    bool launched = false;
    return wgmma_gemm::Launch<w2a8::WgmmaFormat, false>(args, wgmma_options, &launched);
  }
  if (decode) {
    if (args.m > 8) {
      return PlanAndLaunchDecode<2, 1>(args, info, geo, pro, options.decode_cluster,
                                       options.decode_stream);
    }
    return LaunchOneTileDecode(args, info, geo, pro, options);
  }

  GemmParams gp{};
  static_cast<w2a8::Operands&>(gp) = MakeOperands(args, geo, pro);
  gp.acc = reinterpret_cast<int32_t*>(base + ws.acc);
  gp.counters = reinterpret_cast<uint32_t*>(base + ws.counters);
  gp.padded_rows = static_cast<int>(geo.padded_rows());
  gp.k_splits = static_cast<int>(plan.k_splits);

  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(plan.ctas), static_cast<unsigned>(plan.token_groups));
  config.blockDim = dim3(w2a8::kGemmThreads);
  config.stream = args.stream;
  config.attrs = pdl;
  config.numAttrs = pdl_count;
  return cudaLaunchKernelEx(&config, w2a8::W2A8GemmKernel<kGemmDepth>, gp);
}

cudaError_t LaunchW2A8Glu(const GemmArgs& args, const void* up, Activation act) {
  if (!ArgsOk(args) || !GluArgsOk(args, up, kW2A8GluMaxM)) {
    return cudaErrorInvalidValue;
  }
  DeviceInfo info;
  if (cudaError_t err = CurrentDeviceInfo(&info); err != cudaSuccess) return err;
  const Geometry geo(args.shape.n, args.shape.k);
  // One prologue for both projections, as a dependent launch (as LaunchW2A8's up to 16
  // rows).
  const w2a8::PrologueParams pro = PrologueOf(args, geo);
  cudaLaunchAttribute pdl[1];
  cudaLaunchConfig_t pro_config{};
  pro_config.gridDim = dim3(static_cast<unsigned>(args.m));
  pro_config.blockDim = dim3(w2a8::kPrologueThreads);
  pro_config.stream = args.stream;
  pro_config.attrs = pdl;
  pro_config.numAttrs = AppendDependentLaunch(info.cc_major, pdl, 0);
  if (const cudaError_t err = LaunchPrologue(pro_config, pro, args.x_dtype); err != cudaSuccess) {
    return err;
  }
  // The grid of two-group row sets, planned as one weight of the gate's and up's row
  // groups together (a set's pair) for each token tile (a set each), whole sets a CTA: no
  // clusters, no stream-K grid.
  const int tile_shift = args.m > 8 ? 1 : 0;
  Geometry pair = geo;
  pair.row_groups *= 2 << tile_shift;
  DecodePlan plan;
  if (const cudaError_t err = PlanDecode<1, 1, 2>(args, info, pair, 1, 1, &plan);
      err != cudaSuccess) {
    return err;
  }
  w2a8::DecodeParams p{};
  static_cast<w2a8::Operands&>(p) = MakeOperands(args, geo, pro);
  p.split_shift = plan.grid.split_shift();
  p.cluster_shift = plan.grid.cluster_shift();
  p.early_trigger = EarlyTrigger(plan.grid.ctas, plan.slots);
  p.codes_up = static_cast<const uint4*>(up);
  p.w_scale_up = reinterpret_cast<const float*>(static_cast<const uint8_t*>(up) + geo.code_bytes());
  p.glu_act = act;
  p.glu_tile_shift = tile_shift;
  const DecodeLaunch launch(plan.grid, w2a8::kDecodeThreads, args.stream, info.cc_major);
  return launch(w2a8::W2A8DecodeKernel<1, 1, false, false, 2, true>, p);
}

}  // namespace qmm::cuda
