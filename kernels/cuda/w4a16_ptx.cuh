// Device primitives of the W4A16 kernel: asynchronous copies, the magic-number int4
// dequant and the tensor-core MMA, for fp16 and bf16. All of them exist on sm_80.
#ifndef QMM_KERNELS_CUDA_W4A16_PTX_CUH_
#define QMM_KERNELS_CUDA_W4A16_PTX_CUH_

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/load_device.cuh"

namespace qmm::cuda::w4a16 {

// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src must still be a
// mapped address).
__device__ inline void CpAsync16(void* smem, const void* src, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ inline void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

#if __CUDA_ARCH__ >= 900
// sm_90 bulk copies: one thread moves a whole contiguous tile through the copy engine and
// the stage's mbarrier counts its bytes, so no other thread spends an instruction on it.
__device__ inline uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void MbarInit(uint64_t* bar, uint32_t arrivals = 1) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(SmemAddress(bar)), "r"(arrivals));
}
__device__ inline void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(SmemAddress(bar)) : "memory");
}
// Makes the initialized barriers visible to the copy engine.
__device__ inline void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ inline void MbarExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(SmemAddress(bar)),
               "r"(bytes)
               : "memory");
}
__device__ inline void BulkCopy(void* smem, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddress(smem)),
      "l"(src), "r"(bytes), "r"(SmemAddress(bar))
      : "memory");
}
// A box of `map` at coordinates (x, y) into smem (128-byte aligned) with one TMA copy;
// bar counts the box's bytes (rows past the tensor's read as zeros and count too).
__device__ inline void BulkTensorCopy(void* smem, const CUtensorMap* map, int x, int y,
                                      uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3}], [%4];" ::"r"(SmemAddress(smem)),
      "l"(map), "r"(x), "r"(y), "r"(SmemAddress(bar))
      : "memory");
}
__device__ inline void MbarWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}" ::"r"(SmemAddress(bar)),
      "r"(parity)
      : "memory");
}
#endif

template <int kLut>
__device__ inline uint32_t Lop3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(kLut));
  return d;
}
// (a & b) | c
constexpr int kAndOr = (0xf0 & 0xcc) | 0xaa;

template <bool kBf16>
__device__ inline uint32_t Fma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
}

// The biases that Dequant adds, in both halves of each register: `lo` to the values of
// rows g (A registers 0 and 2), `hi` to those of rows g + 8 (1 and 3).
struct DequantBias {
  uint32_t lo, hi;
};
// A symmetric weight's: q = u - 8.
template <bool kBf16>
__device__ constexpr DequantBias SymmetricBias() {
  if constexpr (kBf16) {
    return {0xc308c308, 0xc308c308};  // -136 = -(128 + 8)
  } else {
    return {0xe408e408, 0xd480d480};  // -1032 = -(1024 + 8); -72 = -(1024 / 16 + 8)
  }
}
// A zero-point weight's, from its layout pair (the zero biases of w4a16_layout.h, which
// make the values q - z): each half splat into both halves of its register.
__device__ inline DequantBias SplatBias(uint32_t pair) {
  return {__byte_perm(pair, 0, 0x1010), __byte_perm(pair, 0, 0x3232)};
}

// One layout word (8 offset-binary nibbles, see w4a16_layout.h) -> the four A registers
// of an m16n8k16 step, values q = u - 8 exactly (or q - z with a zero-point weight's
// `bias`). ORing u into the mantissa of 1024 (fp16 0x6400) or 128 (bf16 0x4300) makes
// 1024 + u (128 + u) with no conversion; one fma removes the bias. fp16 takes the high
// nibble of each byte in place (1024 + 16u, scaled by 1/16); bf16 has too few mantissa
// bits for that and shifts instead.
template <bool kBf16>
__device__ inline void Dequant(uint32_t w, uint32_t (&a)[4],
                               DequantBias bias = SymmetricBias<kBf16>()) {
  if constexpr (kBf16) {
    constexpr uint32_t kMagic = 0x43004300;  // 128
    constexpr uint32_t kOne = 0x3f803f80;
    a[0] = Fma2<true>(Lop3<kAndOr>(w, 0x000f000f, kMagic), kOne, bias.lo);
    a[1] = Fma2<true>(Lop3<kAndOr>(w >> 4, 0x000f000f, kMagic), kOne, bias.hi);
    a[2] = Fma2<true>(Lop3<kAndOr>(w >> 8, 0x000f000f, kMagic), kOne, bias.lo);
    a[3] = Fma2<true>(Lop3<kAndOr>(w >> 12, 0x000f000f, kMagic), kOne, bias.hi);
  } else {
    constexpr uint32_t kMagic = 0x64006400;  // 1024
    constexpr uint32_t kOne = 0x3c003c00;
    constexpr uint32_t kSixteenth = 0x2c002c00;
    const uint32_t w8 = w >> 8;
    a[0] = Fma2<false>(Lop3<kAndOr>(w, 0x000f000f, kMagic), kOne, bias.lo);
    a[1] = Fma2<false>(Lop3<kAndOr>(w, 0x00f000f0, kMagic), kSixteenth, bias.hi);
    a[2] = Fma2<false>(Lop3<kAndOr>(w8, 0x000f000f, kMagic), kOne, bias.lo);
    a[3] = Fma2<false>(Lop3<kAndOr>(w8, 0x00f000f0, kMagic), kSixteenth, bias.hi);
  }
}

// One layout word -> its four A registers already scaled, fp16, one fma a pair: the
// nibble u masked in place is the subnormal u * 2^-24 (bits 0-3) or u * 2^-20 (bits
// 4-7), and fma(u * 2^-24, s * 2^(e + 24), -8 s * 2^e) = (u - 8) s * 2^e, rounded once,
// as (u - 8) s is by DequantScaled. `scale_lo` / `scale_hi` hold the gemm scales of rows
// g / g + 8 in both halves (s * 2^(e + 24) and s * 2^(e + 20), w4a16_layout.h), `bias_lo`
// / `bias_hi` their -8 s * 2^e; the caller multiplies the sums by 2^-e. fp16 keeps
// subnormals (no .ftz): the products and sums are exact, as the rounding is.
__device__ inline void DequantScaledF16(uint32_t w, uint32_t scale_lo, uint32_t scale_hi,
                                        uint32_t bias_lo, uint32_t bias_hi, uint32_t (&a)[4]) {
  const uint32_t w8 = w >> 8;
  a[0] = Fma2<false>(w & 0x000f000f, scale_lo, bias_lo);
  a[1] = Fma2<false>(w & 0x00f000f0, scale_hi, bias_hi);
  a[2] = Fma2<false>(w8 & 0x000f000f, scale_lo, bias_lo);
  a[3] = Fma2<false>(w8 & 0x00f000f0, scale_hi, bias_hi);
}

// c += A * B, m16n8k16, fp32 accumulators.
template <bool kBf16>
__device__ inline void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace qmm::cuda::w4a16

#endif  // QMM_KERNELS_CUDA_W4A16_PTX_CUH_
