#include "kernels/cuda/dependent_launch.h"

#include <atomic>

namespace qmm::cuda {
namespace {

std::atomic<bool> g_enabled{true};

}  // namespace

void EnableDependentLaunch(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

bool DependentLaunchEnabled() { return g_enabled.load(std::memory_order_relaxed); }

int AppendDependentLaunch(int cc_major, cudaLaunchAttribute* attrs, int count) {
  if (cc_major < 9 || !DependentLaunchEnabled()) return count;
  attrs[count] = {};
  attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[count].val.programmaticStreamSerializationAllowed = 1;
  return count + 1;
}

}  // namespace qmm::cuda
