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
      c.activation = l.activation;
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
        device_name_(CpuModelName()) {}

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
    const auto start = std::chrono::steady_clock::now();
    const auto& weight = static_cast<const CpuWeight&>(*call.weight);
    const int64_t x_count = call.m * weight.shape().k;
    const int64_t y_count = call.m * weight.shape().n;

    // The kernels work in fp32; convert only what is not fp32 already.
    std::vector<float> x_f32;
    const float* x = static_cast<const float*>(call.x);
    if (call.x_dtype != DType::kF32) {
      x_f32.resize(x_count);
      ToFloat(call.x_dtype, call.x, x_count, x_f32.data());
      x = x_f32.data();
    }
    std::vector<float> y_f32;
    float* y = static_cast<float*>(call.y);
    if (call.y_dtype != DType::kF32) {
      y_f32.resize(y_count);
      y = y_f32.data();
    }
    CpuMatMul(weight.view(), x, call.m, y, cpu_threads_);
    if (call.y_dtype != DType::kF32) FromFloat(call.y_dtype, y, y_count, call.y);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start)
        .count();
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
    const auto start = std::chrono::steady_clock::now();
    const std::vector<CpuChainLayer>& layers = static_cast<const CpuModel&>(*call.model).layers();
    const int64_t x_count = call.m * layers.front().in_features;
    const int64_t y_count = call.m * layers.back().out_features;
    std::vector<float> x_f32;
    const float* x = static_cast<const float*>(call.x);
    if (call.x != nullptr && call.x_dtype != DType::kF32) {
      x_f32.resize(x_count);
      ToFloat(call.x_dtype, call.x, x_count, x_f32.data());
      x = x_f32.data();
    }
    std::vector<float> y_f32;
    float* y = static_cast<float*>(call.y);
    if (call.y_dtype != DType::kF32) {
      y_f32.resize(y_count);
      y = y_f32.data();
    }
    CpuRunChain(layers, call.token_ids, x, call.m, y, cpu_threads_);
    if (call.y_dtype != DType::kF32) FromFloat(call.y_dtype, y, y_count, call.y);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start)
        .count();
  }

 private:
  const int num_workers_;
  const int cpu_threads_;
  const std::string device_name_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace qmm
