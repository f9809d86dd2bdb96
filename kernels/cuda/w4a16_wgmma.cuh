// The W4A16 weight format of the wgmma GEMM (wgmma_gemm.cuh): a group's chunk is its
// 8 KB of weights and 256 bytes of scales (w4a16_layout.h), two bulk copies; each warp
// dequantizes its strip with the magic-number trick and scales the weights in 16 bits
// (the chunk's per-row scale, as Marlin does). Per-row scales (one per row for all of K)
// multiply the fp32 sums at the end instead: exact, where bf16 would round each scale
// and product to 8 bits the same way in every chunk.
#ifndef QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
#define QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_

#include "kernels/cuda/w4a16_common.cuh"
#include "kernels/cuda/wgmma_a16_format.cuh"

namespace qmm::cuda::w4a16 {

// A strip's scales for one chunk in the activation type, both halves of each register
// the same: lo = s[row g], hi = s[row g + 8]. bf16 keeps the fp16 scale as a sum of two
// bf16 values (the rounded scale and what rounding dropped), so that only the product is
// rounded, once, and not the scale the same way for every weight of the row.
struct ChunkScales {
  uint32_t lo, hi;
  uint32_t lo_rest, hi_rest;  // bf16 only
};

// fp16 (1, 1): the scale pair of per-row-scaled weights inside the loop.
inline constexpr uint32_t kOnePair = 0x3c003c00;

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
__device__ inline void DequantScaled(uint32_t w, const ChunkScales& s, uint32_t (&a)[4]) {
  Dequant<kBf16>(w, a);
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

struct WgmmaFormat : wgmma_gemm::A16Format {
  static constexpr int kGroupStageBytes = kGroupChunkBytes + kGroupScaleBytes;

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
  __device__ static Raw Fetch(const Params& p, const uint8_t* gs, int warp, int lane, int blk) {
    Raw raw;
    raw.w = *reinterpret_cast<const uint4*>(gs + warp * kStripChunkBytes + blk * kBlockBytes +
                                            lane * 16);
    raw.scales = p.s_chunk_stride == 0
                     ? kOnePair
                     : *reinterpret_cast<const uint32_t*>(gs + kGroupChunkBytes +
                                                          warp * kStripScaleBytes + lane / 4 * 4);
    return raw;
  }

  template <bool kBf16>
  __device__ static void Dequant(const Raw& raw, int /*blk*/, uint32_t (*a)[4]) {
    const ChunkScales sc = SplatScales<kBf16>(raw.scales);
    DequantScaled<kBf16>(raw.w.x, sc, a[0]);
    DequantScaled<kBf16>(raw.w.y, sc, a[1]);
    DequantScaled<kBf16>(raw.w.z, sc, a[2]);
    DequantScaled<kBf16>(raw.w.w, sc, a[3]);
  }

  // Per-row scales multiply the sums here; per-chunk ones were applied in Dequant.
  __device__ static float4 Finish(const Params& p, int64_t group, int warp, int lane,
                                  int64_t /*tok*/, int /*split*/, const float (&d)[4]) {
    float lo = 1.f, hi = 1.f;
    if (p.s_chunk_stride == 0) {
      if (group >= p.groups) group = p.groups - 1;  // never stored
      const __half2 s = *reinterpret_cast<const __half2*>(p.s + group * p.s_group_stride +
                                                          warp * kStripScaleBytes + lane / 4 * 4);
      lo = __low2float(s);
      hi = __high2float(s);
    }
    return make_float4(d[0] * lo, d[1] * lo, d[2] * hi, d[3] * hi);
  }

  static Params MakeParams(const GemmArgs& args) { return w4a16::MakeParams(args); }
};

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
