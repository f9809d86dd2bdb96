#include "server/cuda_model.h"

#include <cstring>
#include <utility>

namespace qmm {

CudaModel::CudaModel(int device, std::vector<cuda::ChainLayer> layers, int num_workers)
    : device_(device), layers_(std::move(layers)), graphs_(num_workers) {}

CudaModel::~CudaModel() {
  // Graphs first: they refer to nothing of ours, but the device must be current.
  cudaSetDevice(device_);
  graphs_.clear();
  cudaFree(params_);
}

cudaError_t CudaModel::Create(int device, std::vector<cuda::ChainLayer> layers, int num_workers,
                              cudaStream_t stream, std::unique_ptr<CudaModel>* out) {
  std::unique_ptr<CudaModel> model(new CudaModel(device, std::move(layers), num_workers));
  // Every parameter vector, back to back, each on a 256-byte boundary.
  struct Param {
    const float** slot;
    int64_t count;
  };
  std::vector<Param> params;
  for (cuda::ChainLayer& l : model->layers_) {
    if (l.bias != nullptr) params.push_back({&l.bias, l.out_features});
    // A gated MLP's gamma is its sub-norm's, over the gate's N.
    if (l.gamma != nullptr) {
      params.push_back(
          {&l.gamma, l.kind == LayerKind::kGatedMlp ? l.weights[0].shape.n : l.in_features});
    }
    if (l.beta != nullptr) params.push_back({&l.beta, l.in_features});
  }
  std::vector<size_t> offsets;
  size_t bytes = 0;
  for (const Param& p : params) {
    offsets.push_back(bytes);
    bytes += (static_cast<size_t>(p.count) * sizeof(float) + 255) / 256 * 256;
  }
  if (bytes > 0) {
    std::vector<uint8_t> host(bytes, 0);
    for (size_t i = 0; i < params.size(); ++i) {
      std::memcpy(host.data() + offsets[i], *params[i].slot, params[i].count * sizeof(float));
    }
    if (cudaError_t err = cudaMalloc(&model->params_, bytes); err != cudaSuccess) {
      model->params_ = nullptr;
      return err;
    }
    cudaError_t err =
        cudaMemcpyAsync(model->params_, host.data(), bytes, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) return err;
    for (size_t i = 0; i < params.size(); ++i) {
      *params[i].slot =
          reinterpret_cast<const float*>(static_cast<char*>(model->params_) + offsets[i]);
    }
  }
  model->param_bytes_ = static_cast<int64_t>(bytes);
  // The plan copies the layers, now with device parameter pointers.
  model->plan_ = std::make_unique<cuda::ChainPlan>(model->layers_);
  *out = std::move(model);
  return cudaSuccess;
}

cudaError_t CudaModel::Run(int worker, const cuda::ChainRun& run, cudaEvent_t start) const {
  std::map<Key, Cached>& graphs = graphs_[worker];
  const Key key{run.m, run.x_dtype, run.act_dtype, run.y_dtype, run.x, run.ids, run.y, run.arena};
  if (graphs.size() >= kMaxGraphsPerWorker && !graphs.contains(key)) graphs.clear();
  Cached& cached = graphs[key];
  if (cached.graph == nullptr && !cached.capture_failed && ++cached.runs >= 2) {
    auto graph = std::make_unique<cuda::ChainGraph>();
    if (graph->Capture(*plan_, run) == cudaSuccess) {
      cached.graph = std::move(graph);
    } else {
      // Not every kernel may be capturable on every driver; run this key eagerly.
      cudaGetLastError();
      cached.capture_failed = true;
    }
  }
  if (cudaError_t err = cudaEventRecord(start, run.stream); err != cudaSuccess) return err;
  if (cached.graph != nullptr) return cached.graph->Launch(run.stream);
  return plan_->Enqueue(run);
}

int CudaModel::graphs(int worker) const {
  int count = 0;
  for (const auto& [key, cached] : graphs_[worker]) count += cached.graph != nullptr;
  return count;
}

}  // namespace qmm
