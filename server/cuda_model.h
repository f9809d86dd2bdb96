// A model prepared for the CUDA backend: its parameters (biases, DyT gamma and beta) in
// one device allocation, its launch plan (kernels/cuda/chain.h), and per worker the CUDA
// graphs of the runs that repeat.
//
// Graphs: a run is keyed by everything a captured graph bakes in (m, the dtypes and the
// device pointers of input, output and arena). The first run of a key is enqueued
// kernel by kernel; the second captures the graph and launches it; later ones replay it.
// The backend buckets m (server/cuda_backend.cc), so a handful of keys per worker cover a
// decode loop. A key whose capture fails runs eagerly from then on.
#ifndef QMM_SERVER_CUDA_MODEL_H_
#define QMM_SERVER_CUDA_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/cuda/chain.h"
#include "server/backend.h"

namespace qmm {

class CudaModel final : public BackendModel {
 public:
  // `layers` point at host parameters (bias, gamma, beta: out_features, in_features and
  // in_features values), which are copied to `device` here, synchronously on `stream`;
  // the weights' device layouts must outlive the model. Returns the CUDA error of the
  // allocation or copy (the model is not created then).
  static cudaError_t Create(int device, std::vector<cuda::ChainLayer> layers, int num_workers,
                            cudaStream_t stream, std::unique_ptr<CudaModel>* out);
  ~CudaModel() override;

  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  int64_t device_bytes() const override { return param_bytes_; }
  const cuda::ChainPlan& plan() const { return *plan_; }
  const std::vector<cuda::ChainLayer>& layers() const { return layers_; }

  // Enqueues `run` (on run.stream, which is `worker`'s): eagerly, or from its graph as
  // the header says, recording `start` on the stream just before the first kernel (after
  // any capture, so that the host's capture time is not counted as compute). Only the
  // thread currently serving `worker` may call this with it. Returns the first CUDA error
  // of the enqueue; never synchronizes.
  cudaError_t Run(int worker, const cuda::ChainRun& run, cudaEvent_t start) const;

  // Graphs captured so far on `worker` (tests and metrics).
  int graphs(int worker) const;

 private:
  CudaModel(int device, std::vector<cuda::ChainLayer> layers, int num_workers);

  // A worker's graphs stop growing here; past it they are all dropped and recaptured as
  // runs repeat (only a client cycling through many buffer sizes gets there).
  static constexpr size_t kMaxGraphsPerWorker = 64;

  using Key =
      std::tuple<int64_t, DType, DType, DType, const void*, const void*, const void*, const void*>;
  struct Cached {
    int runs = 0;
    bool capture_failed = false;
    std::unique_ptr<cuda::ChainGraph> graph;
  };

  const int device_;
  std::vector<cuda::ChainLayer> layers_;
  std::unique_ptr<cuda::ChainPlan> plan_;
  void* params_ = nullptr;
  int64_t param_bytes_ = 0;
  // Per worker; each touched only by the thread serving that worker.
  mutable std::vector<std::map<Key, Cached>> graphs_;
};

}  // namespace qmm

#endif  // QMM_SERVER_CUDA_MODEL_H_
