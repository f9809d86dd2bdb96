// Host side of the wgmma GEMM (wgmma_gemm.cuh): the token tile, groups per CTA and K
// split for a launch, the permutation of the activations into the workspace, and the
// cluster launch. Included by the schemes' launchers (w4a16.cu, w8a16.cu, w2a8.cu).
#ifndef QMM_KERNELS_CUDA_WGMMA_GEMM_LAUNCH_CUH_
#define QMM_KERNELS_CUDA_WGMMA_GEMM_LAUNCH_CUH_

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cluster_fit.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemm_args.h"
#include "kernels/cuda/gemm_groups.h"
#include "kernels/cuda/gemm_token_tile.h"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/wgmma_gemm.cuh"

namespace qmm::cuda::wgmma_gemm {

template <typename F, int NT>
cudaError_t LaunchPermute(const GemmArgs& args, const DeviceInfo& device) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((args.m + NT - 1) / NT),
                        static_cast<unsigned>(args.shape.k / kChunkK));
  config.blockDim = dim3(w4a16::kThreads);
  config.stream = args.stream;
  cudaLaunchAttribute pdl[1];
  config.attrs = pdl;
  config.numAttrs = AppendDependentLaunch(device.cc_major, pdl, 0);
  return cudaLaunchKernelEx(&config, PermuteKernel<F, NT>, F::PermuteSource(args),
                            F::PermutedX(args), args.m, args.shape.k);
}

template <typename F, int NT, int G, bool kBf16>
cudaError_t FitGemm(const DeviceInfo& device, KernelFit* fit) {
  return FitOf<GemmKernel<F, NT, G, kBf16>, Tile<F, NT, G>::kSmemBytes, Tile<F, NT, G>::kThreads>(
      device.ordinal, device.cc_major, fit);
}

// Groups per CTA and split for NT-token tiles, unless forced (TakesTwoGroups,
// gemm_groups.h). 128-token tiles take one group: two would need more registers than a
// thread has.
template <typename F, int NT, bool kBf16>
cudaError_t Plan(const GemmArgs& args, const DeviceInfo& device, Options* options) {
  const int64_t token_tiles = (args.m + NT - 1) / NT;
  const int64_t groups = (args.shape.n + 127) / 128;
  const int chunks = static_cast<int>(args.shape.k / kChunkK);
  KernelFit one_fit;
  cudaError_t err = FitGemm<F, NT, 1, kBf16>(device, &one_fit);
  if (err != cudaSuccess) return err;
  KernelFit two_fit = one_fit;
  if constexpr (NT < 128) {
    if ((err = FitGemm<F, NT, 2, kBf16>(device, &two_fit)) != cudaSuccess) return err;
  }
  // Any split count only for one tile of up to 64 tokens (F::kAnySplits says where it paid).
  const bool any_splits = F::kAnySplits && token_tiles == 1 && NT <= 64;
  const GroupPlans plans = MakeGroupPlans(token_tiles, groups, chunks, device.sms, one_fit, two_fit,
                                          F::GroupFillChunks(NT), any_splits);
  if (NT >= 128) {
    options->groups = 1;
  } else if (options->groups == 0) {
    const double cost = F::OneGroupChunkCost(NT, plans.one.splits, plans.paired);
    options->groups = TakesTwoGroups(NT, args.m, chunks, device.sms, plans, cost) ? 2 : 1;
  }
  if (options->splits == 0) {
    options->splits = options->groups == 1 ? plans.one.splits : plans.two.splits;
  }
  // Every CTA must own at least one chunk (the kernel's accumulators start at its first).
  options->splits = std::min(options->splits, chunks);
  return cudaSuccess;
}

// The GEMM on the permuted activations, as a dependent launch.
template <typename F, int NT, int G, bool kBf16>
cudaError_t LaunchGemm(const GemmArgs& args, const DeviceInfo& device, int splits) {
  KernelFit fit;
  cudaError_t err = FitGemm<F, NT, G, kBf16>(device, &fit);  // opts into the shared memory
  if (err != cudaSuccess) return err;
  GemmParams<F, NT, G> p;
  if ((err = F::MakeParams(args, &p)) != cudaSuccess) return err;
  if constexpr (!Tile<F, NT, G>::kStagePermute) {
    p.x = F::PermutedX(args);
  } else {
    const int64_t row_bytes = args.shape.k * 2;
    err = EncodeRowsMap(&p.x_map, args.x, args.m, row_bytes, row_bytes, 128, NT,
                        CU_TENSOR_MAP_SWIZZLE_128B);
    if (err != cudaSuccess) return err;
  }
  p.splits = splits;
  const int64_t token_tiles = (args.m + NT - 1) / NT;
  const int64_t row_tiles = (p.groups + G - 1) / G;
  if (token_tiles > INT_MAX || row_tiles > 65535 || p.chunks > 65535) return cudaErrorInvalidValue;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(row_tiles),
                        static_cast<unsigned>(splits));
  config.blockDim = dim3(Tile<F, NT, G>::kThreads);
  config.dynamicSmemBytes = Tile<F, NT, G>::kSmemBytes;
  config.stream = args.stream;
  cudaLaunchAttribute attrs[2] = {};
  int count = 0;
  if (splits > 1) {
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = 1;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = static_cast<unsigned>(splits);
    count = 1;
  }
  config.attrs = attrs;
  config.numAttrs = AppendDependentLaunch(device.cc_major, attrs, count);
  return cudaLaunchKernelEx(&config, GemmKernel<F, NT, G, kBf16>, p);
}

template <typename F, int NT, bool kBf16>
cudaError_t LaunchTile(const GemmArgs& args, const DeviceInfo& device, Options options) {
  cudaError_t err = Plan<F, NT, kBf16>(args, device, &options);
  if (err != cudaSuccess) return err;
  // PermuteKernel ahead of the GEMM where it does not permute in its stages (kStagePermute:
  // the same for both group counts) and the activations do not come permuted already
  // (F::kXPermuted: W2A8's prologue writes them in this order).
  if constexpr (!F::kXPermuted && !Tile<F, NT, 1>::kStagePermute) {
    if ((err = LaunchPermute<F, NT>(args, device)) != cudaSuccess) return err;
  }
  if constexpr (NT < 128) {
    if (options.groups == 2) return LaunchGemm<F, NT, 2, kBf16>(args, device, options.splits);
  }
  return LaunchGemm<F, NT, 1, kBf16>(args, device, options.splits);
}

// fn(std::integral_constant<int, NT>{}) for TokenTile's tile NT of args, where the
// 64-token tiles permute the activations in their stages up to stage_permute_tokens.
template <typename F, typename Fn>
cudaError_t ForTokenTile(const GemmArgs& args, const Options& options, const DeviceInfo& device,
                         int stage_permute_tokens, Fn&& fn) {
  switch (TokenTile(args.m, args.shape.n, args.shape.k, options, device.sms, F::kWideTiles,
                    stage_permute_tokens)) {
    case 32:
      return fn(std::integral_constant<int, 32>{});
    case 64:
      return fn(std::integral_constant<int, 64>{});
    case 128:
      return fn(std::integral_constant<int, 128>{});
    default:
      if constexpr (F::kWideTiles) return fn(std::integral_constant<int, 256>{});
      return cudaErrorInvalidValue;
  }
}

// The row groups per CTA and the K split that Launch takes for args (nonzero fields of
// *options are kept; the rest are filled in).
template <typename F, bool kBf16>
cudaError_t Resolve(const GemmArgs& args, Options* options) {
  DeviceInfo device;
  if (const cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  return ForTokenTile<F>(args, *options, device, F::kStagePermuteTokens, [&](auto nt) {
    return Plan<F, decltype(nt)::value, kBf16>(args, device, options);
  });
}

// Whether `device` runs the GEMM's sm_90a code.
template <typename F, bool kBf16>
cudaError_t Runs(const DeviceInfo& device, bool* runs) {
  // Per device: bit 2d says device d was checked, bit 2d + 1 that it runs the kernel.
  static std::atomic<uint64_t> checked{0};
  uint64_t bits = device.ordinal < 32 ? checked.load() >> (2 * device.ordinal) : 0;
  if ((bits & 1) == 0) {
    bool ok = false;
    const cudaError_t err = wgmma::Available(GemmKernel<F, 32, 1, kBf16>, &ok);
    if (err != cudaSuccess) return err;
    bits = ok ? 3 : 1;
    if (device.ordinal < 32) checked.fetch_or(bits << (2 * device.ordinal));
  }
  *runs = (bits & 2) != 0;
  return cudaSuccess;
}

// y = x * W^T through the wgmma GEMM where the device runs its sm_90a code (sets
// *launched; nothing is enqueued otherwise). Needs K % 128 == 0 and the format's
// workspace (for A16 formats PermutedXBytes(m, k), wgmma_layout.h), on TokenTile's tiles;
// several token tiles read each weight tile together (mostly once from HBM, then from L2).
// With `f64` set, 64-token tiles run on F64 instead, a variant of F with another
// kStagePermuteTokens (only its 64-token kernels exist).
template <typename F, bool kBf16, typename F64 = F>
cudaError_t Launch(const GemmArgs& args, const Options& options, bool* launched, bool f64 = false) {
  *launched = false;
  DeviceInfo device;
  cudaError_t err = CurrentDeviceInfo(&device);
  if (err != cudaSuccess) return err;
  bool runs = false;
  if ((err = Runs<F, kBf16>(device, &runs)) != cudaSuccess || !runs) return err;
  if (args.workspace == nullptr || args.shape.k % kChunkK != 0) return cudaErrorInvalidValue;
  *launched = true;
  const int stage_permute_tokens = f64 ? F64::kStagePermuteTokens : F::kStagePermuteTokens;
  return ForTokenTile<F>(args, options, device, stage_permute_tokens, [&](auto nt) {
    constexpr int kNt = decltype(nt)::value;
    if constexpr (kNt == 64 && !std::is_same_v<F, F64>) {
      if (f64) return LaunchTile<F64, 64, kBf16>(args, device, options);
    }
    return LaunchTile<F, kNt, kBf16>(args, device, options);
  });
}

}  // namespace qmm::cuda::wgmma_gemm

#endif  // QMM_KERNELS_CUDA_WGMMA_GEMM_LAUNCH_CUH_
