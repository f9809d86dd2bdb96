// Runs a model's chain of layers on the device with every intermediate in device memory:
// the CUDA backend's Forward, and what qmm-forward-bench times.
//
// ChainPlan turns checked layers (server/model.h) into a launch sequence once, at model
// creation: the matmuls through the kernel registry (kernels.h), the layer kernels of
// layers.h, and fusions of neighbours into one element-wise epilogue — a Linear's bias,
// a following activation and a following residual add (into the matmul itself when the
// residual is all there is and the kernel adds one: KernelOps::takes_residual); a gated
// MLP's act(gate) * up; a DyT or an RMSNorm into the matmuls that read its output, where they
// apply it themselves (KernelOps::takes_dyt, takes_rms_norm; W2A8 folds either into its
// int8 quantization) and no residual reads that output, and a gated MLP's sub-norm into
// its down matmul the same way (else it runs in place before it). A gated MLP whose gate
// and up weights share a scheme with a gated kernel (KernelOps::launch_glu: W8A16's, W4A16's
// and W2A8's) runs both projections and the product as one launch at the m that kernel
// takes, and as two matmuls and an epilogue beyond. A value that some
// residual reads later is never fused away. Intermediate values live in equal slots of one arena,
// reused once no later layer reads them.
//
// Dtypes: matmul inputs are `act_dtype` (kF16 or kBF16, picked per run by the caller);
// a dense FP16/BF16 weight gets its own dtype, converted on the way when needed. Matmul
// results that an epilogue still touches stay fp32; everything element-wise is fp32 math.
//
// ChainGraph captures one Enqueue (fixed pointers and m) as a CUDA graph, replayed with
// one launch.
#ifndef QMM_KERNELS_CUDA_CHAIN_H_
#define QMM_KERNELS_CUDA_CHAIN_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cuda/kernels.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/layer_kind.h"

namespace qmm::cuda {

// A weight as a layer uses it: its registry entry and its device layout.
struct ChainWeight {
  Scheme scheme = Scheme::kFp16;
  WeightShape shape;
  const KernelOps* ops = nullptr;
  const void* data = nullptr;
};

// One checked layer (features line up, weights fit: see server/model.h). Device pointers,
// the parameter vectors 16-byte aligned (a W2A8 prologue reads an RMSNorm's weight in
// 16-byte loads).
struct ChainLayer {
  LayerKind kind = LayerKind::kLinear;
  // kEmbedding: {table} (FP16/BF16); kLinear: {weight}; kGatedMlp: {gate, up, down}.
  ChainWeight weights[3];
  const float* bias = nullptr;                    // kLinear: fp32 [out_features] or nullptr
  float alpha = 0.0f;                             // kDyT
  const float* gamma = nullptr;                   // kDyT: fp32 [in_features]
  const float* beta = nullptr;                    // kDyT: fp32 [in_features] or nullptr
  float epsilon = 0.0f;                           // kRmsNorm (its weight is gamma)
  Activation activation = Activation::kIdentity;  // kActivation
  // kGatedMlp: act in down(act(gate(x)) * up(x)), SiLU for SwiGLU, GELU for GeGLU; its
  // sub-norm, when gamma is set: down(rmsnorm(act(gate(x)) * up(x))), gamma [the gate's N].
  Activation gate_activation = Activation::kSilu;
  int32_t block_start = -1;  // kResidual
  int64_t in_features = 0;
  int64_t out_features = 0;
};

// One run of a plan. Device pointers; everything is enqueued on `stream`.
struct ChainRun {
  const int32_t* ids = nullptr;  // [m] token ids in range (chains that start with an embedding)
  DType x_dtype = DType::kF32;   // input [m, in_features] otherwise
  const void* x = nullptr;
  int64_t m = 0;
  DType act_dtype = DType::kF16;  // kF16 or kBF16
  DType y_dtype = DType::kF32;
  void* y = nullptr;      // [m, out_features]
  void* arena = nullptr;  // ChainPlan::ArenaBytes(m) bytes, 256-byte aligned
  void* sync = nullptr;   // optional: GemmArgs::sync of the run's matmuls
  cudaStream_t stream = nullptr;
  void* cublas = nullptr;  // cublasHandle_t bound to `stream` (dense weights only)
};

class ChainPlan {
 public:
  // `layers` must be checked; the plan copies them (the pointers they hold must outlive it).
  explicit ChainPlan(std::span<const ChainLayer> layers);

  // Device bytes of the arena a run of m rows needs (intermediates and kernel workspace).
  size_t ArenaBytes(int64_t m) const;
  // Steps of a run of m rows (a fused group is one step; a matmul is one step however
  // many kernels its launcher enqueues, and a dtype conversion of its input is not
  // counted).
  int launches(int64_t m) const;
  // Enqueues the chain; returns the first launch error. Never synchronizes.
  cudaError_t Enqueue(const ChainRun& run) const;

 private:
  // Where a value lives: an arena slot, the run's input or the run's output.
  static constexpr int kInput = -1;
  static constexpr int kOutput = -2;
  static constexpr int kNone = -3;
  // Its dtype, resolved per run.
  enum class Storage : uint8_t { kInput, kAct, kF32, kOut };
  struct Operand {
    int slot = kNone;
    Storage storage = Storage::kAct;
  };
  struct Step {
    // kGlu: the gated MLP's gate, up and product in one launch, or beyond the
    // kernel's m its three unfused steps, unfused_[fallback .. fallback + 2].
    enum class Op : uint8_t { kEmbedding, kGemm, kDyT, kRmsNorm, kEpilogue, kGlu };
    Op op = Op::kGemm;
    const ChainLayer* layer = nullptr;
    int weight = 0;  // kGemm: index into layer->weights
    Operand in = {}, up = {}, skip = {}, out = {};
    const float* bias = nullptr;
    Activation act = Activation::kIdentity;
    int64_t n = 0;  // output features
    int fallback = -1;
    // kGemm, kGlu: the layer whose norm the kernel applies to its input (a DyT, an
    // RMSNorm, or the gated MLP whose sub-norm precedes its down matmul), or nullptr.
    const ChainLayer* norm = nullptr;
  };

  void Build();
  size_t SlotBytes(int64_t m) const;
  size_t WorkspaceBytes(int64_t m) const;
  void* Resolve(const ChainRun& run, const Operand& o) const;
  DType ResolveDType(const ChainRun& run, const Operand& o) const;
  bool GluFused(const Step& step, int64_t m) const;
  cudaError_t EnqueueStep(const ChainRun& run, const Step& step) const;
  // The arguments of step's matmul of weight `w` (its input, output, residual and DyT),
  // the input converted first (into the convert slot) when the kernel takes another dtype.
  cudaError_t PrepareGemm(const ChainRun& run, const Step& step, const ChainWeight& w,
                          GemmArgs* args) const;

  std::vector<ChainLayer> layers_;
  std::vector<Step> steps_;
  std::vector<Step> unfused_;  // kGlu steps' fallbacks
  int slots_ = 0;
  int convert_slot_ = 0;  // scratch for a matmul input in another dtype
  int64_t max_features_ = 1;
};

// A captured Enqueue. Replays exactly the captured pointers, m and dtypes: the owner
// keys it by them and recaptures when any changes.
class ChainGraph {
 public:
  ChainGraph() = default;
  ~ChainGraph();
  ChainGraph(const ChainGraph&) = delete;
  ChainGraph& operator=(const ChainGraph&) = delete;

  // Captures plan.Enqueue(run) from run.stream (thread-local capture mode, so other
  // threads' CUDA calls are unaffected). Nothing runs yet. On failure the graph is empty.
  cudaError_t Capture(const ChainPlan& plan, const ChainRun& run);
  bool captured() const { return exec_ != nullptr; }
  // Enqueues one replay on `stream`.
  cudaError_t Launch(cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_CHAIN_H_
