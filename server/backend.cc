#include "server/backend.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "server/cpu_backend.h"
#ifdef QMM_HAVE_CUDA
#include "server/cuda_backend.h"
#endif

namespace qmm {

absl::StatusOr<std::unique_ptr<BackendModel>> Backend::LoadModel(std::span<const ModelLayer>) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend does not run models"));
}

absl::StatusOr<HostStaging> Backend::StageHost(int, size_t, size_t) { return HostStaging{}; }

absl::StatusOr<std::unique_ptr<HostRegistration>> Backend::RegisterHost(void*, size_t) {
  return nullptr;
}

absl::StatusOr<int64_t> Backend::MatMulBlocks(int, const BlocksMatMulCall&) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", std::string(name()), " backend does not run MatMul on registered host memory"));
}

absl::StatusOr<int64_t> Backend::Forward(int, const ForwardCall&) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend does not run models"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers = ", options.num_workers, " must be at least 1"));
  }
  if (options.cpu_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads = ", options.cpu_threads, " must not be negative"));
  }
  switch (options.kind) {
    case BackendOptions::Kind::kCpu:
      return CreateCpuBackend(options);
    case BackendOptions::Kind::kCuda:
#ifdef QMM_HAVE_CUDA
      return CreateCudaBackend(options);
#else
      return absl::FailedPreconditionError(
          "backend cuda was requested but this qmm-server was built without CUDA "
          "(configure with -DQMM_CUDA=ON)");
#endif
    case BackendOptions::Kind::kAuto:
#ifdef QMM_HAVE_CUDA
      if (absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateCudaBackend(options); cuda.ok()) {
        return cuda;
      } else {
        // Built for a GPU but running without one: say why, since it costs performance.
        std::cerr << "qmm-server: CUDA backend unavailable (" << cuda.status().message()
                  << "); using the CPU backend\n";
      }
#endif
      return CreateCpuBackend(options);
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

}  // namespace qmm
