// The zero-point term of asymmetric W4A16 weights (contract in w4a16_zero_points.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_zero_points.h"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
// Group sums of 128 k: a half warp a group, 16 bytes of x a lane.
constexpr int kGroupVectors = w4a16::kChunkK / 8;
constexpr int kGroupsPerPass = kThreads / kGroupVectors;
// The term: a CTA covers kColumns outputs of kRows rows; the kSlices threads of a column
// take every kSlices-th group, so that a short K still has loads enough in flight, and
// sum their parts through shared memory in a fixed order. Group sums are held kGroupTile
// groups at a time.
constexpr int kRows = 16;
constexpr int kColumns = 64;
constexpr int kSlices = kThreads / kColumns;
constexpr int kGroupTile = 128;

int64_t TermBytes(const WeightShape& shape, int64_t m) { return w4a16::Align256(m * shape.n * 4); }

// The sum of the eight values of type T (__half or __nv_bfloat16) in `raw`, in fp32.
template <typename T>
__device__ __forceinline__ float Sum8(uint4 raw) {
  const T* v = reinterpret_cast<const T*>(&raw);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += ToF32(v[i]);
  return sum;
}

// A lane's part of the sum of `len` values at `src` (a multiple of 128) that the 16 lanes
// of a half warp share, 16 bytes a lane at a time; HalfWarpSum adds the parts up.
template <typename T>
__device__ __forceinline__ float LanePart(const T* src, int64_t len) {
  float sum = 0.0f;
  for (int64_t v = 8 * (threadIdx.x % 16); v < len; v += w4a16::kChunkK) {
    sum += Sum8<T>(*reinterpret_cast<const uint4*>(src + v));
  }
  return sum;
}

// The sum of `part` over the 16 lanes of this half warp, all of which must call it.
__device__ __forceinline__ float HalfWarpSum(float part) {
  const unsigned half_mask = 0xffffu << (threadIdx.x & 16);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) part += __shfl_xor_sync(half_mask, part, offset);
  return part;
}

// sums[r][g] = the sum of x[r][k] over group g (group_len consecutive k, a multiple of 128).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GroupSumsKernel(const T* __restrict__ x, int64_t groups, int64_t group_len, int64_t pairs,
                    float* __restrict__ sums) {
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  const int64_t pair = blockIdx.x * int64_t{kGroupsPerPass} + threadIdx.x / kGroupVectors;
  if (pair >= pairs) return;  // a whole half warp, so the shuffles stay within it
  // Row pair / groups, group pair % groups.
  const float sum = HalfWarpSum(LanePart(x + pair * group_len, group_len));
  if (threadIdx.x % 16 == 0) sums[pair] = sum;
}

struct TermParams {
  const float* sums;     // [m, groups]
  const float* terms;    // [groups, n]
  const void* residual;  // [m, n] of residual_dtype, or nullptr
  DType residual_dtype;
  float* out;  // [m, n]
  int64_t m, n, groups;
};

// out = residual + term for kRows rows and kColumns columns.
__global__ void __launch_bounds__(kThreads) TermKernel(TermParams p) {
  __shared__ __align__(16) float tile[kGroupTile][kRows];
  __shared__ float part[kSlices][kRows][kColumns];
  const int column = threadIdx.x % kColumns;
  const int slice = threadIdx.x / kColumns;
  const int64_t col = blockIdx.x * int64_t{kColumns} + column;
  const int64_t row0 = blockIdx.y * int64_t{kRows};
  const int rows = static_cast<int>(std::min<int64_t>(kRows, p.m - row0));
  // The terms are weights, which no kernel writes: on their way to L2 during the wait.
  for (int64_t g = slice; g < std::min<int64_t>(p.groups, kGroupTile) && col < p.n; g += kSlices) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.terms + g * p.n + col));
  }
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();

  float acc[kRows] = {};
  for (int64_t g0 = 0; g0 < p.groups; g0 += kGroupTile) {
    const int span = static_cast<int>(std::min<int64_t>(kGroupTile, p.groups - g0));
    for (int i = threadIdx.x; i < kRows * span; i += kThreads) {
      const int r = i / span;
      tile[i % span][r] = r < rows ? p.sums[(row0 + r) * p.groups + g0 + i % span] : 0.0f;
    }
    __syncthreads();
    if (col < p.n) {
#pragma unroll 4
      for (int g = slice; g < span; g += kSlices) {
        const float t = p.terms[(g0 + g) * p.n + col];
        const float4* sums = reinterpret_cast<const float4*>(tile[g]);
#pragma unroll
        for (int q = 0; q < kRows / 4; ++q) {
          const float4 s = sums[q];
          acc[4 * q] += s.x * t;
          acc[4 * q + 1] += s.y * t;
          acc[4 * q + 2] += s.z * t;
          acc[4 * q + 3] += s.w * t;
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) part[slice][r][column] = acc[r];
  __syncthreads();
  if (slice != 0 || col >= p.n) return;
  for (int r = 0; r < rows; ++r) {
    float v = part[0][r][column];
#pragma unroll
    for (int s = 1; s < kSlices; ++s) v += part[s][r][column];
    const int64_t index = (row0 + r) * p.n + col;
    if (p.residual != nullptr) v += LoadAs(p.residual_dtype, p.residual, index);
    p.out[index] = v;
  }
}

template <typename T>
cudaError_t LaunchGroupSums(const GemmArgs& args, int64_t groups, float* sums) {
  const int64_t pairs = args.m * groups;
  return LaunchDependent(GroupSumsKernel<T>,
                         dim3(static_cast<unsigned>((pairs + kGroupsPerPass - 1) / kGroupsPerPass)),
                         dim3(kThreads), args.stream, static_cast<const T*>(args.x), groups,
                         args.shape.k / groups, pairs, sums);
}

}  // namespace

size_t ZeroPointScratchBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>(TermBytes(shape, m) + m * w4a16::ScaleGroups(shape) * 4);
}

float* ZeroPointTermOf(void* scratch) { return static_cast<float*>(scratch); }

cudaError_t LaunchZeroPointTerm(const GemmArgs& args, void* scratch) {
  const WeightShape& shape = args.shape;
  const int64_t row_tiles = (args.m + kRows - 1) / kRows;
  if (!shape.zero_points || scratch == nullptr || row_tiles > 65535) return cudaErrorInvalidValue;
  const int64_t groups = w4a16::ScaleGroups(shape);
  auto* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + TermBytes(shape, args.m));
  const cudaError_t err = args.x_dtype == DType::kBF16
                              ? LaunchGroupSums<__nv_bfloat16>(args, groups, sums)
                              : LaunchGroupSums<__half>(args, groups, sums);
  if (err != cudaSuccess) return err;
  TermParams p;
  p.sums = sums;
  p.terms = reinterpret_cast<const float*>(static_cast<const char*>(args.weight) +
                                           w4a16::ZeroTermsOffset(shape));
  p.residual = args.residual;
  p.residual_dtype = args.residual_dtype;
  p.out = ZeroPointTermOf(scratch);
  p.m = args.m;
  p.n = shape.n;
  p.groups = groups;
  const unsigned columns = static_cast<unsigned>((shape.n + kColumns - 1) / kColumns);
  return LaunchDependent(TermKernel, dim3(columns, static_cast<unsigned>(row_tiles)),
                         dim3(kThreads), args.stream, p);
}

}  // namespace qmm::cuda
