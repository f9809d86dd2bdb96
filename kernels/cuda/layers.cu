#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/activation_device.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/dyt_value.cuh"
#include "kernels/cuda/layers.h"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride kernels: enough blocks to fill an H200 several times over, no more.
constexpr int64_t kMaxBlocks = 4096;

bool IsDType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

int Blocks(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks));
}

// Every kernel here is a dependent launch (dependent_launch.h) that simply waits: its
// launch overlaps the previous kernel's end, and the next kernel's launch its own.
__device__ __forceinline__ void StartDependent() {
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
}

// Launches `kernel` on `blocks` blocks of kThreads, with the dependent-launch attribute
// where the device has it.
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), int blocks, cudaStream_t stream, Args... args) {
  return LaunchDependent(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), stream,
                         args...);
}

__global__ void __launch_bounds__(kThreads)
    EmbeddingKernel(DType table_dtype, const void* __restrict__ table, int64_t vocab, int64_t dim,
                    const int32_t* __restrict__ ids, int64_t count, DType y_dtype,
                    void* __restrict__ y) {
  StartDependent();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    const int64_t row = i / dim;
    const int64_t id = ids[row];
    const float v = id >= 0 && id < vocab ? LoadAs(table_dtype, table, id * dim + i % dim)
                                          : __int_as_float(0x7fc00000);
    StoreAs(y_dtype, y, i, v);
  }
}

__global__ void __launch_bounds__(kThreads)
    DyTKernel(DType x_dtype, const void* x, int64_t f, int64_t count, float alpha,
              const float* __restrict__ gamma, const float* __restrict__ beta, DType y_dtype,
              void* y) {
  StartDependent();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    const int64_t j = i % f;
    StoreAs(y_dtype, y, i,
            DyTValue(LoadAs(x_dtype, x, i), alpha, gamma[j], beta == nullptr ? 0.0f : beta[j]));
  }
}

// RMSNorm runs one CTA of kNormThreads a row (rows beyond the grid in turn). A thread
// keeps up to kNormHeld values of its row in registers, loaded at once: their loads are
// independent, so a row of up to kNormThreads * kNormHeld values (8192) costs one memory
// round trip. A loop of loads each feeding the next add, as this kernel was, took 5.1 us
// for a row of 4096 on an H100. Longer rows read their remainder twice.
constexpr int kNormThreads = 512;
constexpr int kNormHeld = 16;

// The weight is a layer's parameter, which no kernel of the stream writes, so it loads
// before the wait for the previous kernel. The squares' warp sums meet in shared memory
// and every thread adds them in one order, so all agree on the scale. The writes follow
// that barrier, so y may be x.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const T* x, int64_t m, int64_t f, const float* __restrict__ weight, float epsilon,
                  DType y_dtype, void* y) {
  float w[kNormHeld];
#pragma unroll
  for (int k = 0; k < kNormHeld; ++k) {
    const int64_t j = threadIdx.x + k * kNormThreads;
    w[k] = j < f ? weight[j] : 0.0f;
  }
  StartDependent();
  __shared__ float warp_sums[kNormThreads / 32];
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* xr = x + row * f;
    float v[kNormHeld];
#pragma unroll
    for (int k = 0; k < kNormHeld; ++k) {
      const int64_t j = threadIdx.x + k * kNormThreads;
      v[k] = j < f ? ToF32(xr[j]) : 0.0f;
    }
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < kNormHeld; ++k) squares += v[k] * v[k];
    for (int64_t j = threadIdx.x + kNormHeld * kNormThreads; j < f; j += kNormThreads) {
      const float u = ToF32(xr[j]);
      squares += u * u;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    }
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = squares;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kNormThreads / 32; ++i) total += warp_sums[i];
    const float scale = 1.0f / sqrtf(total / static_cast<float>(f) + epsilon);
    const int64_t base = row * f;
#pragma unroll
    for (int k = 0; k < kNormHeld; ++k) {
      const int64_t j = threadIdx.x + k * kNormThreads;
      if (j < f) StoreAs(y_dtype, y, base + j, w[k] * (v[k] * scale));
    }
    for (int64_t j = threadIdx.x + kNormHeld * kNormThreads; j < f; j += kNormThreads) {
      StoreAs(y_dtype, y, base + j, weight[j] * (ToF32(xr[j]) * scale));
    }
    __syncthreads();  // warp_sums is the next row's
  }
}

template <typename T>
cudaError_t LaunchRmsNormOf(const void* x, int64_t m, int64_t f, const float* weight, float epsilon,
                            DType y_dtype, void* y, cudaStream_t stream) {
  return LaunchDependent(RmsNormKernel<T>, dim3(static_cast<unsigned>(std::min(m, kMaxBlocks))),
                         dim3(kNormThreads), stream, static_cast<const T*>(x), m, f, weight,
                         epsilon, y_dtype, y);
}

// The epilogue's operands as runs of kVec values: 16-byte loads and stores (LoadAs8,
// StoreAs8) where every operand allows them (EpilogueVectorizes). With one value a thread,
// the SwiGLU product of 64 rows of 14336 (fp32 gate and up, fp16 out) took 4.8 us on an
// H100, 1.9 TB/s; in runs of 8, 2.6 us on the H200 (3.5 TB/s; session 76).
constexpr int kVec = 8;

// A run of kVec values stays in one row (n % kVec == 0), so its bias is kVec consecutive
// floats.
__global__ void __launch_bounds__(kThreads) EpilogueVecKernel(const EpilogueArgs a, int64_t runs) {
  StartDependent();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < runs;
       r += stride) {
    const int64_t i = r * kVec;
    float v[kVec], other[kVec];
    LoadAs8(a.x_dtype, a.x, i, v);
    if (a.bias != nullptr) {
      LoadAs8(DType::kF32, a.bias, i % a.n, other);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] += other[k];
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = ApplyActivation(a.act, v[k]);
    if (a.up != nullptr) {
      LoadAs8(a.up_dtype, a.up, i, other);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] *= other[k];
    }
    if (a.skip != nullptr) {
      LoadAs8(a.skip_dtype, a.skip, i, other);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] += other[k];
    }
    StoreAs8(a.y_dtype, a.y, i, v);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether every run of kVec values lies in one row and every operand's runs start on 16
// bytes.
bool EpilogueVectorizes(const EpilogueArgs& a) {
  return a.n % kVec == 0 && Aligned16(a.x) && Aligned16(a.y) && Aligned16(a.bias) &&
         Aligned16(a.up) && Aligned16(a.skip);
}

__global__ void __launch_bounds__(kThreads) EpilogueKernel(const EpilogueArgs a, int64_t count) {
  StartDependent();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    float v = LoadAs(a.x_dtype, a.x, i);
    if (a.bias != nullptr) v += a.bias[i % a.n];
    v = ApplyActivation(a.act, v);
    if (a.up != nullptr) v *= LoadAs(a.up_dtype, a.up, i);
    if (a.skip != nullptr) v += LoadAs(a.skip_dtype, a.skip, i);
    StoreAs(a.y_dtype, a.y, i, v);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(DType table_dtype, const void* table, int64_t vocab, int64_t dim,
                            const int32_t* ids, int64_t m, DType y_dtype, void* y,
                            cudaStream_t stream) {
  if ((table_dtype != DType::kF16 && table_dtype != DType::kBF16) || !IsDType(y_dtype) ||
      vocab < 1 || dim < 1 || m < 0) {
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  const int64_t count = m * dim;
  return Launch(EmbeddingKernel, Blocks(count), stream, table_dtype, table, vocab, dim, ids, count,
                y_dtype, y);
}

cudaError_t LaunchDyT(DType x_dtype, const void* x, int64_t m, int64_t f, float alpha,
                      const float* gamma, const float* beta, DType y_dtype, void* y,
                      cudaStream_t stream) {
  if (!IsDType(x_dtype) || !IsDType(y_dtype) || f < 1 || m < 0 || gamma == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  const int64_t count = m * f;
  return Launch(DyTKernel, Blocks(count), stream, x_dtype, x, f, count, alpha, gamma, beta, y_dtype,
                y);
}

cudaError_t LaunchRmsNorm(DType x_dtype, const void* x, int64_t m, int64_t f, const float* weight,
                          float epsilon, DType y_dtype, void* y, cudaStream_t stream) {
  if (!IsDType(x_dtype) || !IsDType(y_dtype) || f < 1 || m < 0 || weight == nullptr ||
      !(epsilon > 0.0f)) {
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  switch (x_dtype) {
    case DType::kF32:
      return LaunchRmsNormOf<float>(x, m, f, weight, epsilon, y_dtype, y, stream);
    case DType::kF16:
      return LaunchRmsNormOf<__half>(x, m, f, weight, epsilon, y_dtype, y, stream);
    default:
      return LaunchRmsNormOf<__nv_bfloat16>(x, m, f, weight, epsilon, y_dtype, y, stream);
  }
}

cudaError_t LaunchEpilogue(const EpilogueArgs& args, cudaStream_t stream) {
  if (!IsDType(args.x_dtype) || !IsDType(args.y_dtype) || !IsDType(args.up_dtype) ||
      !IsDType(args.skip_dtype) || args.m < 0 || args.n < 1 || args.x == nullptr ||
      args.y == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (args.m == 0) return cudaSuccess;
  const int64_t count = args.m * args.n;
  if (EpilogueVectorizes(args)) {
    return Launch(EpilogueVecKernel, Blocks(count / kVec), stream, args, count / kVec);
  }
  return Launch(EpilogueKernel, Blocks(count), stream, args, count);
}

}  // namespace qmm::cuda
