#include "kernels/cuda/tensor_map.h"

#include <cudaTypedefs.h>

namespace qmm::cuda {
namespace {

// The driver's encoder, looked up once through the runtime, so that the library links
// only cudart.
PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

}  // namespace

cudaError_t EncodeRowsMap(CUtensorMap* map, const void* base, int64_t rows, int64_t row_bytes,
                          int64_t stride_bytes, int box_bytes, int box_rows,
                          CUtensorMapSwizzle swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  constexpr int64_t kWord = 8;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes / kWord),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / kWord),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<void*>(base), dims,
                            strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace qmm::cuda
