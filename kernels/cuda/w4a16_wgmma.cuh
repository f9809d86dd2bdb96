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

// fp16 (1, 1): the scale pair of per-row-scaled weights inside the loop.
inline constexpr uint32_t kOnePair = 0x3c003c00;

struct WgmmaFormat : wgmma_gemm::A16Format {
  static constexpr int kGroupStageBytes = kGroupChunkBytes + kGroupScaleBytes;

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

  // Per-row scales multiply the sums (Finish); per-chunk ones were applied in Dequant.
  __device__ static RowScales LoadRowScales(const Params& p, int64_t group, int warp, int lane) {
    if (p.s_chunk_stride != 0) return RowScales{1.f, 1.f};
    if (group >= p.groups) group = p.groups - 1;  // never stored
    const __half2 s = *reinterpret_cast<const __half2*>(p.s + group * p.s_group_stride +
                                                        warp * kStripScaleBytes + lane / 4 * 4);
    return RowScales{__low2float(s), __high2float(s)};
  }

  __device__ static float4 Finish(const Params& /*p*/, const RowScales& s, int64_t /*tok*/,
                                  int /*split*/, const float (&d)[4]) {
    return make_float4(d[0] * s.lo, d[1] * s.lo, d[2] * s.hi, d[3] * s.hi);
  }

  static cudaError_t MakeParams(const GemmArgs& args, Params* p) {
    *p = w4a16::MakeParams(args);
    return cudaSuccess;
  }
};

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_WGMMA_CUH_
