// Device primitives of the W8A16 kernels (w8a16.cu, w8a16_decode.cuh): the int8 ->
// fp16/bf16 conversion of one lane's 16 weight bytes and the tensor-core MMA. All of them
// exist on sm_80.
#ifndef QMM_KERNELS_CUDA_W8A16_PTX_CUH_
#define QMM_KERNELS_CUDA_W8A16_PTX_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace qmm::cuda::w8a16 {

// Two biased int8 of w (bytes 0-1 with kSelector 0x4140, bytes 2-3 with 0x4342) ->
// fp16x2: prmt puts each byte under the fp16 exponent of 1024, so the half is
// 1024 + q + 128; one subtraction of 1152 leaves q, exactly.
template <uint32_t kSelector>
__device__ __forceinline__ uint32_t PairF16(uint32_t w) {
  const uint32_t biased = __byte_perm(w, 0x64646464u, kSelector);
  uint32_t out;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(out) : "r"(biased), "r"(0x64806480u));
  return out;
}

// The same for bf16, whose 8-bit significand cannot hold 128 + 255 exactly: go through
// fp32 2^23 + q + 128 and convert the exact small integers.
template <int kByte>
__device__ __forceinline__ uint32_t PairBf16(uint32_t w) {
  constexpr float kBias = 8388608.0f + 128.0f;
  const float f0 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | kByte)) - kBias;
  const float f1 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | (kByte + 1))) - kBias;
  const __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// One lane's 16 weight bytes -> its A fragments for the chunk's two k16 steps.
template <typename T>
__device__ __forceinline__ void Dequant(const uint4& w, uint32_t (&a)[2][4]) {
  if constexpr (std::is_same_v<T, __half>) {
    a[0][0] = PairF16<0x4140>(w.x);
    a[0][1] = PairF16<0x4140>(w.y);
    a[0][2] = PairF16<0x4342>(w.x);
    a[0][3] = PairF16<0x4342>(w.y);
    a[1][0] = PairF16<0x4140>(w.z);
    a[1][1] = PairF16<0x4140>(w.w);
    a[1][2] = PairF16<0x4342>(w.z);
    a[1][3] = PairF16<0x4342>(w.w);
  } else {
    a[0][0] = PairBf16<0>(w.x);
    a[0][1] = PairBf16<0>(w.y);
    a[0][2] = PairBf16<2>(w.x);
    a[0][3] = PairBf16<2>(w.y);
    a[1][0] = PairBf16<0>(w.z);
    a[1][1] = PairBf16<0>(w.w);
    a[1][2] = PairBf16<2>(w.z);
    a[1][3] = PairBf16<2>(w.w);
  }
}

template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace qmm::cuda::w8a16

#endif  // QMM_KERNELS_CUDA_W8A16_PTX_CUH_
