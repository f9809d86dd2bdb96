// ChainPlan and ChainGraph on the device against ReferenceChain (the float64 composition
// of the single-layer references) and against CpuRunChain, for each layer kind alone and
// for mixed chains, eager and replayed from a CUDA graph.
//
// Tolerance of an element: |y - ref| <= tol * (|ref| + rms(ref)) with tol = 1e-2 when the
// intermediates are fp16 and 4e-2 when they are bf16: every matmul input is rounded to
// that dtype once (2^-11 or 2^-8 relative), and a W2A8 layer then quantizes values that
// may land on the other side of a rounding boundary (one step each, three times the
// tolerance for chains with one). A graph replay must match the eager run bit for bit.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/chain.h"
#include "kernels/cuda/chain.h"
#include "kernels/cuda/kernels.h"
#include "kernels/dtype.h"
#include "kernels/layers_reference.h"
#include "kernels/quantize.h"
#include "tests/test_seed.h"

namespace qmm::cuda {
namespace {

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// Both descriptions of one layer: the host one (reference and CPU run) and the device one.
struct TwinLayer {
  CpuChainLayer cpu;
  ChainLayer gpu;
};

class ChainGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A fresh seed every run, printed so that a failure can be replayed (QMM_TEST_SEED).
    const uint64_t seed = TestSeed();
    rng_.seed(static_cast<std::mt19937::result_type>(seed));
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(cublas_, stream_), CUBLAS_STATUS_SUCCESS);
    // The stream's GemmArgs::sync, zeroed once as a CUDA backend worker's is.
    ASSERT_CUDA(cudaMalloc(&sync_, kSyncBytes));
    ASSERT_CUDA(cudaMemset(sync_, 0, kSyncBytes));
  }
  void TearDown() override {
    for (void* p : device_) cudaFree(p);
    cudaFree(sync_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void* Upload(const void* data, size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 1 : bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    device_.push_back(p);
    return p;
  }
  void* Alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 1 : bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xFF, bytes), cudaSuccess);  // NaN in every float dtype
    device_.push_back(p);
    return p;
  }

  // A random weight on both sides; W4A16 with zero points has each row shifted off zero
  // by its own amount, so that they spread over their range; one in activation order takes
  // its quantized columns as stored ones, in a random order.
  std::pair<const PackedWeight*, ChainWeight> Weight(Scheme scheme, int64_t n, int64_t k,
                                                     int32_t group = 0, bool zero_points = false,
                                                     bool act_order = false) {
    const WeightShape shape{
        .n = n, .k = k, .group_size = group, .zero_points = zero_points, .act_order = act_order};
    const float sigma = 1.0f / std::sqrt(static_cast<float>(k));
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> w(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      w[i] = dist(rng_) + (zero_points ? sigma * static_cast<float>(i / k % 5 - 2) : 0.0f);
    }
    WeightShape in_order = shape;
    in_order.act_order = false;
    absl::StatusOr<std::vector<uint8_t>> packed = QuantizeWeight(
        scheme, in_order, DType::kF32, {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4});
    EXPECT_TRUE(packed.ok()) << packed.status();
    if (act_order && packed.ok()) {
      std::vector<int32_t> order(k);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng_);
      const auto* bytes = reinterpret_cast<const uint8_t*>(order.data());
      packed->insert(packed->end(), bytes, bytes + 4 * k);
    }
    if (scheme == Scheme::kW4A16 && packed.ok()) {
      // Every seventh byte's even k made -8, a code the quantizer never writes (it clamps
      // to [-7, 7]) but int4 checkpoints do (kernels/int4_checkpoint.h).
      for (int64_t i = 0; i < n * k / 2; i += 7) (*packed)[i] = ((*packed)[i] & 0xf0) | 0x08;
    }
    bytes_.push_back(*std::move(packed));
    packed_.push_back(PackedWeight{scheme, shape, bytes_.back()});
    const KernelOps* ops = FindKernel(scheme);
    EXPECT_NE(ops, nullptr);
    const std::vector<uint8_t> layout = ops->repack(packed_.back());
    return {&packed_.back(), ChainWeight{scheme, shape, ops, Upload(layout.data(), layout.size())}};
  }
  // Random fp32 parameters on both sides: {host, device}.
  std::pair<const float*, const float*> Params(int64_t count, float mean, float stddev) {
    std::normal_distribution<float> dist(mean, stddev);
    params_.emplace_back(count);
    for (float& v : params_.back()) v = dist(rng_);
    return {params_.back().data(),
            static_cast<const float*>(Upload(params_.back().data(), count * 4))};
  }

  TwinLayer Linear(Scheme scheme, int64_t n, int64_t k, bool bias, int32_t group = 0,
                   bool zero_points = false, bool act_order = false) {
    auto [host, device] = Weight(scheme, n, k, group, zero_points, act_order);
    const auto [bh, bd] = bias ? Params(n, 0.0f, 0.3f) : std::pair<const float*, const float*>{};
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kLinear,
             .weights = {host},
             .bias = bh,
             .in_features = k,
             .out_features = n};
    t.gpu.kind = LayerKind::kLinear;
    t.gpu.weights[0] = device;
    t.gpu.bias = bd;
    t.gpu.in_features = k;
    t.gpu.out_features = n;
    return t;
  }
  TwinLayer DyT(int64_t f, bool beta) {
    const auto [gh, gd] = Params(f, 1.0f, 0.3f);
    const auto [bh, bd] = beta ? Params(f, 0.0f, 0.2f) : std::pair<const float*, const float*>{};
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kDyT,
             .alpha = 0.6f,
             .gamma = gh,
             .beta = bh,
             .in_features = f,
             .out_features = f};
    t.gpu.kind = LayerKind::kDyT;
    t.gpu.alpha = 0.6f;
    t.gpu.gamma = gd;
    t.gpu.beta = bd;
    t.gpu.in_features = t.gpu.out_features = f;
    return t;
  }
  TwinLayer RmsNorm(int64_t f) {
    const auto [wh, wd] = Params(f, 1.0f, 0.3f);
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kRmsNorm,
             .gamma = wh,
             .epsilon = 1e-5f,
             .in_features = f,
             .out_features = f};
    t.gpu.kind = LayerKind::kRmsNorm;
    t.gpu.gamma = wd;
    t.gpu.epsilon = 1e-5f;
    t.gpu.in_features = t.gpu.out_features = f;
    return t;
  }
  static TwinLayer Act(Activation a, int64_t f) {
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kActivation, .activation = a, .in_features = f, .out_features = f};
    t.gpu.kind = LayerKind::kActivation;
    t.gpu.activation = a;
    t.gpu.in_features = t.gpu.out_features = f;
    return t;
  }
  static TwinLayer Residual(int32_t start, int64_t f) {
    TwinLayer t;
    t.cpu = {
        .kind = LayerKind::kResidual, .block_start = start, .in_features = f, .out_features = f};
    t.gpu.kind = LayerKind::kResidual;
    t.gpu.block_start = start;
    t.gpu.in_features = t.gpu.out_features = f;
    return t;
  }
  // With `zero_points`, each W4A16 weight has them, with `act_order` each is in activation
  // order (and then gate and up are not fused).
  TwinLayer Mlp(Scheme gate_up, Scheme down, int64_t f, int64_t hidden, int64_t out,
                bool zero_points = false, bool act_order = false,
                Activation act = Activation::kSilu) {
    const int32_t group = gate_up == Scheme::kW4A16 ? 128 : 0;
    const bool gate_up_zp = zero_points && gate_up == Scheme::kW4A16;
    const bool gate_up_act = act_order && gate_up == Scheme::kW4A16;
    auto [gh, gd] = Weight(gate_up, hidden, f, group, gate_up_zp, gate_up_act);
    auto [uh, ud] = Weight(gate_up, hidden, f, group, gate_up_zp, gate_up_act);
    auto [dh, dd] =
        Weight(down, out, hidden, down == Scheme::kW4A16 ? 128 : 0,
               zero_points && down == Scheme::kW4A16, act_order && down == Scheme::kW4A16);
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kGatedMlp,
             .weights = {gh, uh, dh},
             .gate_activation = act,
             .in_features = f,
             .out_features = out};
    t.gpu.kind = LayerKind::kGatedMlp;
    t.gpu.gate_activation = act;
    t.gpu.weights[0] = gd;
    t.gpu.weights[1] = ud;
    t.gpu.weights[2] = dd;
    t.gpu.in_features = f;
    t.gpu.out_features = out;
    return t;
  }
  // `mlp` with a sub-norm of its product (BitNet b1.58's ffn_sub_norm).
  TwinLayer WithSubNorm(TwinLayer mlp) {
    const auto [wh, wd] = Params(mlp.cpu.weights[0]->shape.n, 1.0f, 0.3f);
    mlp.cpu.gamma = wh;
    mlp.gpu.gamma = wd;
    mlp.cpu.epsilon = mlp.gpu.epsilon = 1e-5f;
    return mlp;
  }
  TwinLayer Embedding(Scheme scheme, int64_t vocab, int64_t dim) {
    auto [host, device] = Weight(scheme, vocab, dim);
    TwinLayer t;
    t.cpu = {.kind = LayerKind::kEmbedding, .weights = {host}, .out_features = dim};
    t.gpu.kind = LayerKind::kEmbedding;
    t.gpu.weights[0] = device;
    t.gpu.out_features = dim;
    return t;
  }

  // Runs the chain eagerly and from a graph for each M, input dtype and output dtype given,
  // and checks both against the references. Returns the plan's launch count.
  int ExpectChain(const std::vector<TwinLayer>& twins, const std::string& what,
                  std::vector<int64_t> rows = {1, 3, 17}) {
    std::vector<CpuChainLayer> cpu;
    std::vector<ChainLayer> gpu;
    for (const TwinLayer& t : twins) {
      cpu.push_back(t.cpu);
      gpu.push_back(t.gpu);
    }
    const ChainPlan plan(gpu);
    bool has_w2a8 = false;
    for (const CpuChainLayer& layer : cpu) {
      for (const PackedWeight* w : layer.weights)
        has_w2a8 |= w != nullptr && w->scheme == Scheme::kW2A8;
    }
    const bool tokens = cpu[0].kind == LayerKind::kEmbedding;
    const int64_t in = cpu[0].in_features;
    const int64_t out = cpu.back().out_features;
    for (int64_t m : rows) {
      for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        if (tokens && x_dtype != DType::kF32) continue;
        const DType act = x_dtype == DType::kBF16 ? DType::kBF16 : DType::kF16;
        const DType y_dtype = x_dtype == DType::kF16 ? DType::kF32 : x_dtype;
        const std::string name = what + " m" + std::to_string(m) + " x " +
                                 std::string(DTypeName(x_dtype)) + " y " +
                                 std::string(DTypeName(y_dtype));
        std::vector<int32_t> ids;
        std::vector<float> x;
        std::vector<uint8_t> x_bytes;
        if (tokens) {
          std::uniform_int_distribution<int32_t> id(
              0, static_cast<int32_t>(cpu[0].weights[0]->shape.n) - 1);
          for (int64_t i = 0; i < m; ++i) ids.push_back(id(rng_));
        } else {
          std::normal_distribution<float> dist(0.0f, 1.5f);
          x.resize(m * in);
          for (float& v : x) v = dist(rng_);
          x_bytes.resize(x.size() * DTypeSize(x_dtype));
          FromFloat(x_dtype, x.data(), x.size(), x_bytes.data());
          ToFloat(x_dtype, x_bytes.data(), x.size(), x.data());  // what the device sees
        }
        ChainRun run;
        run.ids =
            tokens ? static_cast<const int32_t*>(Upload(ids.data(), ids.size() * 4)) : nullptr;
        run.x_dtype = x_dtype;
        run.x = tokens ? nullptr : Upload(x_bytes.data(), x_bytes.size());
        run.m = m;
        run.act_dtype = act;
        run.y_dtype = y_dtype;
        const size_t y_bytes = m * out * DTypeSize(y_dtype);
        run.y = Alloc(y_bytes);
        run.arena = Alloc(plan.ArenaBytes(m));
        run.sync = sync_;
        run.stream = stream_;
        run.cublas = cublas_;
        EXPECT_EQ(plan.Enqueue(run), cudaSuccess) << name;
        EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << name;
        std::vector<uint8_t> eager(y_bytes);
        EXPECT_EQ(cudaMemcpy(eager.data(), run.y, y_bytes, cudaMemcpyDeviceToHost), cudaSuccess);

        std::vector<float> got(m * out);
        ToFloat(y_dtype, eager.data(), got.size(), got.data());
        const std::vector<double> ref = ReferenceChain(cpu, ids, x, m);
        std::vector<float> on_cpu(m * out);
        CpuRunChain(cpu, ids.data(), x.data(), m, on_cpu.data(), 2);
        double sum2 = 0.0;
        for (double r : ref) sum2 += r * r;
        const double rms = std::sqrt(sum2 / ref.size());
        // A W2A8 layer quantizes its input to int8 per row; the device chain hands it
        // 16-bit intermediates where the CPU chain has fp32 ones, so some values round to
        // the neighbouring int8 step, and their errors add up over K: allow three times
        // the 16-bit tolerance there. (Twice failed once, on the H200 in session 51: seed
        // 3971584992, gated mlp W8A16/W2A8 m17, one element at 1.04 times the bound, the
        // same with the kernels of two commits; eight other seeds passed on both.)
        double tol = act == DType::kBF16 ? 4e-2 : 1e-2;
        if (has_w2a8) tol *= 3;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(std::isfinite(got[i])) << name << " element " << i;
          EXPECT_NEAR(got[i], ref[i], tol * (std::fabs(ref[i]) + rms)) << name << " element " << i;
          EXPECT_NEAR(got[i], on_cpu[i], tol * (std::fabs(ref[i]) + rms))
              << name << " element " << i << " (CPU chain)";
          if (::testing::Test::HasFailure()) return plan.launches(rows.front());
        }

        // The same run from a graph, into a poisoned output, twice.
        ChainGraph graph;
        EXPECT_EQ(graph.Capture(plan, run), cudaSuccess) << name;
        for (int replay = 0; replay < 2; ++replay) {
          EXPECT_EQ(cudaMemset(run.y, 0xFF, y_bytes), cudaSuccess);
          EXPECT_EQ(graph.Launch(stream_), cudaSuccess) << name;
          EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << name;
          std::vector<uint8_t> replayed(y_bytes);
          EXPECT_EQ(cudaMemcpy(replayed.data(), run.y, y_bytes, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          EXPECT_EQ(replayed, eager) << name << " replay " << replay;
        }
      }
    }
    return plan.launches(rows.front());
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* sync_ = nullptr;
  std::mt19937 rng_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<PackedWeight> packed_;
  std::deque<std::vector<float>> params_;
  std::vector<void*> device_;
};

TEST_F(ChainGpuTest, LinearOfEveryScheme) {
  struct Case {
    Scheme scheme;
    int32_t group;
    bool zero_points = false;
    bool act_order = false;
  };
  for (const Case& c :
       {Case{Scheme::kFp16, 0}, Case{Scheme::kBf16, 0}, Case{Scheme::kW8A16, 0},
        Case{Scheme::kW4A16, 0}, Case{Scheme::kW4A16, 128}, Case{Scheme::kW4A16, 128, true},
        Case{Scheme::kW4A16, 0, true}, Case{Scheme::kW4A16, 128, false, true},
        Case{Scheme::kW4A16, 128, true, true}, Case{Scheme::kW2A8, 0}}) {
    for (bool bias : {false, true}) {
      ExpectChain({Linear(c.scheme, 136, 512, bias, c.group, c.zero_points, c.act_order)},
                  std::string(SchemeName(c.scheme)) + (c.zero_points ? " zero points" : "") +
                      (c.act_order ? " act_order" : "") + (bias ? " bias" : ""));
    }
  }
}

TEST_F(ChainGpuTest, EachOtherLayerKind) {
  ExpectChain({DyT(256, true)}, "dyt");
  ExpectChain({DyT(256, false)}, "dyt without beta");
  ExpectChain({RmsNorm(256)}, "rms_norm");
  // Llama's MLP block: RMSNorm, then the gated MLP (its SwiGLU fused at decode sizes), then
  // the residual.
  EXPECT_EQ(ExpectChain({RmsNorm(256), Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256),
                         Residual(0, 256)},
                        "llama rms_norm block"),
            3);
  for (Activation a :
       {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu, Activation::kReluSquared}) {
    ExpectChain({DyT(256, true), Act(a, 256)}, std::string(ActivationName(a)));
  }
  ExpectChain({Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 768, 256)}, "gated mlp W4A16");
  // A hidden size of a partial strip and group through the gated kernel.
  ExpectChain({Mlp(Scheme::kW4A16, Scheme::kFp16, 256, 200, 256)}, "gated mlp W4A16/FP16");
  // W8A16's gated launch (gate, up and their product) up to 16 rows, then down.
  EXPECT_EQ(
      ExpectChain({Mlp(Scheme::kW8A16, Scheme::kW2A8, 256, 512, 384)}, "gated mlp W8A16/W2A8"), 2);
  // GeGLU (Gemma), ReGLU and relu2 (BitNet): W4A16's and W8A16's gated launches apply each
  // activation; FP16 weights (no gated launch) run gate and up apart, then their
  // product's epilogue.
  for (Activation a : {Activation::kGeluTanh, Activation::kRelu, Activation::kReluSquared}) {
    EXPECT_EQ(ExpectChain({Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 768, 256, false, false, a)},
                          "gated mlp W4A16 " + std::string(ActivationName(a))),
              2);
    EXPECT_EQ(ExpectChain({Mlp(Scheme::kW8A16, Scheme::kW2A8, 256, 512, 384, false, false, a)},
                          "gated mlp W8A16/W2A8 " + std::string(ActivationName(a))),
              2);
    EXPECT_EQ(ExpectChain({Mlp(Scheme::kFp16, Scheme::kFp16, 256, 512, 256, false, false, a)},
                          "gated mlp FP16 " + std::string(ActivationName(a))),
              4);
  }
  // A sub-norm normalizes the product in place before down: one launch more, after the
  // fused SwiGLU too.
  EXPECT_EQ(
      ExpectChain({RmsNorm(256), WithSubNorm(Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256)),
                   Residual(0, 256)},
                  "llama block with a sub-norm"),
      4);
  // BitNet b1.58 2B4T's MLP block: every weight ternary, relu2, the sub-norm over a hidden
  // size of 640 (not a power of two). Both norms are applied by the W2A8 prologues of the
  // matmuls after them, the residual by the down matmul; up to 16 rows gate, up and
  // relu2(gate) * up are one launch (LaunchW2A8Glu): two launches, four beyond.
  const std::vector<TwinLayer> bitnet = {
      RmsNorm(256),
      WithSubNorm(
          Mlp(Scheme::kW2A8, Scheme::kW2A8, 256, 640, 256, false, false, Activation::kReluSquared)),
      Residual(0, 256)};
  EXPECT_EQ(ExpectChain(bitnet, "bitnet block", {1, 3, 8, 9, 16}), 2);
  EXPECT_EQ(ExpectChain(bitnet, "bitnet block m 17+", {17, 40}), 4);
  // A sub-norm before another scheme's down matmul runs in place.
  EXPECT_EQ(ExpectChain({WithSubNorm(Mlp(Scheme::kW2A8, Scheme::kW8A16, 256, 384, 256, false, false,
                                         Activation::kReluSquared))},
                        "sub-norm before W8A16"),
            3);
  ExpectChain({DyT(256, false), Residual(0, 256)}, "residual");
  ExpectChain({Embedding(Scheme::kBf16, 300, 128)}, "embedding bf16");
  ExpectChain({Embedding(Scheme::kFp16, 300, 128)}, "embedding fp16");
}

TEST_F(ChainGpuTest, FusionsCountOnce) {
  // Linear + bias + GELU + residual: one matmul and one epilogue.
  EXPECT_EQ(ExpectChain({Linear(Scheme::kW8A16, 256, 256, true), Act(Activation::kGeluTanh, 256),
                         Residual(0, 256)},
                        "linear+gelu+residual"),
            2);
  // A W4A16 or W8A16 matmul adds a residual itself (here the chain's input, in each input
  // dtype): one launch.
  EXPECT_EQ(ExpectChain({Linear(Scheme::kW4A16, 256, 256, false), Residual(0, 256)},
                        "W4A16 linear+residual"),
            1);
  EXPECT_EQ(ExpectChain({Linear(Scheme::kW4A16, 256, 256, false, 128, true), Residual(0, 256)},
                        "W4A16 zero points linear+residual"),
            1);
  EXPECT_EQ(ExpectChain({Linear(Scheme::kW8A16, 256, 256, false), Residual(0, 256)},
                        "W8A16 linear+residual", {1, 12, 40}),
            1);
  // DyT, then SwiGLU (gate, up and silu(gate) * up: one W4A16 launch up to its kernel's
  // m, else two matmuls and an epilogue), then the down matmul closed by its residual:
  // the Llama MLP block in three launches at decode sizes, five beyond; with W8A16
  // weights the same.
  const std::vector<TwinLayer> block = {
      DyT(256, true), Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256), Residual(0, 256)};
  EXPECT_EQ(ExpectChain(block, "llama block"), 3);
  EXPECT_EQ(ExpectChain(block, "llama block m 17", {17}), 5);
  // With zero points (AWQ-style weights) the same: the decode kernels, the fused SwiGLU's
  // too, take them in their dequantization; beyond, each matmul adds their term.
  const std::vector<TwinLayer> zp_block = {
      DyT(256, true), Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256, true), Residual(0, 256)};
  EXPECT_EQ(ExpectChain(zp_block, "llama block, zero points"), 3);
  EXPECT_EQ(ExpectChain(zp_block, "llama block, zero points m 17", {17}), 5);
  // So for weights in activation order (GPTQ's desc_act), each matmul gathering its inputs.
  const std::vector<TwinLayer> act_block = {
      DyT(256, true), Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256, true, true),
      Residual(0, 256)};
  EXPECT_EQ(ExpectChain(act_block, "llama block, zero points in act_order"), 5);
  EXPECT_EQ(ExpectChain(act_block, "llama block, act_order m 17", {17}), 5);
  const std::vector<TwinLayer> w8_block = {
      DyT(256, true), Mlp(Scheme::kW8A16, Scheme::kW8A16, 256, 512, 256), Residual(0, 256)};
  EXPECT_EQ(ExpectChain(w8_block, "W8A16 block", {1, 8, 9, 16}), 3);
  EXPECT_EQ(ExpectChain(w8_block, "W8A16 block m 17", {17}), 5);
  // A DyT before W2A8 matmuls is applied by their prologues: none of its own...
  EXPECT_EQ(ExpectChain({DyT(256, true), Linear(Scheme::kW2A8, 256, 256, false)}, "dyt+W2A8"), 1);
  EXPECT_EQ(ExpectChain({DyT(256, false), Mlp(Scheme::kW2A8, Scheme::kW4A16, 256, 512, 256),
                         Residual(0, 256)},
                        "dyt+W2A8 mlp"),
            2);
  // So is an RMSNorm, ...
  EXPECT_EQ(ExpectChain({RmsNorm(256), Linear(Scheme::kW2A8, 256, 256, false)}, "rms_norm+W2A8",
                        {1, 3, 17, 40}),
            1);
  EXPECT_EQ(ExpectChain({RmsNorm(256), Linear(Scheme::kW2A8, 256, 256, false), Residual(1, 256)},
                        "rms_norm kept for its residual"),
            2);
  EXPECT_EQ(ExpectChain({RmsNorm(256), Mlp(Scheme::kW2A8, Scheme::kW4A16, 256, 512, 256)},
                        "rms_norm+W2A8 mlp"),
            2);
  // ... unless a residual reads its output, or another scheme reads it.
  EXPECT_EQ(ExpectChain({DyT(256, true), Linear(Scheme::kW2A8, 256, 256, false), Residual(1, 256)},
                        "dyt kept for its residual"),
            2);
  EXPECT_EQ(ExpectChain({DyT(256, true), Linear(Scheme::kW8A16, 256, 256, false)}, "dyt+W8A16"), 2);
  // A residual that reads the value between a linear and its activation keeps those two
  // apart (the residual itself still folds into the activation's epilogue).
  EXPECT_EQ(ExpectChain({Linear(Scheme::kFp16, 256, 256, false), Act(Activation::kRelu, 256),
                         Residual(1, 256)},
                        "unfusable"),
            2);
}

TEST_F(ChainGpuTest, MixedChains) {
  ExpectChain({Embedding(Scheme::kFp16, 97, 256), DyT(256, true),
               Mlp(Scheme::kW4A16, Scheme::kW2A8, 256, 768, 256), Residual(1, 256), DyT(256, false),
               Mlp(Scheme::kW4A16, Scheme::kW4A16, 256, 512, 256), Residual(4, 256),
               Act(Activation::kGeluTanh, 256), Linear(Scheme::kW8A16, 50, 256, true)},
              "llama-style");
  ExpectChain({Linear(Scheme::kBf16, 256, 256, true), Act(Activation::kRelu, 256),
               Linear(Scheme::kW4A16, 256, 256, false), Residual(1, 256), Residual(0, 256),
               DyT(256, true), Residual(5, 256)},
              "nested residuals");
}

TEST_F(ChainGpuTest, ALlamaSizedBlock) {
  ExpectChain(
      {DyT(4096, true), Mlp(Scheme::kW4A16, Scheme::kW4A16, 4096, 14336, 4096), Residual(0, 4096)},
      "llama-3-8b mlp", {1, 5});
}

TEST_F(ChainGpuTest, BadRunsAreRejected) {
  std::vector<ChainLayer> gpu = {DyT(128, false).gpu};
  const ChainPlan plan(gpu);
  ChainRun run;
  run.m = 1;
  run.act_dtype = DType::kF32;
  run.arena = Alloc(plan.ArenaBytes(1));
  run.y = Alloc(512);
  run.stream = stream_;
  EXPECT_EQ(plan.Enqueue(run), cudaErrorInvalidValue);
  run.act_dtype = DType::kF16;
  run.m = 0;
  EXPECT_EQ(plan.Enqueue(run), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace qmm::cuda
