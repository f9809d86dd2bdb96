// The registry: one row per scheme that has a CUDA kernel.
#include "kernels/cuda/kernels.h"

#include "kernels/cuda/dense.h"
#include "kernels/cuda/w2a8.h"
#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w8a16.h"

namespace qmm::cuda {
namespace {

struct Entry {
  Scheme scheme;
  KernelOps ops;
};

constexpr Entry kEntries[] = {
    // scheme, {repack, workspace_bytes, launch, launch_glu, glu_max_m, takes_residual,
    //          takes_dyt, takes_rms_norm}
    {Scheme::kFp16,
     {RepackDense, DenseWorkspaceBytes, LaunchDenseFp16, nullptr, 0, false, false, false}},
    {Scheme::kBf16,
     {RepackDense, DenseWorkspaceBytes, LaunchDenseBf16, nullptr, 0, false, false, false}},
    {Scheme::kW8A16,
     {RepackW8A16, W8A16WorkspaceBytes, LaunchW8A16, LaunchW8A16Glu, kW8A16GluMaxM, true, false,
      false}},
    {Scheme::kW4A16,
     {RepackW4A16, W4A16WorkspaceBytes, LaunchW4A16, LaunchW4A16Glu, kW4A16GluMaxM, true, false,
      false}},
    {Scheme::kW2A8,
     {RepackW2A8, W2A8WorkspaceBytes, LaunchW2A8, LaunchW2A8Glu, kW2A8GluMaxM, true, true, true}},
};

}  // namespace

const KernelOps* FindKernel(Scheme scheme) {
  for (const Entry& entry : kEntries) {
    if (entry.scheme == scheme) return &entry.ops;
  }
  return nullptr;
}

}  // namespace qmm::cuda
