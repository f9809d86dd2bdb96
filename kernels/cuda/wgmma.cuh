// sm_90a warpgroup matrix multiply (wgmma) primitives: the A operand from registers (so a
// kernel can dequantize weights straight into it) and B from shared memory through a
// matrix descriptor, fp32 accumulators. Only the sm_90a pass defines QMM_WGMMA; kernels
// built on these compile to an empty body elsewhere, and their launchers check the
// binary version before choosing them (WgmmaAvailable).
#ifndef QMM_KERNELS_CUDA_WGMMA_CUH_
#define QMM_KERNELS_CUDA_WGMMA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QMM_WGMMA 1
#endif

namespace qmm::cuda::wgmma {

// True when `kernel` runs sm_90a machine code on the current device (not an sm_80 build
// of it, whose wgmma body is empty).
template <typename Kernel>
cudaError_t Available(Kernel kernel, bool* available) {
  cudaFuncAttributes attrs = {};
  const cudaError_t err = cudaFuncGetAttributes(&attrs, kernel);
  *available = err == cudaSuccess && attrs.binaryVersion >= 90;
  return err;
}

#ifdef QMM_WGMMA

// Descriptor of a K-major tile in the 128-byte swizzle: atoms of 8 rows (N or M) x 128
// bytes of K, 1024-byte aligned, in which 16-byte chunk j of row r sits at chunk j ^ r
// (so the tensor cores read 8 rows' chunks from 8 different banks); `atom_stride` bytes
// from one 8-row atom to the next. `smem` may point into an atom's first row to select
// the k offset of one step.
__device__ inline uint64_t SmemDescSw128(const void* smem, uint32_t atom_stride) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t{(addr & 0x3ffff) >> 4} | uint64_t{1} << 16 |
         uint64_t{(atom_stride >> 4) & 0x3fff} << 32 | uint64_t{1} << 62;
}

// `desc` (SmemDescSw128) moved on by `units` 16-byte units: only the start address field
// (the low 14 bits, address / 16) changes, and no shared-memory address reaches 2^18, so
// the low word's add never carries.
__device__ inline uint64_t DescAdvance(uint64_t desc, uint32_t units) {
  return (desc & 0xffffffff00000000ull) | (static_cast<uint32_t>(desc) + units);
}

// Orders this thread's earlier register writes before the wgmma that reads them.
__device__ inline void Fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void Commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ inline void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Marks every accumulator as written here: the wgmmas write them asynchronously, which
// the compiler does not see, so without this it may read them (an int32 -> float
// conversion of W2A8's sums was) before the wait_group that completes them.
template <int J>
__device__ inline void FenceOperands(float (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
    asm volatile("" : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])::"memory");
  }
}
template <int J>
__device__ inline void FenceOperands(int (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
    asm volatile("" : "+r"(d[j][0]), "+r"(d[j][1]), "+r"(d[j][2]), "+r"(d[j][3])::"memory");
  }
}
// Makes this thread's ordinary shared-memory stores visible to the tensor cores (the
// async proxy); a barrier must follow before another thread's wgmma reads them.
__device__ inline void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// d[64 x 8J] = A[64 x 16] * B[16 x 8J] (+ d when `accumulate`) for J n8 tiles (J = 4, 8 or 16): A
// as the four m16n8k16-style registers of each warp's 16 rows, B by descriptor; d[j] is the j-th n8
// tile's accumulator quad (rows g, g + 8; columns 2t, 2t + 1 of the tile). J = 16 too.
template <int J, bool kBf16>
__device__ inline void MmaRs(float (&d)[J][4], const uint32_t (&a)[4], uint64_t b, bool accumulate);

#define QMM_WGMMA_ACC4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])

#define QMM_WGMMA_N32(TYPE)                                                        \
  asm volatile(                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                 \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE                  \
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15},"                  \
      " {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}"                                    \
      : QMM_WGMMA_ACC4(0), QMM_WGMMA_ACC4(1), QMM_WGMMA_ACC4(2), QMM_WGMMA_ACC4(3) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}))

#define QMM_WGMMA_N64(TYPE)                                                         \
  asm volatile(                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                   \
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                    \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"           \
      " {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"                                     \
      : QMM_WGMMA_ACC4(0), QMM_WGMMA_ACC4(1), QMM_WGMMA_ACC4(2), QMM_WGMMA_ACC4(3), \
        QMM_WGMMA_ACC4(4), QMM_WGMMA_ACC4(5), QMM_WGMMA_ACC4(6), QMM_WGMMA_ACC4(7)  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}))

#define QMM_WGMMA_N128(TYPE)                                                           \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                     \
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"               \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"               \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"              \
      " {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}"                                        \
      : QMM_WGMMA_ACC4(0), QMM_WGMMA_ACC4(1), QMM_WGMMA_ACC4(2), QMM_WGMMA_ACC4(3),    \
        QMM_WGMMA_ACC4(4), QMM_WGMMA_ACC4(5), QMM_WGMMA_ACC4(6), QMM_WGMMA_ACC4(7),    \
        QMM_WGMMA_ACC4(8), QMM_WGMMA_ACC4(9), QMM_WGMMA_ACC4(10), QMM_WGMMA_ACC4(11),  \
        QMM_WGMMA_ACC4(12), QMM_WGMMA_ACC4(13), QMM_WGMMA_ACC4(14), QMM_WGMMA_ACC4(15) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}))

template <>
__device__ inline void MmaRs<4, false>(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate) {
  QMM_WGMMA_N32("f16");
}
template <>
__device__ inline void MmaRs<4, true>(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b,
                                      bool accumulate) {
  QMM_WGMMA_N32("bf16");
}
template <>
__device__ inline void MmaRs<8, false>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate) {
  QMM_WGMMA_N64("f16");
}
template <>
__device__ inline void MmaRs<8, true>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                      bool accumulate) {
  QMM_WGMMA_N64("bf16");
}

template <>
__device__ inline void MmaRs<16, false>(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b,
                                        bool accumulate) {
  QMM_WGMMA_N128("f16");
}
template <>
__device__ inline void MmaRs<16, true>(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate) {
  QMM_WGMMA_N128("bf16");
}

// d[64 x 8J] (int32) = A[64 x 32] * B[32 x 8J] (+ d when `accumulate`), A unsigned 8-bit
// (the m16n8k32 registers of each warp's 16 rows), B signed 8-bit by descriptor.
template <int J>
__device__ inline void MmaRsU8S8(int (&d)[J][4], const uint32_t (&a)[4], uint64_t b,
                                 bool accumulate);

#define QMM_WGMMA_IACC4(j) "+r"(d[j][0]), "+r"(d[j][1]), "+r"(d[j][2]), "+r"(d[j][3])

template <>
__device__ inline void MmaRsU8S8<4>(int (&d)[4][4], const uint32_t (&a)[4], uint64_t b,
                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8"
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15},"
      " {%16,%17,%18,%19}, %20, p;\n}"
      : QMM_WGMMA_IACC4(0), QMM_WGMMA_IACC4(1), QMM_WGMMA_IACC4(2), QMM_WGMMA_IACC4(3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}));
}
template <>
__device__ inline void MmaRsU8S8<8>(int (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8"
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
      " {%32,%33,%34,%35}, %36, p;\n}"
      : QMM_WGMMA_IACC4(0), QMM_WGMMA_IACC4(1), QMM_WGMMA_IACC4(2), QMM_WGMMA_IACC4(3),
        QMM_WGMMA_IACC4(4), QMM_WGMMA_IACC4(5), QMM_WGMMA_IACC4(6), QMM_WGMMA_IACC4(7)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}));
}
template <>
__device__ inline void MmaRsU8S8<16>(int (&d)[16][4], const uint32_t (&a)[4], uint64_t b,
                                     bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8"
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
      " {%64,%65,%66,%67}, %68, p;\n}"
      : QMM_WGMMA_IACC4(0), QMM_WGMMA_IACC4(1), QMM_WGMMA_IACC4(2), QMM_WGMMA_IACC4(3),
        QMM_WGMMA_IACC4(4), QMM_WGMMA_IACC4(5), QMM_WGMMA_IACC4(6), QMM_WGMMA_IACC4(7),
        QMM_WGMMA_IACC4(8), QMM_WGMMA_IACC4(9), QMM_WGMMA_IACC4(10), QMM_WGMMA_IACC4(11),
        QMM_WGMMA_IACC4(12), QMM_WGMMA_IACC4(13), QMM_WGMMA_IACC4(14), QMM_WGMMA_IACC4(15)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int{accumulate}));
}

#undef QMM_WGMMA_IACC4
#undef QMM_WGMMA_N128
#undef QMM_WGMMA_N64
#undef QMM_WGMMA_N32
#undef QMM_WGMMA_ACC4

#endif  // QMM_WGMMA

}  // namespace qmm::cuda::wgmma

#endif  // QMM_KERNELS_CUDA_WGMMA_CUH_
