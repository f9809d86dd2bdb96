// The W4A16 weight format of the wgmma GEMM (wgmma_gemm.cuh): a group's chunk is its
// 8 KB of weights and 256 bytes of scales (w4a16_layout.h), two bulk copies; each warp
// dequantizes its strip and scales the weights in 16 bits (the chunk's per-row scale, as
// Marlin does): fp16 by one fma a pair on the gemm scales (DequantScaledF16), its sums
// multiplied by the row factors at the end; bf16 by the magic-number trick and a second
// fma. Per-row scales (one per row for all of K) multiply the fp32 sums at the end
// instead: exact, where bf16 would round each scale and product to 8 bits the same way in
// every chunk.
#ifndef QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_

#include "kernels/cuda/gemm_groups.h"
#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma_a16_format.cuh"

namespace qmm::cuda::w4a16 {

// The scale pair of per-row-scaled weights inside the loop: bf16's (1, 1); fp16's gemm
// scales of 1 at e = -9, (2^15, 2^11), so that the weights come out as q * 2^-9.
inline constexpr uint32_t kOnePair = 0x3c003c00;
inline constexpr uint32_t kRowScaledF16Pair = 0x68007800;
inline constexpr float kRowScaledF16Factor = 512.0f;
// fp16 -2^-21 and -2^-17 (subnormal) in both halves: the gemm scales of rows g and g + 8
// times these are their bias, -8 s * 2^e (exact: the product is a normal fp16 wherever
// the scale is within 2^8 of its row's largest).
inline constexpr uint32_t kBiasLoFactor = 0x80088008;
inline constexpr uint32_t kBiasHiFactor = 0x80808080;

struct WgmmaFormat : wgmma_gemm::A16Format {
  static constexpr int kGroupStageBytes = kGroupChunkBytes + kGroupScaleBytes;
  // Six chunks a CTA's fill and reduction up to 64 tokens, either group count: fewer K
  // splits where the row groups fill the SMs. On the H200 (session 54, 22 shapes at 24-64
  // tokens against a fill of 2) 4096 x 22016 at 24 / 32 tokens 29.5 -> 23.0 us, 4096 x
  // 57344 at 48 80.8 -> 64.2, 2048 x 22016 at 48 / 64 20% faster, 14336 x 11008 8-10%,
  // 5120 x 3072 at 48 / 64 14%, 2048 x 5120 and 2048 x 14336 at 24 / 32 7-9% (one group);
  // 4096 x 5120 at 24 / 32 and 5120 x 11008 at 48 / 64 2.5-3% slower, 28672 x 11008 at
  // 24-48 2.5-5.9%.
  static constexpr wgmma_gemm::GroupFill GroupFillChunks(int nt) {
    return nt <= 64 ? wgmma_gemm::GroupFill{6, 6} : wgmma_gemm::GroupFill{};
  }

  // On the H200, permuting in the stages against PermuteKernel's copy (session 38): 32
  // tokens 0-3% faster, 64 tokens from 5% faster to 10% slower, 128 up to 20% slower.
  static constexpr int kStagePermuteTokens = 32;
  // Three stages of 256 tokens fit (73 KB each).
  static constexpr bool kWideTiles = true;

  // Logical core j of a block holds the physical words j, j + 8, j + 16, j + 24.
  __device__ static int CoreWord(int j, int t) { return j + 8 * t; }

  __device__ static void Load(uint8_t* dst, const Params& p, int64_t group, int64_t chunk,
                              uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    BulkCopy(dst, p.w + group * p.w_group_stride + chunk * p.w_chunk_stride, kGroupChunkBytes, bar);
    BulkCopy(dst + kGroupChunkBytes, p.s + group * p.s_group_stride + chunk * p.s_chunk_stride,
             kGroupScaleBytes, bar);
#endif
  }

  // A 64-k block of the warp's strip and its chunk scales (both rows' fp16 pair).
  struct Raw {
    uint4 w;
    uint32_t scales;
  };
  __device__ static int2 ThreadOffsets(int warp, int lane) {
    return make_int2(warp * kStripChunkBytes + lane * 16,
                     kGroupChunkBytes + warp * kStripScaleBytes + lane / 4 * 4);
  }
  __device__ static Raw Fetch(const Params& p, const uint8_t* w, const uint8_t* side, int blk) {
    Raw raw;
    raw.w = *reinterpret_cast<const uint4*>(w + blk * kBlockBytes);
    raw.scales =
        p.gemm_fixed_pair != 0 ? p.gemm_fixed_pair : *reinterpret_cast<const uint32_t*>(side);
    return raw;
  }

  template <bool kBf16>
  __device__ static void Dequant(const Raw& raw, int /*blk*/, uint32_t (*a)[4]) {
    if constexpr (kBf16) {
      const ChunkScales sc = SplatScales<true>(raw.scales);
      DequantScaled<true>(raw.w.x, sc, a[0]);
      DequantScaled<true>(raw.w.y, sc, a[1]);
      DequantScaled<true>(raw.w.z, sc, a[2]);
      DequantScaled<true>(raw.w.w, sc, a[3]);
    } else {
      const uint32_t lo = __byte_perm(raw.scales, 0, 0x1010);
      const uint32_t hi = __byte_perm(raw.scales, 0, 0x3232);
      const uint32_t bias_lo = Fma2<false>(lo, kBiasLoFactor, 0);  // the products
      const uint32_t bias_hi = Fma2<false>(hi, kBiasHiFactor, 0);
      DequantScaledF16(raw.w.x, lo, hi, bias_lo, bias_hi, a[0]);
      DequantScaledF16(raw.w.y, lo, hi, bias_lo, bias_hi, a[1]);
      DequantScaledF16(raw.w.z, lo, hi, bias_lo, bias_hi, a[2]);
      DequantScaledF16(raw.w.w, lo, hi, bias_lo, bias_hi, a[3]);
    }
  }

  // Per-row scales multiply the sums (Finish), as do fp16's row factors; bf16's per-chunk
  // scales were applied in Dequant.
  __device__ static RowScales LoadRowScales(const Params& p, int64_t group, int warp, int lane) {
    if (group >= p.groups) group = p.groups - 1;  // never stored
    if (p.s_chunk_stride != 0) {
      if (!p.gemm_f16) return RowScales{1.f, 1.f};
      const float2 f = *reinterpret_cast<const float2*>(
          reinterpret_cast<const uint8_t*>(p.row_factors) + group * kGroupRowFactorBytes +
          warp * kStripRowFactorBytes + lane / 4 * 8);
      return RowScales{f.x, f.y};
    }
    const __half2 s = *reinterpret_cast<const __half2*>(p.s + group * p.s_group_stride +
                                                        warp * kStripScaleBytes + lane / 4 * 4);
    const float k = p.gemm_f16 ? kRowScaledF16Factor : 1.f;
    return RowScales{__low2float(s) * k, __high2float(s) * k};
  }

  __device__ static float4 Finish(const Params& /*p*/, const RowScales& s, int64_t /*tok*/,
                                  int /*split*/, const float (&d)[4]) {
    return make_float4(d[0] * s.lo, d[1] * s.lo, d[2] * s.hi, d[3] * s.hi);
  }

  static cudaError_t MakeParams(const GemmArgs& args, Params* p) {
    *p = w4a16::MakeParams(args);
    p->gemm_f16 = args.x_dtype == DType::kF16;
    if (p->s_chunk_stride == 0) p->gemm_fixed_pair = p->gemm_f16 ? kRowScaledF16Pair : kOnePair;
    if (p->gemm_f16 && HasGemmScales(args.shape)) {
      p->s = p->w + GemmScalesOffset(args.shape);
      p->row_factors = reinterpret_cast<const float*>(p->w + RowFactorsOffset(args.shape));
    }
    return cudaSuccess;
  }
};

// WgmmaFormat with 64-token tiles permuted in their stages too (w4a16.cu takes it on
// weights of few row groups, kNarrowGroups): each CTA permutes its own copy of the
// activations, so that work grows with the row groups while the permute kernel's, ahead
// of the GEMM, does not. On the H200 (sessions 48 and 50) it took 14336 x 4096 at M = 48
// / 64 5-7% off (28.71 / 28.91 -> 27.33 / 27.39 us in session 50) and 4096 x 4096 at M =
// 128 8-12% off (14.11 -> 12.46), 4096 x 4096 at 48 / 64 within 0.7%; but 4096 x 14336
// (112 row groups) 7-11% slower and 8192 x 8192 (64) up to 6%.
struct WgmmaFormatNarrow : WgmmaFormat {
  static constexpr int kStagePermuteTokens = 64;
};

// fp16 -1, -1032 and -72; -2^-24 and -2^-20 (subnormal), each in both halves.
inline constexpr uint32_t kMinusOnePair = 0xbc00bc00;
inline constexpr uint32_t kMinus1032Pair = 0xe408e408;
inline constexpr uint32_t kMinus72Pair = 0xd480d480;
inline constexpr uint32_t kMinusLoUnitPair = 0x80018001;
inline constexpr uint32_t kMinusHiUnitPair = 0x80108010;

// Base (WgmmaFormat or WgmmaFormatNarrow) for a weight with zero points: a stage also holds
// the chunk's zero biases of x's dtype (w4a16_layout.h, p.zb), after its scales, so that the
// weights dequantize to q - z as the decode kernels' do. bf16 adds them in the magic-number
// dequant (Dequant's bias). fp16 dequantizes as a symmetric weight does (one fma a pair on
// the gemm scales: (u - 8) s 2^e rounded once), and a second fma adds -z s 2^e: z comes back
// exactly out of the fp16 zero bias (-(1024 + 8 + z) for rows g, -(64 + 8 + z) for rows g + 8),
// times -2^-24 or -2^-20 an exact subnormal, whose product with the gemm scale is exact in
// the fma. Each weight so rounds twice, by an error that varies with its code. One fma
// with the bias -(8 + z) s 2^e instead (rounded to fp16, where -8 s 2^e is exact) rounded
// every weight of a row's group by the same error, which 128 inputs add up: on an H100 up
// to 1.23x the tests' tolerance at 17-256 rows (session 67).
template <typename Base>
struct WgmmaZeroPoints : Base {
  static constexpr int kGroupStageBytes = Base::kGroupStageBytes + kGroupScaleBytes;

  __device__ static void Load(uint8_t* dst, const Params& p, int64_t group, int64_t chunk,
                              uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    Base::Load(dst, p, group, chunk, bar);
    BulkCopy(dst + Base::kGroupStageBytes,
             p.zb + group * p.s_group_stride + chunk * p.s_chunk_stride, kGroupScaleBytes, bar);
#endif
  }

  struct Raw : Base::Raw {
    uint32_t zeros;  // the zero-bias pair of rows g, g + 8
  };
  __device__ static Raw Fetch(const Params& p, const uint8_t* w, const uint8_t* side, int blk) {
    Raw raw;
    static_cast<typename Base::Raw&>(raw) = Base::Fetch(p, w, side, blk);
    raw.zeros = *reinterpret_cast<const uint32_t*>(side + kGroupScaleBytes);
    return raw;
  }

  template <bool kBf16>
  __device__ static void Dequant(const Raw& raw, int /*blk*/, uint32_t (*a)[4]) {
    const DequantBias zeros = SplatBias(raw.zeros);
    if constexpr (kBf16) {
      const ChunkScales sc = SplatScales<true>(raw.scales);
      DequantScaled<true>(raw.w.x, sc, a[0], zeros);
      DequantScaled<true>(raw.w.y, sc, a[1], zeros);
      DequantScaled<true>(raw.w.z, sc, a[2], zeros);
      DequantScaled<true>(raw.w.w, sc, a[3], zeros);
    } else {
      Base::template Dequant<false>(raw, 0, a);
      const uint32_t lo = __byte_perm(raw.scales, 0, 0x1010);
      const uint32_t hi = __byte_perm(raw.scales, 0, 0x3232);
      // -z 2^-24, -z 2^-20
      const uint32_t z_lo =
          Fma2<false>(Fma2<false>(zeros.lo, kMinusOnePair, kMinus1032Pair), kMinusLoUnitPair, 0);
      const uint32_t z_hi =
          Fma2<false>(Fma2<false>(zeros.hi, kMinusOnePair, kMinus72Pair), kMinusHiUnitPair, 0);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        a[s][0] = Fma2<false>(z_lo, lo, a[s][0]);
        a[s][1] = Fma2<false>(z_hi, hi, a[s][1]);
        a[s][2] = Fma2<false>(z_lo, lo, a[s][2]);
        a[s][3] = Fma2<false>(z_hi, hi, a[s][3]);
      }
    }
  }
};

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
