// The first kernel of a W2A8 launch: per-row int8 quantization of the activations with
// the row sums the w + 1 trick needs, and the zeroing of the split-K workspace.
#ifndef QMM_KERNELS_CUDA_W2A8_PROLOGUE_CUH_
#define QMM_KERNELS_CUDA_W2A8_PROLOGUE_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dyt_value.cuh"
#include "kernels/cuda/w2a8_ptx.cuh"
#include "kernels/cuda/w2a8_wgmma.cuh"

namespace qmm::cuda::w2a8 {

// 512 threads a row: against 256, 14336 x 4096 at M = 1 took 11.7 us instead of 13.6
// on the H200 (the row's quantization is on the launch's critical path), and 8192 x 8192
// at M = 8 10.0 instead of 11.1; 1024 measured slower than 512.
inline constexpr int kPrologueThreads = 512;

struct PrologueParams {
  const void* x;  // [m, k] fp16, bf16 or fp32
  int64_t m;
  int64_t k;       // a multiple of 128
  int8_t* xq;      // [m, k]; not written where `permuted` is set
  float* x_scale;  // [m]
  int32_t* x_sum;  // [m]
  uint4* zero;     // zero_vectors 16-byte words to clear
  int64_t zero_vectors;
  // The wgmma GEMM's activations (beyond 16 tokens on sm_90a): the int8 rows go straight
  // into the order its B operand reads, for token tiles of permuted_nt
  // (WgmmaFormat::PermutedWordOffset), instead of into xq; a permute kernel reading xq
  // would be one more launch on the critical path.
  uint8_t* permuted;
  int permuted_nt;
  // The matmul launches only as this kernel's CTAs exit, not as they start. Launched as
  // they start, the wgmma GEMM fetches its first weights during this kernel, but its CTAs
  // share the SMs with these: on the H200 that measured from 16% faster to 27% slower by
  // shape and token count (8192 x 8192 at M = 64: 22.7 -> 28.7 us), and it is kept only
  // for one-group tiles of 32 tokens that split K four ways or more (4096 x 4096 at M =
  // 17-32 8.9-9.1 us against 10.6-10.8 at their exit, 14336 x 4096 18.7-19.0 against
  // 22.0-22.1). Where they split K two ways, launching as these CTAs start cost 22-28%
  // (session 52, at 17-32 tokens: 8192 x 8192 18.5 against 14.2-14.4 us, 14336 x 8192
  // 28.9-29.1 against 20.7-21.1, 4096 x 8192 11.6 against 9.8-10.0).
  bool trigger_at_exit;
  // DyT applied to x before it is quantized (GemmArgs::dyt; off while gamma is nullptr).
  float dyt_alpha;
  const float* dyt_gamma;
  const float* dyt_beta;
  // RMSNorm applied to x (GemmArgs::rms_norm; off while norm_weight is nullptr).
  const float* norm_weight;
  float norm_epsilon;
};

// What the prologue applies to x before quantizing it (a compile-time choice: the DyT
// code in the loops made the plain prologue 2-4 us slower on the H200).
enum class XTransform { kNone, kDyT, kRmsNorm };

// The activation element types the prologue reads: fp32 input is quantized as it is, so
// that an fp32 request gets exactly the int8 values the CPU backend computes.
enum class XKind { kF16, kBF16, kF32 };

template <XKind kKind>
inline constexpr int kXPerVector = kKind == XKind::kF32 ? 4 : 8;  // per 16-byte vector

// Element e of a 16-byte vector of activations, as fp32.
template <XKind kKind>
__device__ __forceinline__ float XElement(const uint4& v, int e) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  if constexpr (kKind == XKind::kF32) {
    return __uint_as_float(words[e]);
  } else {
    const uint32_t bits = words[e / 2] >> (16 * (e % 2));
    return kKind == XKind::kBF16 ? __uint_as_float(bits << 16)
                                 : __half2float(__ushort_as_half(bits & 0xffff));
  }
}

// roundf(__fdiv_rn(f, s)) clamped to [-127, 127], QuantizeRowsInt8's rule bit for bit,
// through a multiply by r = 1 / s: f * r is within 2.3e-5 of the correctly rounded
// quotient (|f / s| <= 127.5 and two roundings of relative 2^-24 each), so it rounds the
// same way unless a half-integer lies within 1e-4 of it, where the division decides (as
// for a row of subnormals, whose r is infinite and f * r not finite). Against a division
// per value, on the H200: 8192 x 8192 at M = 8 / 16 9.83 / 11.71 us instead of 10.04 /
// 11.94, 14336 x 4096 11.9 / 13.9 instead of 12.5 / 14.5; M = 1 the same.
__device__ __forceinline__ int QuantizeInt8(float f, float s, float r) {
  float y = f * r;
  if (!(fabsf(fabsf(y - truncf(y)) - 0.5f) >= 1e-4f)) y = __fdiv_rn(f, s);
  return static_cast<int>(fminf(fmaxf(roundf(y), -127.0f), 127.0f));
}

// Blocks [0, m) quantize one row each; blocks from m on zero the workspace. The matmul
// may be launched as soon as every block has started: it touches nothing written here
// before its griddepcontrol.wait. This kernel itself may start while the kernel before it
// (which may write x, or still read the workspace) runs, so it waits before anything else,
// and lets the matmul launch only then (one kernel ahead at most: dependent_launch.h).
// kDyT: p.dyt_gamma is set; kRmsNorm: p.norm_weight is set. kPermuted: p.permuted is set.
//
// An RMSNorm costs the row no pass of its own: the row's scale 1 / sqrt(mean(x^2) + eps)
// is one positive number, so quantizing weight * x * scale gives the int8 values of
// weight * x (the same quotients of the row's maximum) and a row scale `scale` times
// theirs. The prologue sums x^2 beside the maximum of |weight * x| and multiplies the
// scale in at the end.
template <XKind kKind, XTransform kTransform, bool kPermuted>
__global__ void __launch_bounds__(kPrologueThreads) W2A8PrologueKernel(const PrologueParams p) {
  constexpr bool kNorm = kTransform == XTransform::kRmsNorm;
  // kPer values per 16-byte vector; a row of up to kCached vectors per thread is read once.
  constexpr int kPer = kXPerVector<kKind>;
  constexpr int kCached = 4;
  constexpr int64_t kStep = int64_t{kPrologueThreads} * kCached;
  const int64_t vectors = p.k / kPer;
  // An RMSNorm's weight for the vectors a thread holds, in 16-byte loads. It is a layer's
  // parameter, which no kernel writes, so the first step's loads issue before the wait.
  // (Loaded per value as the DyT's parameters are, it cost each launch about 1.2 us on
  // an H100: more than the RMSNorm launch it saves.)
  float norm[kCached][kPer];
  auto load_norm = [&](int64_t base) {
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t v = base + i * kPrologueThreads + threadIdx.x;
#pragma unroll
      for (int j = 0; j < kPer / 4; ++j) {
        const float4 w =
            v < vectors ? __ldg(reinterpret_cast<const float4*>(p.norm_weight) + v * (kPer / 4) + j)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        norm[i][4 * j] = w.x;
        norm[i][4 * j + 1] = w.y;
        norm[i][4 * j + 2] = w.z;
        norm[i][4 * j + 3] = w.w;
      }
    }
  };
  if constexpr (kNorm) {
    if (blockIdx.x < p.m) load_norm(0);
  }
  WaitForPrerequisiteGrid();
  if (!p.trigger_at_exit) AllowDependentLaunch();
  if (blockIdx.x >= p.m) {
    const int64_t stride = static_cast<int64_t>(gridDim.x - p.m) * kPrologueThreads;
    for (int64_t i = (blockIdx.x - p.m) * kPrologueThreads + threadIdx.x; i < p.zero_vectors;
         i += stride) {
      p.zero[i] = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  __shared__ float warp_max[kPrologueThreads / 32];
  __shared__ float warp_squares[kPrologueThreads / 32];
  __shared__ int32_t warp_sum[kPrologueThreads / 32];
  const int64_t row = blockIdx.x;
  const uint4* xr = static_cast<const uint4*>(p.x) + row * (p.k / kPer);
  uint4 cache[kCached];
  auto load = [&](int64_t base, int i) {
    const int64_t v = base + i * kPrologueThreads + threadIdx.x;
    return v < vectors ? __ldg(xr + v) : make_uint4(0, 0, 0, 0);
  };
  // Element e of vector v (in cache[i]) as quantized: x, DyT(x) in fp32 (bit for bit the
  // DyT kernel's fp32 output) or the RMSNorm's weight * x. Beyond the row: 0.
  auto value = [&](int i, int64_t v, int e) {
    const float x = XElement<kKind>(cache[i], e);
    if (kTransform == XTransform::kNone || v >= vectors) return x;
    const int64_t k = v * kPer + e;
    if constexpr (kNorm) return norm[i][e] * x;
    return DyTValue(x, p.dyt_alpha, __ldg(p.dyt_gamma + k),
                    p.dyt_beta == nullptr ? 0.0f : __ldg(p.dyt_beta + k));
  };
  float max_abs = 0.0f;
  float squares = 0.0f;  // of x, for an RMSNorm
  for (int64_t base = 0; base < vectors; base += kStep) {
#pragma unroll
    for (int i = 0; i < kCached; ++i) cache[i] = load(base, i);
    if constexpr (kNorm) {
      if (base > 0) load_norm(base);
    }
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t v = base + i * kPrologueThreads + threadIdx.x;
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        max_abs = fmaxf(max_abs, fabsf(value(i, v, e)));
        if constexpr (kNorm) {
          const float x = XElement<kKind>(cache[i], e);
          squares += x * x;
        }
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
    if constexpr (kNorm) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  }
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = max_abs;
    if constexpr (kNorm) warp_squares[threadIdx.x / 32] = squares;
  }
  __syncthreads();
  max_abs = warp_max[0];
#pragma unroll
  for (int w = 1; w < kPrologueThreads / 32; ++w) max_abs = fmaxf(max_abs, warp_max[w]);
  // IEEE division, as QuantizeRowsInt8, so both give the same scale and the same q.
  const float s = __fdiv_rn(max_abs, 127.0f);
  const float r = __frcp_rn(s);
  int32_t sum = 0;
  int8_t* qr = p.xq + row * p.k;
  constexpr int kChunkWords = wgmma_gemm::kChunkK / 4;  // of int8 activations
  const int64_t chunks = p.k / wgmma_gemm::kChunkK;
  for (int64_t base = 0; base < vectors; base += kStep) {
    // A row longer than one step was not kept; read it again (from L2).
    if (vectors > kStep) {
#pragma unroll
      for (int i = 0; i < kCached; ++i) cache[i] = load(base, i);
      if constexpr (kNorm) load_norm(base);
    }
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int64_t v = base + i * kPrologueThreads + threadIdx.x;
      if (v >= vectors) continue;
      uint32_t packed[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int q = s == 0.0f ? 0 : QuantizeInt8(value(i, v, e), s, r);
        sum += q;
        packed[e / 4] |= (static_cast<uint32_t>(q) & 0xff) << (8 * (e % 4));
      }
      if constexpr (kPermuted) {
        // Words v kPer / 4 .. of the row.
#pragma unroll
        for (int j = 0; j < kPer / 4; ++j) {
          const int64_t word = v * (kPer / 4) + j;
          *reinterpret_cast<uint32_t*>(
              p.permuted +
              WgmmaFormat::PermutedWordOffset(row, p.permuted_nt, chunks, word / kChunkWords,
                                              static_cast<int>(word % kChunkWords))) = packed[j];
        }
      } else if constexpr (kPer == 8) {
        reinterpret_cast<uint2*>(qr)[v] = make_uint2(packed[0], packed[1]);
      } else {
        reinterpret_cast<uint32_t*>(qr)[v] = packed[0];
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kPrologueThreads / 32; ++w) sum += warp_sum[w];
    float scale = 1.0f;
    if constexpr (kNorm) {
      float total = 0.0f;
      for (int w = 0; w < kPrologueThreads / 32; ++w) total += warp_squares[w];
      scale = 1.0f / sqrtf(total / static_cast<float>(p.k) + p.norm_epsilon);
    }
    p.x_scale[row] = s * scale;
    p.x_sum[row] = sum;
  }
}

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_PROLOGUE_CUH_
