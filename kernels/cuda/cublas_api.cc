#include "kernels/cuda/cublas_api.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

namespace qmm::cuda {
namespace {

struct Loaded {
  CublasApi api{};
  bool ok = false;
  std::string error;
};

// The directory the CUDA runtime library was loaded from ("" if unknown).
std::string CudartDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

template <typename F>
bool Resolve(void* library, const char* name, F* fn, std::string* error) {
  *fn = reinterpret_cast<F>(dlsym(library, name));
  if (*fn == nullptr) *error = std::string("cuBLAS has no ") + name;
  return *fn != nullptr;
}

Loaded Load() {
  Loaded loaded;
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const std::string first = dlerror();
    library = dlopen((CudartDirectory() + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      loaded.error = "cannot load " + soname + ": " + first;
      return loaded;
    }
  }
  CublasApi& api = loaded.api;
  loaded.ok = Resolve(library, "cublasCreate_v2", &api.create, &loaded.error) &&
              Resolve(library, "cublasDestroy_v2", &api.destroy, &loaded.error) &&
              Resolve(library, "cublasSetStream_v2", &api.set_stream, &loaded.error) &&
              Resolve(library, "cublasSetWorkspace_v2", &api.set_workspace, &loaded.error) &&
              Resolve(library, "cublasGemmEx", &api.gemm_ex, &loaded.error);
  // The library stays loaded for the life of the process: handles outlive any caller.
  return loaded;
}

}  // namespace

const CublasApi* Cublas(std::string* error) {
  static const Loaded loaded = Load();
  if (!loaded.ok && error != nullptr) *error = loaded.error;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace qmm::cuda
