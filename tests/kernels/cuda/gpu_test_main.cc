// main() of the GPU test binaries: without a usable CUDA device they exit with 77, which
// their ctest SKIP_RETURN_CODE turns into "skipped" (never "passed").
#include <cuda_runtime.h>

#include <iostream>

#include "gtest/gtest.h"

namespace {
constexpr int kSkipReturnCode = 77;
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::cout << "SKIPPED: no CUDA device (" << cudaGetErrorString(err) << ")\n";
    return kSkipReturnCode;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
