#include "server/cpu_backend.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/chain.h"
#include "kernels/cpu/matmul.h"
#include "kernels/dtype.h"

namespace qmm {
namespace {

class CpuWeight : public BackendWeight {
 public:
  explicit CpuWeight(const PackedWeight& packed)
      : bytes_(packed.bytes.begin(), packed.bytes.end()),
        view_{packed.scheme, packed.shape, bytes_} {}

  Scheme scheme() const override { return view_.scheme; }
  const WeightShape& shape() const override { return view_.shape; }
  int64_t device_bytes() const override { return static_cast<int64_t>(bytes_.size()); }
  const PackedWeight& view() const { return view_; }

 private:
  const std::vector<uint8_t> bytes_;
  const PackedWeight view_;  // points into bytes_
};

// A model's layers for CpuRunChain, with its own copy of the parameters.
class CpuModel : public BackendModel {
 public:
  explicit CpuModel(std::span<const ModelLayer> layers) {
    // Reserve first: the layers point into these vectors.
    params_.reserve(3 * layers.size());
    const auto keep = [this](std::span<const float> values) -> const float* {
      if (values.empty()) return nullptr;
      params_.emplace_back(values.begin(), values.end());
      bytes_ += static_cast<int64_t>(values.size() * sizeof(float));
      return params_.back().data();
    };
    for (const ModelLayer& l : layers) {
      CpuChainLayer c;
      c.kind = l.kind;
      for (int w = 0; w < 3; ++w) {
        if (l.weights[w] != nullptr) {
          c.weights[w] = &static_cast<const CpuWeight*>(l.weights[w])->view();
        }
      }
      c.bias = keep(l.bias);
      c.alpha = l.alpha;
      c.gamma = keep(l.gamma);
      c.beta = keep(l.beta);
      c.epsilon = l.epsilon;
      c.activation = l.activation;
      c.gate_activation = l.gate_activation;
      c.block_start = l.block_start;
      c.in_features = l.in_features;
      c.out_features = l.out_features;
      layers_.push_back(c);
    }
  }

  int64_t device_bytes() const override { return bytes_; }
  const std::vector<CpuChainLayer>& layers() const { return layers_; }

 private:
  std::vector<std::vector<float>> params_;
  std::vector<CpuChainLayer> layers_;
  int64_t bytes_ = 0;
};

// The "model name" line of /proc/cpuinfo, which is what people call their CPU.
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown CPU";
}

int64_t PagesToBytes(int name) {
  const long pages = sysconf(name);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : num_workers_(options.num_workers),
        cpu_threads_(options.cpu_threads),
        device_name_(CpuModelName()),
        scratch_(options.num_workers) {}

  std::string_view name() const override { return "cpu"; }
  std::string device_name() const override { return device_name_; }
  int num_workers() const override { return num_workers_; }
  int64_t memory_total_bytes() const override { return PagesToBytes(_SC_PHYS_PAGES); }
  int64_t memory_free_bytes() const override { return PagesToBytes(_SC_AVPHYS_PAGES); }

  // The CPU kernels take every shape ValidateShape() accepts.
  absl::Status CheckShape(Scheme, const WeightShape&) const override { return absl::OkStatus(); }

  absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight& packed) override {
    return std::make_unique<CpuWeight>(packed);
  }

  absl::StatusOr<int64_t> MatMul(int worker, const MatMulCall& call) override {
    if (worker < 0 || worker >= num_workers_) {
      return absl::InternalError(
          absl::StrCat("worker ", worker, " is out of range [0, ", num_workers_, ")"));
    }
    const auto start = Clock::now();
    const auto& weight = static_cast<const CpuWeight&>(*call.weight);
    const int64_t x_count = call.m * weight.shape().k;
    const int64_t y_count = call.m * weight.shape().n;
    Scratch& scratch = scratch_[worker];

    // The kernels work in fp32; convert only what is not fp32 already.
    const float* x = static_cast<const float*>(call.x);
    if (call.x_dtype != DType::kF32) {
      x = ToFloatScratch(call.x_dtype, call.x, x_count, scratch.x);
    }
    float* y = static_cast<float*>(call.y);
    if (call.y_dtype != DType::kF32) y = Grow(scratch.y, y_count);
    const auto converted = Clock::now();
    CpuMatMul(weight.view(), x, call.m, y, cpu_threads_);
    const auto computed = Clock::now();
    if (call.y_dtype != DType::kF32) FromFloat(call.y_dtype, y, y_count, call.y);
    const int64_t compute_ns = Finish(start, converted, computed, call.transfer);
    scratch.Trim();
    return compute_ns;
  }

  absl::StatusOr<std::unique_ptr<BackendModel>> LoadModel(
      std::span<const ModelLayer> layers) override {
    return std::make_unique<CpuModel>(layers);
  }

  absl::StatusOr<int64_t> Forward(int worker, const ForwardCall& call) override {
    if (worker < 0 || worker >= num_workers_) {
      return absl::InternalError(
          absl::StrCat("worker ", worker, " is out of range [0, ", num_workers_, ")"));
    }
    const auto start = Clock::now();
    const std::vector<CpuChainLayer>& layers = static_cast<const CpuModel&>(*call.model).layers();
    const int64_t x_count = call.m * layers.front().in_features;
    const int64_t y_count = call.m * layers.back().out_features;
    Scratch& scratch = scratch_[worker];
    const float* x = static_cast<const float*>(call.x);
    if (call.x != nullptr && call.x_dtype != DType::kF32) {
      x = ToFloatScratch(call.x_dtype, call.x, x_count, scratch.x);
    }
    float* y = static_cast<float*>(call.y);
    if (call.y_dtype != DType::kF32) y = Grow(scratch.y, y_count);
    const auto converted = Clock::now();
    CpuRunChain(layers, call.token_ids, x, call.m, y, cpu_threads_);
    const auto computed = Clock::now();
    if (call.y_dtype != DType::kF32) FromFloat(call.y_dtype, y, y_count, call.y);
    const int64_t compute_ns = Finish(start, converted, computed, call.transfer);
    scratch.Trim();
    return compute_ns;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // A worker's fp32 conversion buffers: they only grow, so that a steady load allocates
  // nothing per call. Used by one call at a time (the worker contract).
  struct Scratch {
    // What a worker keeps between calls: enough for decode-sized batches, while a rare
    // huge request does not hold its memory for good.
    static constexpr size_t kKeepFloats = size_t{16} << 20;
    void Trim() {
      for (std::vector<float>* v : {&x, &y}) {
        if (v->capacity() > kKeepFloats) std::vector<float>().swap(*v);
      }
    }
    std::vector<float> x;
    std::vector<float> y;
  };

  static float* Grow(std::vector<float>& buffer, int64_t count) {
    if (buffer.size() < static_cast<size_t>(count)) buffer.resize(count);
    return buffer.data();
  }
  static const float* ToFloatScratch(DType dtype, const void* src, int64_t count,
                                     std::vector<float>& buffer) {
    float* dst = Grow(buffer, count);
    ToFloat(dtype, src, count, dst);
    return dst;
  }
  static int64_t Nanos(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  // The compute time, and the conversions before and after it as the transfer times.
  static int64_t Finish(Clock::time_point start, Clock::time_point converted,
                        Clock::time_point computed, TransferTimes* transfer) {
    const Clock::time_point end = Clock::now();
    if (transfer != nullptr) {
      transfer->h2d_ns = Nanos(converted - start);
      transfer->d2h_ns = Nanos(end - computed);
    }
    return Nanos(computed - converted);
  }

  const int num_workers_;
  const int cpu_threads_;
  const std::string device_name_;
  std::vector<Scratch> scratch_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace qmm
