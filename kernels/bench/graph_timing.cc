#include "kernels/bench/graph_timing.h"

#include <algorithm>
#include <vector>

#include "kernels/bench/cuda_status.h"

namespace qmm::bench {

absl::StatusOr<double> TimeGraph(cudaStream_t stream, int batch, int replays,
                                 const std::function<cudaError_t(int)>& launch) {
  cudaGraph_t graph = nullptr;
  QMM_RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                 "begin capture"));
  cudaError_t launch_err = cudaSuccess;
  for (int i = 0; i < batch && launch_err == cudaSuccess; ++i) launch_err = launch(i);
  const cudaError_t end_err = cudaStreamEndCapture(stream, &graph);
  QMM_RETURN_IF_ERROR(CudaStatus(launch_err, "captured launch"));
  QMM_RETURN_IF_ERROR(CudaStatus(end_err, "end capture"));
  cudaGraphExec_t exec = nullptr;
  absl::Status status = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  if (!status.ok()) return status;
  cudaEvent_t start = nullptr, stop = nullptr;
  status = CudaStatus(cudaEventCreate(&start), "cudaEventCreate");
  if (status.ok()) status = CudaStatus(cudaEventCreate(&stop), "cudaEventCreate");
  if (status.ok()) status = CudaStatus(cudaGraphLaunch(exec, stream), "warm-up replay");
  std::vector<double> us;
  for (int r = 0; r < replays && status.ok(); ++r) {
    status = CudaStatus(cudaEventRecord(start, stream), "cudaEventRecord");
    if (status.ok()) status = CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (status.ok()) status = CudaStatus(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (status.ok()) status = CudaStatus(cudaEventSynchronize(stop), "replay");
    float ms = 0;
    if (status.ok()) status = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(ms * 1e3 / batch);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  if (!status.ok()) return status;
  if (us.empty()) return absl::InvalidArgumentError("TimeGraph: replays must be >= 1");
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace qmm::bench
