// Pieces shared by the W4A16 kernels (w4a16_staged.cuh, w4a16_direct.cuh,
// w4a16_decode.cuh) and the wgmma GEMM (wgmma_gemm.cuh): launch parameters, the per-step
// tensor-core math and the split-K epilogue.
#ifndef QMM_KERNELS_CUDA_W4A16_COMMON_CUH_
#define QMM_KERNELS_CUDA_W4A16_COMMON_CUH_

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/activation.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/gemm_args.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_ptx.cuh"
#include "kernels/dtype.h"

namespace qmm::cuda::w4a16 {

inline constexpr int kWarps = 8;  // one strip of a 128-row group per warp (and R per warp)
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxSplits = 8;  // the portable cluster size

struct Params {
  const uint8_t* w;  // weight words
  const uint8_t* s;  // scales
  const void* x;
  void* y;
  int64_t m;
  int64_t n;
  int64_t k;
  int64_t groups;
  // Byte strides of one group's chunk and its scales (w4a16_layout.h); the chunk stride
  // of the scales is 0 for per-row scales.
  int64_t w_group_stride;
  int64_t w_chunk_stride;
  int64_t s_group_stride;
  int64_t s_chunk_stride;
  int32_t chunks;  // K / 128
  // CTAs of one cluster, each owning a contiguous range of chunks.
  int32_t splits;
  // Decode kernel: log2 of the warps of one CTA that share a row set (decode_split.cuh).
  int32_t split_shift = 0;
  // Decode kernel: log2 of the CTAs (a cluster) that share a row set (decode_split.cuh).
  int32_t cluster_shift = 0;
  DType y_dtype;
  // The wgmma GEMM on fp16 activations (w4a16_wgmma.cuh): s is then the gemm scales'
  // region, whose sums the row factors multiply (w4a16_layout.h); with per-row scales
  // (no such regions, row_factors nullptr) the dequantized weights are q * 2^-9.
  bool gemm_f16 = false;
  const float* row_factors = nullptr;
  // The wgmma GEMM with per-row scales: the scale pair its loop applies to every chunk's
  // weights (w4a16_wgmma.cuh); 0 where it reads each chunk's from the stage.
  uint32_t gemm_fixed_pair = 0;
  // Decode kernel: let the next kernel launch as soon as this one's wait returns, not
  // only once its last loads are issued (dependent_launch.h says when each pays).
  bool early_trigger = false;
  // Decode kernel, gated MLP: the up weight (same shape and layout as w), its scales and
  // the gate's activation.
  const uint8_t* w_up = nullptr;
  const uint8_t* s_up = nullptr;
  Activation glu_act = Activation::kSilu;
  // Decode kernel with zero points (kZp): the zero biases of x's dtype, laid out as the
  // scales (w4a16_layout.h); set for every weight with zero points, read by kZp only.
  // zb_up: the up weight's, for a gated MLP.
  const uint8_t* zb = nullptr;
  const uint8_t* zb_up = nullptr;
  // Decode kernel, stream-K grid (decode_stream.cuh): the sums that CTAs hand on
  // (GemmArgs::sync).
  uint64_t* stream_sums = nullptr;
  // Added to y when set ([m][n], GemmArgs::residual).
  const void* residual = nullptr;
  DType residual_dtype = DType::kF32;
};

// The parameters of a launch on the W4A16 layout; splits 1 (early_trigger off).
inline Params MakeParams(const GemmArgs& args) {
  const WeightShape& shape = args.shape;
  const int64_t chunks = NumChunks(shape);
  Params p;
  p.w = static_cast<const uint8_t*>(args.weight);
  p.s = p.w + WeightRegionBytes(shape);
  p.x = args.x;
  p.y = args.y;
  p.m = args.m;
  p.n = shape.n;
  p.k = shape.k;
  p.groups = NumGroups(shape);
  p.w_group_stride = chunks * int64_t{kGroupChunkBytes};
  p.w_chunk_stride = kGroupChunkBytes;
  p.s_group_stride = ScaleGroups(shape) * kGroupScaleBytes;
  p.s_chunk_stride = shape.group_size == 0 ? 0 : kGroupScaleBytes;
  p.chunks = static_cast<int32_t>(chunks);
  p.splits = 1;
  p.y_dtype = args.y_dtype;
  p.residual = args.residual;
  p.residual_dtype = args.residual_dtype;
  if (shape.zero_points) p.zb = p.w + ZeroBiasesOf(shape, args.x_dtype);
  return p;
}

// A weight format's scales of the rows g and g + 8 of a warp's strip, which the wgmma
// GEMM applies to its sums (wgmma_gemm.cuh: F::LoadRowScales, F::Finish).
struct RowScales {
  float lo, hi;
};

// This CTA's range of chunks.
__device__ inline int ChunkBegin(const Params& p, int split) { return split * p.chunks / p.splits; }

template <int kIndex>
__device__ inline uint32_t Word(const uint4& v) {
  if constexpr (kIndex == 0) return v.x;
  if constexpr (kIndex == 1) return v.y;
  if constexpr (kIndex == 2) return v.z;
  return v.w;
}

// One k16 step of one strip against T tiles of 8 tokens: `w` is the step's layout word,
// xb[tile] holds k = 16t + 8h .. +7 of token g, and step 2h + kHalf reads its words
// 2 kHalf and 2 kHalf + 1.
template <int T, int kHalf, bool kBf16>
__device__ inline void MmaStep(uint32_t w, const uint4 (&xb)[T], float (&part)[T][4],
                               DequantBias bias = SymmetricBias<kBf16>()) {
  uint32_t a[4];
  Dequant<kBf16>(w, a, bias);
#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    Mma<kBf16>(part[tile], a, Word<2 * kHalf>(xb[tile]), Word<2 * kHalf + 1>(xb[tile]));
  }
}

// A strip's scales for one chunk in the activation type, both halves of each register
// the same: lo = s[row g], hi = s[row g + 8]. bf16 keeps the fp16 scale as a sum of two
// bf16 values (the rounded scale and what rounding dropped), so that only the product is
// rounded, once, and not the scale the same way for every weight of the row.
struct ChunkScales {
  uint32_t lo, hi;
  uint32_t lo_rest, hi_rest;  // bf16 only
};

// `pair` is the layout's fp16 (s[row g], s[row g + 8]).
template <bool kBf16>
__device__ inline ChunkScales SplatScales(uint32_t pair) {
  const __half2 s = *reinterpret_cast<const __half2*>(&pair);
  ChunkScales out;
  if constexpr (kBf16) {
    const float l = __low2float(s);
    const float h = __high2float(s);
    const __nv_bfloat162 lb = __float2bfloat162_rn(l);
    const __nv_bfloat162 hb = __float2bfloat162_rn(h);
    const __nv_bfloat162 lr = __float2bfloat162_rn(l - __low2float(lb));
    const __nv_bfloat162 hr = __float2bfloat162_rn(h - __low2float(hb));
    out.lo = *reinterpret_cast<const uint32_t*>(&lb);
    out.hi = *reinterpret_cast<const uint32_t*>(&hb);
    out.lo_rest = *reinterpret_cast<const uint32_t*>(&lr);
    out.hi_rest = *reinterpret_cast<const uint32_t*>(&hr);
  } else {
    const __half2 l = __low2half2(s);
    const __half2 h = __high2half2(s);
    out.lo = *reinterpret_cast<const uint32_t*>(&l);
    out.hi = *reinterpret_cast<const uint32_t*>(&h);
  }
  return out;
}

// The four A registers of one k16 step of a strip (w4a16_layout.h) times the chunk's
// scales (registers 0 and 2 hold row g, 1 and 3 row g + 8).
template <bool kBf16>
__device__ inline void DequantScaled(uint32_t w, const ChunkScales& s, uint32_t (&a)[4],
                                     DequantBias bias = SymmetricBias<kBf16>()) {
  Dequant<kBf16>(w, a, bias);
  if constexpr (kBf16) {
    a[0] = Fma2<true>(a[0], s.lo, Fma2<true>(a[0], s.lo_rest, 0));
    a[1] = Fma2<true>(a[1], s.hi, Fma2<true>(a[1], s.hi_rest, 0));
    a[2] = Fma2<true>(a[2], s.lo, Fma2<true>(a[2], s.lo_rest, 0));
    a[3] = Fma2<true>(a[3], s.hi, Fma2<true>(a[3], s.hi_rest, 0));
  } else {
    a[0] = Fma2<false>(a[0], s.lo, 0);
    a[1] = Fma2<false>(a[1], s.hi, 0);
    a[2] = Fma2<false>(a[2], s.lo, 0);
    a[3] = Fma2<false>(a[3], s.hi, 0);
  }
}

// One k16 step of one strip against T tiles of 8 tokens, as MmaStep, with the weights
// scaled in 16 bits (DequantScaled) and accumulated straight into `acc`.
template <int T, int kHalf, bool kBf16>
__device__ inline void MmaStepScaled(uint32_t w, const ChunkScales& s, const uint4 (&xb)[T],
                                     float (&acc)[T][4],
                                     DequantBias bias = SymmetricBias<kBf16>()) {
  uint32_t a[4];
  DequantScaled<kBf16>(w, s, a, bias);
#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    Mma<kBf16>(acc[tile], a, Word<2 * kHalf>(xb[tile]), Word<2 * kHalf + 1>(xb[tile]));
  }
}

// acc += part * scale: `pair` is the strip's (s[row g], s[row g + 8]) for this chunk. The
// integer products stay exact in fp32 until here.
template <int T>
__device__ inline void ApplyScale(uint32_t pair, const float (&part)[T][4], float (&acc)[T][4]) {
  const __half2 s = *reinterpret_cast<const __half2*>(&pair);
  const float s_lo = __low2float(s);
  const float s_hi = __high2float(s);
#pragma unroll
  for (int tile = 0; tile < T; ++tile) {
    acc[tile][0] = fmaf(part[tile][0], s_lo, acc[tile][0]);
    acc[tile][1] = fmaf(part[tile][1], s_lo, acc[tile][1]);
    acc[tile][2] = fmaf(part[tile][2], s_hi, acc[tile][2]);
    acc[tile][3] = fmaf(part[tile][3], s_hi, acc[tile][3]);
  }
}

// y[tok][n] = v (+ the residual), in y's dtype; nothing outside [m, n].
__device__ inline void StoreY(const Params& p, int64_t tok, int64_t n, float v) {
  if (tok >= p.m || n >= p.n) return;
  StoreWithResidual(p.y_dtype, p.y, p.residual, p.residual_dtype, tok * p.n + n, v);
}

// The split-K epilogue's tile buffer: a CTA's sums of kTokens tokens by kRows rows (a
// multiple of 32), kRows floats a token, in which the four 8-row blocks of each 32 rows
// trade places by bits 1-2 of the token, so that a warp's fragment stores (PutFragment)
// hit 32 distinct banks. The map is its own inverse.
template <int kRows>
__device__ __forceinline__ int TileIndex(int tok, int row) {
  static_assert(kRows % 32 == 0);
  return tok * kRows + (row ^ (((tok >> 1) & 3) << 3));
}

// Puts one warp's mma accumulator fragment into the tile buffer: rows 16 strip + g and
// + 8, tokens 8 j + 2t and + 1 (g = lane / 4, t = lane % 4).
template <int kRows>
__device__ __forceinline__ void PutFragment(float* tile, int strip, int j, int lane, float4 v) {
  const int row = strip * 16 + lane / 4;
  const int tok = j * 8 + lane % 4 * 2;
  tile[TileIndex<kRows>(tok, row)] = v.x;
  tile[TileIndex<kRows>(tok + 1, row)] = v.y;
  tile[TileIndex<kRows>(tok, row + 8)] = v.z;
  tile[TileIndex<kRows>(tok + 1, row + 8)] = v.w;
}

// y[tok][n .. n + 3] = v (+ the residual), in y's dtype: one store of 8 or 16 bytes where
// the four rows are whole and aligned, else value by value.
__device__ inline void StoreY4(const Params& p, int64_t tok, int64_t n, float4 v) {
  if (tok >= p.m || n >= p.n) return;
  const int64_t i = tok * p.n + n;
  const int bytes = p.y_dtype == DType::kF32 ? 16 : 8;
  if (n + 4 > p.n || (reinterpret_cast<uintptr_t>(p.y) + i * (bytes / 4)) % bytes != 0) {
    StoreY(p, tok, n, v.x);
    StoreY(p, tok, n + 1, v.y);
    StoreY(p, tok, n + 2, v.z);
    StoreY(p, tok, n + 3, v.w);
    return;
  }
  if (p.residual != nullptr) {
    v.x += LoadAs(p.residual_dtype, p.residual, i);
    v.y += LoadAs(p.residual_dtype, p.residual, i + 1);
    v.z += LoadAs(p.residual_dtype, p.residual, i + 2);
    v.w += LoadAs(p.residual_dtype, p.residual, i + 3);
  }
  StoreAs4(p.y_dtype, p.y, i, v);
}

// The cluster barrier that keeps a CTA's tile alive for the other CTAs' reads
// (ReduceAndStore): a relaxed arrival, then the wait.
__device__ inline void ArriveAndWaitRelaxed() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

// This CTA's 1/splits slice of the cluster's summed tile buffers (TileIndex), passed to
// store(tok, row, v) four rows of one token at a time (tile coordinates). A thread takes
// four consecutive floats of each buffer, so that a warp's loads from each CTA are 512
// contiguous bytes and its stores whole rows of y; kBatch of them at once, their loads in
// flight together. `clustered`: the buffers are the cluster's (distributed shared memory),
// else this CTA's own.
template <int kTokens, int kRows, typename Store>
__device__ inline void SumSlice(const float* tile, int splits, int split, bool clustered,
                                Store&& store) {
  constexpr int kQuads = kTokens * kRows / 4;
  const int per = (kQuads + splits - 1) / splits;  // splits: up to kMaxSplits
  const int end = min((split + 1) * per, kQuads);
  constexpr int kBatch = 4;
  for (int q0 = split * per + static_cast<int>(threadIdx.x); q0 < end; q0 += kBatch * kThreads) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) v[b] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int c = 0; c < splits; ++c) {
#if __CUDA_ARCH__ >= 900
      const float4* src = reinterpret_cast<const float4*>(
          clustered ? cooperative_groups::this_cluster().map_shared_rank(tile, c) : tile);
#else
      const float4* src = reinterpret_cast<const float4*>(tile);
#endif
      float4 u[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int q = q0 + b * kThreads;
        u[b] = q < end ? src[q] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        v[b].x += u[b].x;
        v[b].y += u[b].y;
        v[b].z += u[b].z;
        v[b].w += u[b].w;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int q = q0 + b * kThreads;
      if (q >= end) break;
      // Floats 4q.. of the buffer: token q / (kRows / 4), rows TileIndex's inverse.
      const int tok = q / (kRows / 4);
      store(tok, TileIndex<kRows>(tok, q % (kRows / 4) * 4) - tok * kRows, v[b]);
    }
  }
}

// Sums the tile buffers of the cluster's CTAs and writes y, tokens tok0 and rows row0 on;
// every consumer thread (the first kThreads) of every CTA of the cluster calls it once its
// `tile` holds this CTA's partial sums, the CTA's other threads call SkipReduction. Each
// CTA writes its 1/splits slice (SumSlice). Before, a thread wrote one value at a time in
// fragment order, switching on y's dtype each time: at 256 tokens that took more than half
// of a one-turn W2A8 GEMM at K = 2048 (ncu, H200).
// y's common case (no residual, whole aligned quads) has a loop of its own for each dtype.
// With the dtype switch, the residual and the unaligned fallback in every store (StoreY4;
// 29 KB of branchy code in the W8A16 GEMM's epilogue), a CTA's share of this function took
// 4,000 cycles at 64 tokens without a K split, 1,300 with its stores left out, and
// 12,000-15,700 at 256 (a per-CTA timeline on the H200, session 47); these loops took
// 1-12% off most launches at 32-256 tokens (W2A8 4096x14336 at 256: 36.34 -> 32.12 us).
// Without a K split no other CTA reads the tile: the consumers' own barrier (named
// barrier 1) stands for the cluster's, and the tile is read as local shared memory. With
// one, the last barrier only keeps each CTA's tile alive until the cluster has read it,
// so its arrival is relaxed: a release there waits until this thread's stores to y are
// visible to the whole cluster, a round trip to L2 on every launch's critical path.
template <int kTokens, int kRows>
__device__ inline void ReduceAndStore(const Params& p, const float* tile, int64_t tok0,
                                      int64_t row0, int split) {
  const bool clustered = p.splits > 1;
#if __CUDA_ARCH__ >= 900
  if (clustered) {
    cooperative_groups::this_cluster().sync();
  } else {
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
  }
#else
  __syncthreads();  // the host launches one split only before sm_90
#endif
  const int64_t toks = p.m - tok0;
  const int64_t rows = p.n - row0;
  const bool plain =
      p.residual == nullptr && p.n % 4 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  auto sum = [&](auto&& store) {
    SumSlice<kTokens, kRows>(tile, p.splits, split, clustered, store);
  };
  // y: the tile's first value, in y's type.
  auto sum_plain = [&](auto* y) {
    sum([&](int tok, int row, float4 v) {
      if (tok < toks && row < rows) Store4(y + tok * p.n + row, v);
    });
  };
  const int64_t first = tok0 * p.n + row0;
  if (plain && p.y_dtype == DType::kF16) {
    sum_plain(static_cast<__half*>(p.y) + first);
  } else if (plain && p.y_dtype == DType::kBF16) {
    sum_plain(static_cast<__nv_bfloat16*>(p.y) + first);
  } else if (plain && p.y_dtype == DType::kF32) {
    sum_plain(static_cast<float*>(p.y) + first);
  } else {
    sum([&](int tok, int row, float4 v) { StoreY4(p, tok0 + tok, row0 + row, v); });
  }
#if __CUDA_ARCH__ >= 900
  if (clustered) ArriveAndWaitRelaxed();
#endif
}

// ReduceAndStore's barriers, for the threads of a CTA that have no share of its work:
// the cluster's two where the launch splits K, none otherwise.
__device__ inline void SkipReduction(int splits) {
#if __CUDA_ARCH__ >= 900
  if (splits > 1) {
    cooperative_groups::this_cluster().sync();
    ArriveAndWaitRelaxed();
  }
#endif
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_COMMON_CUH_
