// The zero-point term of asymmetric W4A16 weights (contract in w4a16_zero_points.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/dtype_device.cuh"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_zero_points.h"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
// Group sums: a half warp a (row, group) pair, 16 bytes of x a lane at a time.
constexpr int kPairsPerCta = kThreads / 16;
// The term: a CTA covers kTermColumns outputs of kTermRows rows; the kTermSlices threads
// of a column take every kTermSlices-th group, so that a short K still has loads enough
// in flight, and sum their parts through shared memory in a fixed order.
constexpr int kTermColumns = 64;
constexpr int kTermSlices = kThreads / kTermColumns;
constexpr int kTermRows = 16;
constexpr int kGroupTile = 128;

constexpr int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int64_t SumsBytes(const WeightShape& shape, int64_t m) {
  return Align256(m * w4a16::ScaleGroups(shape) * 4);
}

__device__ __forceinline__ float Sum8(uint4 raw, __half) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    sum += f.x + f.y;
  }
  return sum;
}
__device__ __forceinline__ float Sum8(uint4 raw, __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    sum += f.x + f.y;
  }
  return sum;
}

// sums[r][g] = the sum of x[r][k] over group g (group_len consecutive k, a multiple of 128).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GroupSumsKernel(const T* __restrict__ x, int64_t pairs, int64_t groups, int64_t group_len,
                    float* __restrict__ sums) {
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  const int lane = threadIdx.x % 16;
  const int64_t pair = blockIdx.x * int64_t{kPairsPerCta} + threadIdx.x / 16;
  if (pair >= pairs) return;  // a whole half warp, so the shuffles below stay within it
  const int64_t row = pair / groups;
  const int64_t group = pair % groups;
  const T* src = x + row * groups * group_len + group * group_len;
  float sum = 0.0f;
  for (int64_t v = lane; v < group_len / 8; v += 16) {
    sum += Sum8(*reinterpret_cast<const uint4*>(src + 8 * v), T{});
  }
  const unsigned half_mask = 0xffffu << (threadIdx.x & 16);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(half_mask, sum, offset);
  }
  if (lane == 0) sums[pair] = sum;
}

// out[r][n] = residual[r][n] + sum_g sums[r][g] * terms[g][n].
__global__ void __launch_bounds__(kThreads)
    TermKernel(const float* __restrict__ sums, const float* __restrict__ terms, int64_t m,
               int64_t n, int64_t groups, const void* residual, DType residual_dtype,
               float* __restrict__ out) {
  __shared__ float tile[kTermRows][kGroupTile];
  __shared__ float part[kTermSlices][kTermRows][kTermColumns];
  const int column = threadIdx.x % kTermColumns;
  const int slice = threadIdx.x / kTermColumns;
  const int64_t col = blockIdx.x * int64_t{kTermColumns} + column;
  const int64_t row0 = blockIdx.y * int64_t{kTermRows};
  const int rows = static_cast<int>(std::min<int64_t>(kTermRows, m - row0));
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();

  float acc[kTermRows] = {};
  for (int64_t g0 = 0; g0 < groups; g0 += kGroupTile) {
    const int span = static_cast<int>(std::min<int64_t>(kGroupTile, groups - g0));
    for (int i = threadIdx.x; i < kTermRows * span; i += kThreads) {
      const int r = i / span;
      tile[r][i % span] = r < rows ? sums[(row0 + r) * groups + g0 + i % span] : 0.0f;
    }
    __syncthreads();
    if (col < n) {
#pragma unroll 8
      for (int g = slice; g < span; g += kTermSlices) {
        const float t = terms[(g0 + g) * n + col];
#pragma unroll
        for (int r = 0; r < kTermRows; ++r) acc[r] += tile[r][g] * t;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kTermRows; ++r) part[slice][r][column] = acc[r];
  __syncthreads();
  if (slice != 0 || col >= n) return;
  for (int r = 0; r < rows; ++r) {
    float v = part[0][r][column];
#pragma unroll
    for (int s = 1; s < kTermSlices; ++s) v += part[s][r][column];
    const int64_t index = (row0 + r) * n + col;
    if (residual != nullptr) v += LoadAs(residual_dtype, residual, index);
    out[index] = v;
  }
}

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, cudaStream_t stream, Args... args) {
  DeviceInfo device;
  if (cudaError_t err = CurrentDeviceInfo(&device); err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute pdl[1];
  config.attrs = pdl;
  config.numAttrs = AppendDependentLaunch(device.cc_major, pdl, 0);
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace

size_t ZeroPointTermBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>(SumsBytes(shape, m) + m * shape.n * 4);
}

float* ZeroPointTermOf(const WeightShape& shape, int64_t m, void* scratch) {
  return reinterpret_cast<float*>(static_cast<char*>(scratch) + SumsBytes(shape, m));
}

cudaError_t LaunchZeroPointTerm(const GemmArgs& args, void* scratch) {
  const WeightShape& shape = args.shape;
  const int64_t groups = w4a16::ScaleGroups(shape);
  const int64_t pairs = args.m * groups;
  const int64_t row_tiles = (args.m + kTermRows - 1) / kTermRows;
  if (!shape.zero_points || scratch == nullptr || row_tiles > 65535) return cudaErrorInvalidValue;
  auto* sums = static_cast<float*>(scratch);
  const auto* terms = reinterpret_cast<const float*>(static_cast<const char*>(args.weight) +
                                                     w4a16::ZeroTermsOffset(shape));
  const dim3 sum_grid(static_cast<unsigned>((pairs + kPairsPerCta - 1) / kPairsPerCta));
  const cudaError_t err =
      args.x_dtype == DType::kBF16
          ? Launch(GroupSumsKernel<__nv_bfloat16>, sum_grid, args.stream,
                   static_cast<const __nv_bfloat16*>(args.x), pairs, groups, shape.k / groups, sums)
          : Launch(GroupSumsKernel<__half>, sum_grid, args.stream,
                   static_cast<const __half*>(args.x), pairs, groups, shape.k / groups, sums);
  if (err != cudaSuccess) return err;
  const dim3 term_grid(static_cast<unsigned>((shape.n + kTermColumns - 1) / kTermColumns),
                       static_cast<unsigned>(row_tiles));
  return Launch(TermKernel, term_grid, args.stream, static_cast<const float*>(sums), terms, args.m,
                shape.n, groups, args.residual, args.residual_dtype,
                ZeroPointTermOf(shape, args.m, scratch));
}

}  // namespace qmm::cuda
