#include "kernels/cuda/chain.h"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/layers.h"

namespace qmm::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t Align(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The activation dtype a dense weight's cuBLAS call needs; nullopt-like kF32 for the
// quantized kernels, which take kF16 or kBF16 alike.
DType DenseXDType(Scheme scheme) {
  return scheme == Scheme::kFp16   ? DType::kF16
         : scheme == Scheme::kBf16 ? DType::kBF16
                                   : DType::kF32;
}

}  // namespace

ChainPlan::ChainPlan(std::span<const ChainLayer> layers) : layers_(layers.begin(), layers.end()) {
  Build();
}

void ChainPlan::Build() {
  const int count = static_cast<int>(layers_.size());
  // Value v is the input of layer v (value `count` is the chain's output). last_use[v] is
  // the last layer that reads it; block_start[v] says a residual reads it, so the layer
  // before v must not be fused with layer v (v would never exist).
  std::vector<int> last_use(count + 1);
  std::iota(last_use.begin(), last_use.end(), 0);
  std::vector<bool> block_start(count + 1, false);
  for (int i = 0; i < count; ++i) {
    const ChainLayer& l = layers_[i];
    max_features_ = std::max({max_features_, l.in_features, l.out_features});
    for (const ChainWeight& w : l.weights) max_features_ = std::max(max_features_, w.shape.n);
    if (l.kind == LayerKind::kResidual) {
      last_use[l.block_start] = std::max(last_use[l.block_start], i);
      block_start[l.block_start] = true;
    }
  }

  std::vector<Operand> where(count + 1);
  std::vector<bool> released(count + 1, false);
  where[0] = {kInput, Storage::kInput};
  std::vector<int> free_slots;
  const auto alloc = [&](Storage storage) {
    int slot;
    if (free_slots.empty()) {
      slot = slots_++;
    } else {
      slot = free_slots.back();
      free_slots.pop_back();
    }
    return Operand{slot, storage};
  };
  const auto release = [&](const Operand& o) {
    if (o.slot >= 0) free_slots.push_back(o.slot);
  };
  // Where value v goes: the run's output for the last one, a fresh slot otherwise.
  const auto dest = [&](int v) {
    return v == count ? Operand{kOutput, Storage::kOut} : alloc(Storage::kAct);
  };

  // Whether `w`'s kernel applies a norm layer of `kind` (DyT or RMSNorm) to its input.
  const auto takes = [](const ChainWeight& w, LayerKind kind) {
    return kind == LayerKind::kDyT ? w.ops->takes_dyt : w.ops->takes_rms_norm;
  };
  // Whether layer i is a DyT or an RMSNorm that the matmuls of layer i + 1, its only
  // reader, apply.
  const auto norm_fuses = [&](int i) {
    const LayerKind kind = layers_[i].kind;
    if ((kind != LayerKind::kDyT && kind != LayerKind::kRmsNorm) || i + 1 >= count ||
        block_start[i + 1]) {
      return false;
    }
    const ChainLayer& next = layers_[i + 1];
    if (next.kind == LayerKind::kLinear) return takes(next.weights[0], kind);
    return next.kind == LayerKind::kGatedMlp && takes(next.weights[0], kind) &&
           takes(next.weights[1], kind);
  };

  for (int i = 0; i < count;) {
    // A fused norm joins the group of the layer after it, whose matmuls read the norm's
    // input.
    const ChainLayer* norm = norm_fuses(i) ? &layers_[i] : nullptr;
    const int first = norm != nullptr ? i + 1 : i;
    const ChainLayer& l = layers_[first];
    const Operand in = where[i];
    int end = first + 1;  // the group of layers [i, end) produces value `end`
    Activation act = Activation::kIdentity;
    Operand skip;
    // Folds a following activation (when allowed) and then a following residual into
    // this group's epilogue, unless a residual needs the value in between.
    const auto take_tail = [&](bool allow_act) {
      if (allow_act && end < count && layers_[end].kind == LayerKind::kActivation &&
          !block_start[end]) {
        act = layers_[end].activation;
        ++end;
      }
      if (end < count && layers_[end].kind == LayerKind::kResidual && !block_start[end]) {
        skip = where[layers_[end].block_start];
        ++end;
      }
    };
    // A matmul of weight `w` on `x` (normalized by `x_norm` if set), then the epilogue of
    // the tail when there is one (a residual alone the kernel adds itself where it can).
    const auto gemm_with_tail = [&](int w, const Operand& x, const float* bias,
                                    const ChainLayer* x_norm) {
      take_tail(true);
      const int64_t n = l.weights[w].shape.n;
      if (bias == nullptr && act == Activation::kIdentity &&
          (skip.slot == kNone || l.weights[w].ops->takes_residual)) {
        steps_.push_back({.op = Step::Op::kGemm,
                          .layer = &l,
                          .weight = w,
                          .in = x,
                          .skip = skip,
                          .out = dest(end),
                          .n = n,
                          .norm = x_norm});
        return steps_.back().out;
      }
      const Operand tmp = alloc(Storage::kF32);
      steps_.push_back({.op = Step::Op::kGemm,
                        .layer = &l,
                        .weight = w,
                        .in = x,
                        .out = tmp,
                        .n = n,
                        .norm = x_norm});
      const Operand out = dest(end);
      steps_.push_back({.op = Step::Op::kEpilogue,
                        .layer = &l,
                        .in = tmp,
                        .skip = skip,
                        .out = out,
                        .bias = bias,
                        .act = act,
                        .n = n});
      release(tmp);
      return out;
    };

    Operand out;
    switch (l.kind) {
      case LayerKind::kEmbedding:
        out = dest(end);
        steps_.push_back(
            {.op = Step::Op::kEmbedding, .layer = &l, .out = out, .n = l.out_features});
        break;
      case LayerKind::kDyT:
        out = dest(end);
        steps_.push_back(
            {.op = Step::Op::kDyT, .layer = &l, .in = in, .out = out, .n = l.out_features});
        break;
      case LayerKind::kRmsNorm:
        out = dest(end);
        steps_.push_back(
            {.op = Step::Op::kRmsNorm, .layer = &l, .in = in, .out = out, .n = l.out_features});
        break;
      case LayerKind::kActivation:
      case LayerKind::kResidual:
        if (l.kind == LayerKind::kActivation) {
          act = l.activation;
          take_tail(false);
        } else {
          skip = where[l.block_start];
        }
        out = dest(end);
        steps_.push_back({.op = Step::Op::kEpilogue,
                          .layer = &l,
                          .in = in,
                          .skip = skip,
                          .out = out,
                          .act = act,
                          .n = l.out_features});
        break;
      case LayerKind::kLinear:
        out = gemm_with_tail(0, in, l.bias, norm);
        break;
      case LayerKind::kGatedMlp: {
        const int64_t hidden = l.weights[0].shape.n;
        const Operand gate = alloc(Storage::kF32);
        const Operand up = alloc(Storage::kF32);
        const Operand h = alloc(Storage::kAct);
        const ChainWeight& wg = l.weights[0];
        const ChainWeight& wu = l.weights[1];
        const bool fusable = wg.ops == wu.ops && wg.ops->launch_glu != nullptr &&
                             wg.shape.n == wu.shape.n && wg.shape.k == wu.shape.k &&
                             wg.shape.group_size == wu.shape.group_size &&
                             wg.shape.zero_points == wu.shape.zero_points && !wg.shape.act_order &&
                             !wu.shape.act_order;
        std::vector<Step>& unfused = fusable ? unfused_ : steps_;
        if (fusable) {
          steps_.push_back({.op = Step::Op::kGlu,
                            .layer = &l,
                            .in = in,
                            .out = h,
                            .n = hidden,
                            .fallback = static_cast<int>(unfused_.size()),
                            .norm = norm});
        }
        unfused.push_back({.op = Step::Op::kGemm,
                           .layer = &l,
                           .weight = 0,
                           .in = in,
                           .out = gate,
                           .n = hidden,
                           .norm = norm});
        unfused.push_back({.op = Step::Op::kGemm,
                           .layer = &l,
                           .weight = 1,
                           .in = in,
                           .out = up,
                           .n = hidden,
                           .norm = norm});
        unfused.push_back({.op = Step::Op::kEpilogue,
                           .layer = &l,
                           .in = gate,
                           .up = up,
                           .out = h,
                           .act = l.gate_activation,
                           .n = hidden});
        release(gate);
        release(up);
        // The sub-norm, in the down matmul where it takes one, else in place (an RMSNorm's
        // writes follow its reads of the row).
        const bool sub_norm_fuses = l.gamma != nullptr && l.weights[2].ops->takes_rms_norm;
        if (l.gamma != nullptr && !sub_norm_fuses) {
          steps_.push_back({.op = Step::Op::kRmsNorm, .layer = &l, .in = h, .out = h, .n = hidden});
        }
        out = gemm_with_tail(2, h, nullptr, sub_norm_fuses ? &l : nullptr);
        release(h);
        break;
      }
    }
    where[end] = out;
    // Every value no layer from `end` on reads gives its slot back.
    for (int v = 0; v < end; ++v) {
      if (!released[v] && last_use[v] < end) {
        release(where[v]);
        released[v] = true;
      }
    }
    i = end;
  }
  convert_slot_ = slots_;
}

size_t ChainPlan::SlotBytes(int64_t m) const {
  return Align(static_cast<size_t>(m) * static_cast<size_t>(max_features_) * sizeof(float));
}

size_t ChainPlan::WorkspaceBytes(int64_t m) const {
  size_t bytes = 0;
  for (const std::vector<Step>* steps : {&steps_, &unfused_}) {
    for (const Step& s : *steps) {
      if (s.op != Step::Op::kGemm) continue;
      const ChainWeight& w = s.layer->weights[s.weight];
      bytes = std::max(bytes, w.ops->workspace_bytes(w.shape, m));
    }
  }
  return Align(bytes);
}

size_t ChainPlan::ArenaBytes(int64_t m) const {
  return static_cast<size_t>(slots_ + 1) * SlotBytes(m) + WorkspaceBytes(m);
}

int ChainPlan::launches(int64_t m) const {
  int count = 0;
  for (const Step& s : steps_) count += s.op == Step::Op::kGlu && !GluFused(s, m) ? 3 : 1;
  return count;
}

bool ChainPlan::GluFused(const Step& step, int64_t m) const {
  return m <= step.layer->weights[0].ops->glu_max_m;
}

void* ChainPlan::Resolve(const ChainRun& run, const Operand& o) const {
  if (o.slot == kInput) return const_cast<void*>(run.x);
  if (o.slot == kOutput) return run.y;
  if (o.slot == kNone) return nullptr;
  return static_cast<char*>(run.arena) + static_cast<size_t>(o.slot) * SlotBytes(run.m);
}

DType ChainPlan::ResolveDType(const ChainRun& run, const Operand& o) const {
  switch (o.storage) {
    case Storage::kInput:
      return run.x_dtype;
    case Storage::kAct:
      return run.act_dtype;
    case Storage::kF32:
      return DType::kF32;
    case Storage::kOut:
      return run.y_dtype;
  }
  return DType::kF32;
}

cudaError_t ChainPlan::PrepareGemm(const ChainRun& run, const Step& step, const ChainWeight& w,
                                   GemmArgs* args) const {
  const void* x = Resolve(run, step.in);
  DType x_dtype = ResolveDType(run, step.in);
  // Dense weights take their own dtype; the quantized kernels take either 16-bit type, and
  // one that applies a norm (DyT or RMSNorm) every dtype (so that the norm reads its input
  // as it is).
  DType need = DenseXDType(w.scheme);
  if (need == DType::kF32) need = x_dtype == DType::kF32 ? run.act_dtype : x_dtype;
  if (step.norm != nullptr) need = x_dtype;
  if (x_dtype != need) {
    void* converted = static_cast<char*>(run.arena) + convert_slot_ * SlotBytes(run.m);
    if (cudaError_t err =
            LaunchConvert(x_dtype, x, need, converted, run.m * w.shape.k, 1.0f, run.stream);
        err != cudaSuccess) {
      return err;
    }
    x = converted;
    x_dtype = need;
  }
  args->weight = w.data;
  args->shape = w.shape;
  args->x_dtype = x_dtype;
  args->x = x;
  args->m = run.m;
  args->y_dtype = ResolveDType(run, step.out);
  args->y = Resolve(run, step.out);
  args->residual = Resolve(run, step.skip);
  args->residual_dtype = ResolveDType(run, step.skip);
  if (step.norm != nullptr && step.norm->kind == LayerKind::kDyT) {
    args->dyt = {step.norm->alpha, step.norm->gamma, step.norm->beta};
  } else if (step.norm != nullptr) {  // an RMSNorm layer, or a gated MLP's sub-norm
    args->rms_norm = {step.norm->gamma, step.norm->epsilon};
  }
  args->workspace = static_cast<char*>(run.arena) + (slots_ + 1) * SlotBytes(run.m);
  args->sync = run.sync;
  args->stream = run.stream;
  args->cublas = run.cublas;
  return cudaSuccess;
}

cudaError_t ChainPlan::Enqueue(const ChainRun& run) const {
  if (run.m < 1 || (run.act_dtype != DType::kF16 && run.act_dtype != DType::kBF16) ||
      run.arena == nullptr || run.y == nullptr) {
    return cudaErrorInvalidValue;
  }
  for (const Step& step : steps_) {
    if (cudaError_t err = EnqueueStep(run, step); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t ChainPlan::EnqueueStep(const ChainRun& run, const Step& step) const {
  const ChainLayer& l = *step.layer;
  switch (step.op) {
    case Step::Op::kEmbedding: {
      const ChainWeight& table = l.weights[0];
      return LaunchEmbedding(table.scheme == Scheme::kBf16 ? DType::kBF16 : DType::kF16, table.data,
                             table.shape.n, table.shape.k, run.ids, run.m,
                             ResolveDType(run, step.out), Resolve(run, step.out), run.stream);
    }
    case Step::Op::kDyT:
      return LaunchDyT(ResolveDType(run, step.in), Resolve(run, step.in), run.m, l.in_features,
                       l.alpha, l.gamma, l.beta, ResolveDType(run, step.out),
                       Resolve(run, step.out), run.stream);
    case Step::Op::kRmsNorm:
      return LaunchRmsNorm(ResolveDType(run, step.in), Resolve(run, step.in), run.m, step.n,
                           l.gamma, l.epsilon, ResolveDType(run, step.out), Resolve(run, step.out),
                           run.stream);
    case Step::Op::kEpilogue: {
      EpilogueArgs args;
      args.x_dtype = ResolveDType(run, step.in);
      args.x = Resolve(run, step.in);
      args.m = run.m;
      args.n = step.n;
      args.bias = step.bias;
      args.act = step.act;
      args.up_dtype = ResolveDType(run, step.up);
      args.up = Resolve(run, step.up);
      args.skip_dtype = ResolveDType(run, step.skip);
      args.skip = Resolve(run, step.skip);
      args.y_dtype = ResolveDType(run, step.out);
      args.y = Resolve(run, step.out);
      return LaunchEpilogue(args, run.stream);
    }
    case Step::Op::kGemm: {
      const ChainWeight& w = l.weights[step.weight];
      GemmArgs args;
      if (cudaError_t err = PrepareGemm(run, step, w, &args); err != cudaSuccess) return err;
      return w.ops->launch(args);
    }
    case Step::Op::kGlu: {
      if (!GluFused(step, run.m)) {
        for (int i = step.fallback; i < step.fallback + 3; ++i) {
          if (cudaError_t err = EnqueueStep(run, unfused_[i]); err != cudaSuccess) return err;
        }
        return cudaSuccess;
      }
      const ChainWeight& gate = l.weights[0];
      GemmArgs args;
      if (cudaError_t err = PrepareGemm(run, step, gate, &args); err != cudaSuccess) return err;
      return gate.ops->launch_glu(args, l.weights[1].data, l.gate_activation);
    }
  }
  return cudaErrorInvalidValue;
}

ChainGraph::~ChainGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

cudaError_t ChainGraph::Capture(const ChainPlan& plan, const ChainRun& run) {
  if (exec_ != nullptr) {
    cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  if (cudaError_t err = cudaStreamBeginCapture(run.stream, cudaStreamCaptureModeThreadLocal);
      err != cudaSuccess) {
    return err;
  }
  const cudaError_t enqueued = plan.Enqueue(run);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(run.stream, &graph);
  cudaError_t err = enqueued != cudaSuccess ? enqueued : ended;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec_, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (err != cudaSuccess) exec_ = nullptr;
  return err;
}

cudaError_t ChainGraph::Launch(cudaStream_t stream) const {
  if (exec_ == nullptr) return cudaErrorInvalidValue;
  return cudaGraphLaunch(exec_, stream);
}

}  // namespace qmm::cuda
