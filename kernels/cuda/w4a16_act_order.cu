// The gather of a W4A16 weight's inputs into its activation order (contract in
// w4a16_act_order.h).
#include <cstring>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/w4a16_act_order.h"
#include "kernels/cuda/w4a16_layout.h"

namespace qmm::cuda {
namespace {

constexpr int kThreads = 256;
// A thread writes eight consecutive values of a row (one 16-byte store); fp16 and bf16
// move alike, as 2-byte words.
constexpr int kVector = 8;

__global__ void __launch_bounds__(kThreads)
    GatherKernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ order,
                 uint16_t* __restrict__ out, int64_t k, int64_t vectors) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int4 features[2] = {};
  const int64_t j = v * kVector % k;
  if (v < vectors) {
    features[0] = *reinterpret_cast<const int4*>(order + j);
    features[1] = *reinterpret_cast<const int4*>(order + j + 4);
  }
  WaitForPrerequisiteGrid();
  AllowDependentLaunch();
  if (v >= vectors) return;
  const uint16_t* row = x + v * kVector / k * k;
  const int32_t f[kVector] = {features[0].x, features[0].y, features[0].z, features[0].w,
                              features[1].x, features[1].y, features[1].z, features[1].w};
  uint32_t pairs[kVector / 2];
#pragma unroll
  for (int i = 0; i < kVector / 2; ++i) {
    pairs[i] = static_cast<uint32_t>(row[f[2 * i]]) | static_cast<uint32_t>(row[f[2 * i + 1]])
                                                          << 16;
  }
  *reinterpret_cast<uint4*>(out + v * kVector) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

}  // namespace

size_t ActOrderScratchBytes(const WeightShape& shape, int64_t m) {
  return static_cast<size_t>((m * shape.k * 2 + 255) / 256 * 256);
}

cudaError_t LaunchGatherInputs(const GemmArgs& args, void* out) {
  const WeightShape& shape = args.shape;
  if (!shape.act_order || out == nullptr || shape.k % kVector != 0) return cudaErrorInvalidValue;
  const int64_t vectors = args.m * shape.k / kVector;
  const int64_t blocks = (vectors + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const auto* order = reinterpret_cast<const int32_t*>(static_cast<const char*>(args.weight) +
                                                       w4a16::OrderOffset(shape));
  return LaunchDependent(GatherKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                         args.stream, static_cast<const uint16_t*>(args.x), order,
                         static_cast<uint16_t*>(out), shape.k, vectors);
}

}  // namespace qmm::cuda
