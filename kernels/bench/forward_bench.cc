#include "kernels/bench/forward_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/bench/cuda_status.h"
#include "kernels/bench/graph_timing.h"
#include "kernels/bench/random_packed.h"
#include "kernels/cuda/chain.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/layers.h"
#include "nlohmann/json.hpp"

namespace qmm::bench {
namespace {

using cuda::ChainGraph;
using cuda::ChainLayer;
using cuda::ChainPlan;
using cuda::ChainRun;
using cuda::ChainWeight;

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Llama-3-8B's and BitNet b1.58 2B4T's rms_norm_eps.
constexpr float kEpsilon = 1e-5f;

// Device allocations freed together when the benchmark ends.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    QMM_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, std::max<size_t>(bytes, 1)),
                                   absl::StrCat("cudaMalloc(", bytes, ")")));
    ptrs_.push_back(p);
    return p;
  }
  absl::StatusOr<void*> Upload(const void* data, size_t bytes) {
    absl::StatusOr<void*> p = Alloc(bytes);
    if (!p.ok()) return p;
    QMM_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(*p, data, bytes, cudaMemcpyHostToDevice), "upload"));
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time of `iters` runs of `run(i)`, each between its own event pair, in us.
absl::StatusOr<double> TimeEach(cudaStream_t stream, int iters,
                                const std::function<cudaError_t(int)>& run) {
  for (int i = 0; i < 5; ++i) QMM_RETURN_IF_ERROR(CudaStatus(run(i), "warm-up"));
  cudaEvent_t start = nullptr, stop = nullptr;
  QMM_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  QMM_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&stop), "cudaEventCreate"));
  std::vector<double> us;
  absl::Status status;
  for (int i = 0; i < iters && status.ok(); ++i) {
    status = CudaStatus(cudaEventRecord(start, stream), "cudaEventRecord");
    if (status.ok()) status = CudaStatus(run(i), "timed run");
    if (status.ok()) status = CudaStatus(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (status.ok()) status = CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (status.ok()) status = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok()) return status;
  return Median(us);
}

struct Result {
  std::string scheme;
  int64_t m = 0;
  std::vector<std::pair<std::string, double>> alone;
  double sum_alone_us = 0;
  double forward_us = 0;
  double forward_serial_us = 0;  // the same graphs captured with dependent launch off
  double eager_us = 0;
  double stacked_us = 0;  // a block's share of one graph of ForwardBenchOptions::stack blocks
};

// Everything one (scheme, M) measurement uses.
class BlockBench {
 public:
  BlockBench(const ForwardBenchOptions& o, Scheme scheme, cudaStream_t stream,
             cublasHandle_t cublas)
      : o_(o),
        scheme_(scheme),
        act_(o.bitnet ? Activation::kReluSquared : Activation::kSilu),
        stream_(stream),
        cublas_(cublas) {}

  absl::Status Setup() {
    ops_ = cuda::FindKernel(scheme_);
    if (ops_ == nullptr) return absl::UnimplementedError("no CUDA kernel for the scheme");
    const int32_t group = scheme_ == Scheme::kW4A16 ? kW4GroupSize : 0;
    up_shape_ = {.n = o_.intermediate, .k = o_.hidden, .group_size = group};
    down_shape_ = {.n = o_.hidden, .k = o_.intermediate, .group_size = group};
    // One random weight set, repacked once, uploaded `copies` times at distinct addresses.
    std::vector<uint8_t> layouts[3];
    const WeightShape shapes[3] = {up_shape_, up_shape_, down_shape_};
    for (int w = 0; w < 3; ++w) {
      const std::vector<uint8_t> packed = RandomPacked(scheme_, shapes[w], 11 + w);
      layouts[w] = ops_->repack(PackedWeight{scheme_, shapes[w], packed});
    }
    std::vector<float> norm(o_.hidden);
    for (int64_t i = 0; i < o_.hidden; ++i) norm[i] = 0.5f + static_cast<float>(i % 7) / 8.0f;
    absl::StatusOr<void*> d_norm = mem_.Upload(norm.data(), norm.size() * 4);
    if (!d_norm.ok()) return d_norm.status();
    norm_ = static_cast<const float*>(*d_norm);
    if (o_.bitnet) {
      std::vector<float> sub_norm(o_.intermediate);
      for (int64_t i = 0; i < o_.intermediate; ++i) {
        sub_norm[i] = 0.75f + static_cast<float>(i % 5) / 8.0f;
      }
      absl::StatusOr<void*> d_sub = mem_.Upload(sub_norm.data(), sub_norm.size() * 4);
      if (!d_sub.ok()) return d_sub.status();
      sub_norm_ = static_cast<const float*>(*d_sub);
    }
    for (int c = 0; c < o_.copies; ++c) {
      std::array<ChainWeight, 3> set;
      for (int w = 0; w < 3; ++w) {
        absl::StatusOr<void*> p = mem_.Upload(layouts[w].data(), layouts[w].size());
        if (!p.ok()) return p.status();
        set[w] = ChainWeight{scheme_, shapes[w], ops_, *p};
      }
      weights_.push_back(set);
      std::vector<ChainLayer> layers;
      AppendBlock(set, &layers);
      plans_.push_back(std::make_unique<ChainPlan>(layers));
    }
    std::vector<ChainLayer> stacked;
    for (int b = 0; b < o_.stack; ++b) AppendBlock(weights_[b % o_.copies], &stacked);
    if (!stacked.empty()) stacked_ = std::make_unique<ChainPlan>(stacked);
    return absl::OkStatus();
  }

  // The block's three layers (RMSNorm, gated MLP, residual) on weight set `set`, after the
  // layers already in `layers`.
  void AppendBlock(const std::array<ChainWeight, 3>& set, std::vector<ChainLayer>* layers) const {
    const int32_t first = static_cast<int32_t>(layers->size());
    ChainLayer norm;
    norm.kind = LayerKind::kRmsNorm;
    norm.gamma = norm_;
    norm.epsilon = kEpsilon;
    norm.in_features = norm.out_features = o_.hidden;
    ChainLayer mlp;
    mlp.kind = LayerKind::kGatedMlp;
    for (int w = 0; w < 3; ++w) mlp.weights[w] = set[w];
    mlp.gate_activation = act_;
    mlp.gamma = sub_norm_;
    mlp.epsilon = kEpsilon;
    mlp.in_features = mlp.out_features = o_.hidden;
    ChainLayer residual;
    residual.kind = LayerKind::kResidual;
    residual.block_start = first;
    residual.in_features = residual.out_features = o_.hidden;
    layers->insert(layers->end(), {norm, mlp, residual});
  }

  absl::StatusOr<Result> Measure(int64_t m) {
    Result r;
    r.scheme = std::string(SchemeName(scheme_));
    r.m = m;
    const int64_t h = o_.hidden, inter = o_.intermediate;
    const std::vector<uint16_t> x_host = RandomHalves(false, m * h, 5);
    absl::StatusOr<void*> x = mem_.Upload(x_host.data(), x_host.size() * 2);
    absl::StatusOr<void*> y = mem_.Alloc(m * h * 2);
    absl::StatusOr<void*> xn = mem_.Alloc(m * h * 2);
    absl::StatusOr<void*> g = mem_.Alloc(m * inter * 4);
    absl::StatusOr<void*> u = mem_.Alloc(m * inter * 4);
    absl::StatusOr<void*> hid = mem_.Alloc(m * inter * 2);
    absl::StatusOr<void*> d = mem_.Alloc(m * h * 4);
    const size_t ws_bytes =
        std::max(ops_->workspace_bytes(up_shape_, m), ops_->workspace_bytes(down_shape_, m));
    absl::StatusOr<void*> ws = mem_.Alloc(ws_bytes);
    absl::StatusOr<void*> arena = mem_.Alloc(plans_[0]->ArenaBytes(m));
    const std::vector<uint8_t> zeros(cuda::kSyncBytes, 0);
    absl::StatusOr<void*> sync = mem_.Upload(zeros.data(), zeros.size());
    for (const auto* p : {&x, &y, &xn, &g, &u, &hid, &d, &ws, &arena, &sync}) {
      if (!p->ok()) return p->status();
    }

    // The kernels alone, in the order and dtypes the chain plan uses.
    const auto args_of = [&](int copy, int w, const void* in, DType y_dtype, void* out) {
      cuda::GemmArgs a;
      a.weight = weights_[copy % o_.copies][w].data;
      a.shape = weights_[copy % o_.copies][w].shape;
      a.x_dtype = DType::kF16;
      a.x = in;
      a.m = m;
      a.y_dtype = y_dtype;
      a.y = out;
      a.workspace = *ws;
      a.sync = *sync;
      a.stream = stream_;
      a.cublas = cublas_;
      return a;
    };
    // A matmul applying the RMSNorm of weight `norm` to its input where the plan has it
    // do so (KernelOps::takes_rms_norm): the norm is then no launch of its own.
    const bool norms_fuse = ops_->takes_rms_norm;
    const auto gemm = [&](int copy, int w, const void* in, void* out, const float* norm) {
      cuda::GemmArgs a = args_of(copy, w, in, DType::kF32, out);
      if (norms_fuse) a.rms_norm = {norm, kEpsilon};
      return ops_->launch(a);
    };
    const void* gate_in = norms_fuse ? *x : *xn;
    std::vector<std::pair<std::string, std::function<cudaError_t(int)>>> kernels = {
        {"rms_norm",
         [&](int) {
           return cuda::LaunchRmsNorm(DType::kF16, *x, m, h, norm_, kEpsilon, DType::kF16, *xn,
                                      stream_);
         }},
        {"gate", [&](int i) { return gemm(i, 0, gate_in, *g, norm_); }},
        {"up", [&](int i) { return gemm(i, 1, gate_in, *u, norm_); }},
        {std::string(ActivationName(act_)) + "_mul",
         [&](int) {
           return cuda::LaunchEpilogue({.x_dtype = DType::kF32,
                                        .x = *g,
                                        .m = m,
                                        .n = inter,
                                        .act = act_,
                                        .up_dtype = DType::kF32,
                                        .up = *u,
                                        .y_dtype = DType::kF16,
                                        .y = *hid},
                                       stream_);
         }},
        {"down", [&](int i) { return gemm(i, 2, *hid, *d, sub_norm_); }},
        {"residual",
         [&](int) {
           return cuda::LaunchEpilogue({.x_dtype = DType::kF32,
                                        .x = *d,
                                        .m = m,
                                        .n = h,
                                        .skip_dtype = DType::kF16,
                                        .skip = *x,
                                        .y_dtype = DType::kF16,
                                        .y = *y},
                                       stream_);
         }},
    };
    if (sub_norm_ != nullptr && !norms_fuse) {
      kernels.insert(kernels.begin() + 4, {"sub_norm", [&](int) {
                                             return cuda::LaunchRmsNorm(DType::kF16, *hid, m, inter,
                                                                        sub_norm_, kEpsilon,
                                                                        DType::kF16, *hid, stream_);
                                           }});
    }
    // Where the plan fuses (ChainPlan), so does this: the matmuls apply the norms, the
    // down matmul adds the residual itself, and gate, up and their product are one SwiGLU
    // launch.
    if (norms_fuse) kernels.erase(kernels.begin());
    if (ops_->takes_residual) {
      kernels.erase(kernels.end() - 2, kernels.end());
      kernels.emplace_back("down+residual", [&](int i) {
        cuda::GemmArgs a = args_of(i, 2, *hid, DType::kF16, *y);
        if (norms_fuse) a.rms_norm = {sub_norm_, kEpsilon};
        a.residual = *x;
        a.residual_dtype = DType::kF16;
        return ops_->launch(a);
      });
    }
    if (ops_->launch_glu != nullptr && m <= ops_->glu_max_m) {
      // gate, up and their product: the three entries from "gate" on.
      const auto gate = std::find_if(kernels.begin(), kernels.end(),
                                     [](const auto& k) { return k.first == "gate"; });
      const auto at = kernels.erase(gate, gate + 3);
      kernels.insert(at, {act_ == Activation::kSilu ? "swiglu" : "glu", [&](int i) {
                            cuda::GemmArgs a = args_of(i, 0, gate_in, DType::kF16, *hid);
                            if (norms_fuse) a.rms_norm = {norm_, kEpsilon};
                            return ops_->launch_glu(a, weights_[i % o_.copies][1].data, act_);
                          }});
    }
    const int batch = std::max(o_.copies, o_.graph_batch / o_.copies * o_.copies);
    for (const auto& [name, launch] : kernels) {
      absl::StatusOr<double> us = TimeGraph(stream_, batch, std::max(5, o_.iters / 10), launch);
      if (!us.ok())
        return absl::Status(us.status().code(), absl::StrCat(name, ": ", us.status().message()));
      r.alone.emplace_back(name, *us);
      r.sum_alone_us += *us;
    }

    // The whole block, as the backend runs it.
    ChainRun run;
    run.x_dtype = DType::kF16;
    run.x = *x;
    run.m = m;
    run.act_dtype = DType::kF16;
    run.y_dtype = DType::kF16;
    run.y = *y;
    run.arena = *arena;
    run.sync = *sync;
    run.stream = stream_;
    run.cublas = cublas_;
    // Replays of the block's graphs, captured with dependent launch on (as the backend
    // runs them) or off.
    auto time_graphs = [&](bool dependent) -> absl::StatusOr<double> {
      cuda::EnableDependentLaunch(dependent);
      std::vector<std::unique_ptr<ChainGraph>> graphs;
      absl::Status captured;
      for (const auto& plan : plans_) {
        graphs.push_back(std::make_unique<ChainGraph>());
        captured = CudaStatus(graphs.back()->Capture(*plan, run), "chain capture");
        if (!captured.ok()) break;
      }
      cuda::EnableDependentLaunch(true);
      if (!captured.ok()) return captured;
      return TimeEach(stream_, o_.iters,
                      [&](int i) { return graphs[i % graphs.size()]->Launch(stream_); });
    };
    absl::StatusOr<double> forward = time_graphs(true);
    if (!forward.ok()) return forward.status();
    r.forward_us = *forward;
    absl::StatusOr<double> serial = time_graphs(false);
    if (!serial.ok()) return serial.status();
    r.forward_serial_us = *serial;
    absl::StatusOr<double> eager =
        TimeEach(stream_, o_.iters, [&](int i) { return plans_[i % plans_.size()]->Enqueue(run); });
    if (!eager.ok()) return eager.status();
    r.eager_us = *eager;
    if (stacked_ != nullptr) {
      absl::StatusOr<void*> stacked_arena = mem_.Alloc(stacked_->ArenaBytes(m));
      if (!stacked_arena.ok()) return stacked_arena.status();
      ChainRun stacked_run = run;
      stacked_run.arena = *stacked_arena;
      ChainGraph graph;
      QMM_RETURN_IF_ERROR(CudaStatus(graph.Capture(*stacked_, stacked_run), "stacked capture"));
      absl::StatusOr<double> stacked =
          TimeEach(stream_, std::max(5, o_.iters / 10), [&](int) { return graph.Launch(stream_); });
      if (!stacked.ok()) return stacked.status();
      r.stacked_us = *stacked / o_.stack;
    }
    return r;
  }

 private:
  const ForwardBenchOptions& o_;
  const Scheme scheme_;
  const Activation act_;  // the gate's
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  const cuda::KernelOps* ops_ = nullptr;
  WeightShape up_shape_, down_shape_;
  DeviceArena mem_;
  const float* norm_ = nullptr;      // the RMSNorm's weight
  const float* sub_norm_ = nullptr;  // BitNet's ffn_sub_norm weight, or nullptr
  std::vector<std::array<ChainWeight, 3>> weights_;
  std::vector<std::unique_ptr<ChainPlan>> plans_;
  std::unique_ptr<ChainPlan> stacked_;  // o_.stack blocks in one chain, or nullptr
};

}  // namespace

absl::Status RunForwardBench(const ForwardBenchOptions& o) {
  if (o.copies < 1 || o.iters < 1 || o.graph_batch < 1 || o.ms.empty()) {
    return absl::InvalidArgumentError("copies, iters, graph_batch and m must be positive");
  }
  if (o.stack < 0) return absl::InvalidArgumentError("stack must be >= 0");
  QMM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(o.device), "cudaSetDevice"));
  cudaDeviceProp prop{};
  QMM_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, o.device), "device properties"));
  cudaStream_t stream = nullptr;
  QMM_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  cublasHandle_t cublas = nullptr;
  void* cublas_ws = nullptr;
  QMM_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&cublas_ws, kCublasWorkspaceBytes), "cuBLAS ws"));
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(cublas, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(cublas, cublas_ws, kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError("cannot create a cuBLAS handle");
  }

  const Scheme quantized = o.scheme;
  if (o.bitnet) {
    std::printf(
        "BitNet b1.58 2B4T MLP block, %s, on %s: RMSNorm -> relu2 GLU %lld -> 2x%lld -> "
        "sub-norm -> %lld -> residual\n",
        std::string(SchemeName(quantized)).c_str(), prop.name, static_cast<long long>(o.hidden),
        static_cast<long long>(o.intermediate), static_cast<long long>(o.hidden));
  } else {
    std::printf(
        "Llama-3-8B MLP block, %s, on %s: RMSNorm -> SwiGLU %lld -> 2x%lld -> %lld -> "
        "residual\n",
        std::string(SchemeName(quantized)).c_str(), prop.name, static_cast<long long>(o.hidden),
        static_cast<long long>(o.intermediate), static_cast<long long>(o.hidden));
  }
  std::vector<Result> results;
  absl::Status status;
  for (Scheme scheme : {quantized, Scheme::kFp16}) {
    BlockBench bench(o, scheme, stream, cublas);
    status = bench.Setup();
    for (int64_t m : o.ms) {
      if (!status.ok()) break;
      absl::StatusOr<Result> r = bench.Measure(m);
      if (!r.ok()) {
        status = r.status();
        break;
      }
      std::printf("%-6s M=%-3lld alone:", r->scheme.c_str(), static_cast<long long>(m));
      for (const auto& [name, us] : r->alone) std::printf(" %s %.1f", name.c_str(), us);
      std::printf(" | sum %.1f us  forward %.1f us (%.2fx sum)  serialized %.1f us  eager %.1f us",
                  r->sum_alone_us, r->forward_us, r->forward_us / r->sum_alone_us,
                  r->forward_serial_us, r->eager_us);
      if (o.stack > 0) std::printf("  stacked %.1f us a block", r->stacked_us);
      std::printf("\n");
      results.push_back(*std::move(r));
    }
    if (!status.ok()) break;
  }
  cublasDestroy(cublas);
  cudaFree(cublas_ws);
  cudaStreamDestroy(stream);
  if (!status.ok()) return status;

  nlohmann::json json;
  json["command"] = o.command;
  json["device"] = prop.name;
  json["stacked_blocks"] = o.stack;
  json["block"] = {{"name", o.bitnet ? "bitnet" : "llama"},
                   {"scheme", std::string(SchemeName(quantized))},
                   {"hidden", o.hidden},
                   {"intermediate", o.intermediate}};
  for (const Result& r : results) {
    nlohmann::json row = {{"scheme", r.scheme},
                          {"m", r.m},
                          {"sum_alone_us", r.sum_alone_us},
                          {"forward_us", r.forward_us},
                          {"forward_serialized_us", r.forward_serial_us},
                          {"eager_us", r.eager_us},
                          {"forward_over_sum", r.forward_us / r.sum_alone_us}};
    if (o.stack > 0) row["stacked_us_per_block"] = r.stacked_us;
    for (const auto& [name, us] : r.alone) row["alone_us"][name] = us;
    json["results"].push_back(row);
  }
  const std::string quantized_name(SchemeName(quantized));
  for (const Result& q : results) {
    for (const Result& fp16 : results) {
      if (q.scheme == quantized_name && fp16.scheme == "FP16" && q.m == fp16.m) {
        std::printf("M=%lld: %s forward %.2fx faster than the cuBLAS fp16 block\n",
                    static_cast<long long>(q.m), quantized_name.c_str(),
                    fp16.forward_us / q.forward_us);
        json["speedup_vs_fp16"][std::to_string(q.m)] = fp16.forward_us / q.forward_us;
      }
    }
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << json.dump(2) << "\n";
    if (!out) return absl::InternalError("cannot write " + o.json_path);
  }
  return absl::OkStatus();
}

}  // namespace qmm::bench
