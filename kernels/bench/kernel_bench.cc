#include "kernels/bench/kernel_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
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
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/w2a8.h"
#include "kernels/cuda/w4a16.h"
#include "kernels/cuda/w8a16.h"
#include "nlohmann/json.hpp"

namespace qmm::bench {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr size_t kCopyBytes = size_t{1} << 30;

class DeviceMem {
 public:
  DeviceMem() = default;
  ~DeviceMem() { cudaFree(ptr_); }
  DeviceMem(DeviceMem&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  absl::Status Allocate(size_t bytes) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    return CudaStatus(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1)),
                      absl::StrCat("cudaMalloc(", bytes, ")"));
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

struct Timing {
  double median_us = 0;  // one launch between its own event pair
  double min_us = 0;
  double graph_us = 0;  // per launch, from replays of a graph of back-to-back launches
  // The same with dependent launch off (cuda/dependent_launch.h): each launch waits for
  // the previous one to end before it starts.
  double graph_serial_us = 0;
};

// warmup + iters launches, an event pair around each timed one. On this VM a host launch
// costs a few microseconds, so a kernel shorter than that is timed with the host's
// submission gap included: this is the pessimistic number.
absl::StatusOr<Timing> TimeRuns(cudaStream_t stream, int warmup, int iters,
                                const std::function<cudaError_t(int)>& launch) {
  for (int i = 0; i < warmup; ++i) QMM_RETURN_IF_ERROR(CudaStatus(launch(i), "warm-up launch"));
  std::vector<cudaEvent_t> events(2 * iters, nullptr);
  absl::Status status;
  for (cudaEvent_t& e : events) {
    status = CudaStatus(cudaEventCreate(&e), "cudaEventCreate");
    if (!status.ok()) break;
  }
  for (int i = 0; i < iters && status.ok(); ++i) {
    status = CudaStatus(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
    if (status.ok()) status = CudaStatus(launch(warmup + i), "launch");
    if (status.ok())
      status = CudaStatus(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
  }
  if (status.ok()) status = CudaStatus(cudaStreamSynchronize(stream), "timed runs");
  std::vector<double> us(iters);
  for (int i = 0; i < iters && status.ok(); ++i) {
    float ms = 0;
    status = CudaStatus(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]),
                        "cudaEventElapsedTime");
    us[i] = ms * 1e3;
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (!status.ok()) return status;
  std::sort(us.begin(), us.end());
  return Timing{us[iters / 2], us[0], 0};
}

// The copies of one weight that the timed runs rotate over.
struct Copies {
  std::vector<DeviceMem> buffers;
  int64_t device_bytes = 0;
};

absl::StatusOr<Copies> Upload(const cuda::KernelOps& ops, const PackedWeight& packed,
                              double min_total_bytes) {
  const std::vector<uint8_t> layout = ops.repack(packed);
  Copies copies;
  copies.device_bytes = static_cast<int64_t>(layout.size());
  const int count = std::max(2, static_cast<int>(std::ceil(min_total_bytes / layout.size())));
  copies.buffers.resize(count);
  for (DeviceMem& b : copies.buffers) {
    QMM_RETURN_IF_ERROR(b.Allocate(layout.size()));
    QMM_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(b.get(), layout.data(), layout.size(), cudaMemcpyHostToDevice), "upload"));
  }
  return copies;
}

// Bytes read + written per second by a large device-to-device copy, in TB/s.
absl::StatusOr<double> CopyCeiling(cudaStream_t stream, const BenchOptions& o) {
  DeviceMem src, dst;
  QMM_RETURN_IF_ERROR(src.Allocate(kCopyBytes));
  QMM_RETURN_IF_ERROR(dst.Allocate(kCopyBytes));
  QMM_RETURN_IF_ERROR(CudaStatus(cudaMemset(src.get(), 0x5A, kCopyBytes), "cudaMemset"));
  absl::StatusOr<Timing> t = TimeRuns(stream, 3, std::max(10, o.iters / 5), [&](int) {
    return cudaMemcpyAsync(dst.get(), src.get(), kCopyBytes, cudaMemcpyDeviceToDevice, stream);
  });
  if (!t.ok()) return t.status();
  return 2.0 * kCopyBytes / (t->median_us * 1e-6) / 1e12;
}

struct Row {
  std::string scheme;
  BenchShape shape;
  int32_t group_size = 0;
  int64_t m = 0;
  Timing t;
  int64_t bytes_read = 0;
  int copies = 0;
  double cublas_us = 0;
};

}  // namespace

absl::Status RunKernelBench(const BenchOptions& o) {
  QMM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(o.device), "cudaSetDevice"));
  cudaDeviceProp prop{};
  QMM_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, o.device), "device properties"));
  int l2_bytes = 0, sms = 0, clock_khz = 0, mem_clock_khz = 0;
  cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, o.device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, o.device);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, o.device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, o.device);
  const double min_rotation_bytes = o.l2_multiple * l2_bytes;

  cudaStream_t stream = nullptr;
  QMM_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate");
  DeviceMem cublas_workspace;
  QMM_RETURN_IF_ERROR(cublas_workspace.Allocate(kCublasWorkspaceBytes));
  cublasSetStream(cublas, stream);
  cublasSetWorkspace(cublas, cublas_workspace.get(), kCublasWorkspaceBytes);
  // GemmArgs::sync of the stream, zeroed once as the server's workers do.
  DeviceMem sync;
  QMM_RETURN_IF_ERROR(sync.Allocate(cuda::kSyncBytes));
  QMM_RETURN_IF_ERROR(CudaStatus(cudaMemset(sync.get(), 0, cuda::kSyncBytes), "sync"));

  absl::StatusOr<double> copy_tbps = CopyCeiling(stream, o);
  if (!copy_tbps.ok()) return copy_tbps.status();
  std::printf("device %s (%d SMs, L2 %d MB, SM clock %d MHz), copy ceiling %.2f TB/s\n", prop.name,
              sms, l2_bytes >> 20, clock_khz / 1000, *copy_tbps);
  std::printf("x %s, y %s, %d warm-up + %d timed runs (median), weights rotated over >= %.0f MB\n",
              std::string(DTypeName(o.x_dtype)).c_str(), std::string(DTypeName(o.y_dtype)).c_str(),
              o.warmup, o.iters, min_rotation_bytes / 1e6);

  const int64_t max_m = *std::max_element(o.ms.begin(), o.ms.end());
  std::vector<Row> rows;
  for (const BenchShape& bs : o.shapes) {
    // Activations: random, both 16-bit dtypes (the baseline is fp16).
    DeviceMem x16, xbf, y, workspace;
    const std::vector<uint16_t> h16 = RandomHalves(false, max_m * bs.k, 11 + bs.k);
    const std::vector<uint16_t> hbf = RandomHalves(true, max_m * bs.k, 13 + bs.k);
    QMM_RETURN_IF_ERROR(x16.Allocate(h16.size() * 2));
    QMM_RETURN_IF_ERROR(xbf.Allocate(hbf.size() * 2));
    QMM_RETURN_IF_ERROR(y.Allocate(max_m * bs.n * 4));
    QMM_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy(x16.get(), h16.data(), h16.size() * 2, cudaMemcpyHostToDevice), "x"));
    QMM_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy(xbf.get(), hbf.data(), hbf.size() * 2, cudaMemcpyHostToDevice), "x"));
    size_t workspace_bytes = 0;

    auto time_scheme = [&](Scheme scheme, DType x_dtype, DType y_dtype, int32_t group_size,
                           std::vector<Row>& out) -> absl::Status {
      const cuda::KernelOps* ops = cuda::FindKernel(scheme);
      if (ops == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(SchemeName(scheme)), " has no CUDA kernel"));
      }
      const WeightShape shape{
          bs.n, bs.k, group_size, scheme == Scheme::kW4A16 && o.w4a16_zero_points,
          scheme == Scheme::kW4A16 && group_size == kW4GroupSize && o.w4a16_act_order};
      QMM_RETURN_IF_ERROR(ValidateShape(scheme, shape));
      const std::vector<uint8_t> packed = RandomPacked(scheme, shape, 7 + bs.n * 31 + bs.k);
      absl::StatusOr<Copies> copies =
          Upload(*ops, PackedWeight{scheme, shape, packed}, min_rotation_bytes);
      if (!copies.ok()) return copies.status();
      for (int64_t m : o.ms) {
        const size_t need = ops->workspace_bytes(shape, m);
        if (need > workspace_bytes) {
          QMM_RETURN_IF_ERROR(workspace.Allocate(need));
          workspace_bytes = need;
        }
        cuda::GemmArgs args;
        args.shape = shape;
        args.x_dtype = x_dtype;
        args.x = x_dtype == DType::kBF16 ? xbf.get() : x16.get();
        args.m = m;
        args.y_dtype = y_dtype;
        args.y = y.get();
        args.workspace = workspace.get();
        args.sync = sync.get();
        args.stream = stream;
        args.cublas = cublas;
        cuda::W8A16Options w8;
        w8.splits = o.w8a16_splits;
        w8.wgmma_groups = o.w8a16_wgmma_groups;
        w8.decode_rows = o.w8a16_decode_rows;
        w8.tile = o.w8a16_tile;
        w8.decode_cluster = o.decode_cluster;
        w8.decode_warps = o.w8a16_decode_warps;
        w8.decode_stream = o.decode_stream;
        cuda::W4A16Options w4;
        w4.splits = o.w4a16_splits;
        w4.wgmma_groups = o.w4a16_wgmma_groups;
        w4.decode_strips = o.w4a16_decode_strips;
        w4.decode_cluster = o.decode_cluster;
        w4.decode_stream = o.decode_stream;
        w4.decode_warps = o.w4a16_decode_warps;
        w4.wgmma_tokens = o.wgmma_tokens;
        const bool tuned8 =
            scheme == Scheme::kW8A16 &&
            (w8.splits != 0 || w8.wgmma_groups != 0 || w8.decode_rows != 0 ||
             w8.decode_cluster != 0 || w8.decode_warps != 0 || w8.decode_stream != 0 || w8.tile);
        const bool tuned4 = scheme == Scheme::kW4A16 &&
                            (w4.splits != 0 || w4.wgmma_groups != 0 || w4.decode_strips != 0 ||
                             w4.decode_cluster != 0 || w4.decode_stream != 0 ||
                             w4.decode_warps != 0 || w4.wgmma_tokens != 0);
        cuda::W2A8Options w2;
        w2.wgmma_groups = o.w2a8_wgmma_groups;
        w2.wgmma_splits = o.w2a8_wgmma_splits;
        w2.decode_units = o.w2a8_decode_units;
        w2.decode_groups = o.w2a8_decode_groups;
        w2.decode_cluster = o.decode_cluster;
        w2.decode_stream = o.decode_stream;
        w2.wgmma_tokens = o.wgmma_tokens;
        const bool tuned2 = scheme == Scheme::kW2A8 &&
                            (w2.wgmma_groups != 0 || w2.wgmma_splits != 0 || w2.decode_units != 0 ||
                             w2.decode_groups != 0 || w2.decode_cluster != 0 ||
                             w2.decode_stream != 0 || w2.wgmma_tokens != 0);
        const int n_copies = static_cast<int>(copies->buffers.size());
        auto launch = [&](int i) {
          args.weight = copies->buffers[i % n_copies].get();
          return tuned8   ? cuda::LaunchW8A16(args, w8)
                 : tuned4 ? cuda::LaunchW4A16(args, w4)
                 : tuned2 ? cuda::LaunchW2A8(args, w2)
                          : ops->launch(args);
        };
        absl::StatusOr<Timing> t = TimeRuns(stream, o.warmup, o.iters, launch);
        if (!t.ok()) return t.status();
        const int batch = n_copies * std::max(1, (o.graph_batch + n_copies - 1) / n_copies);
        absl::StatusOr<double> graph_us = TimeGraph(stream, batch, o.graph_replays, launch);
        if (!graph_us.ok()) return graph_us.status();
        t->graph_us = *graph_us;
        cuda::EnableDependentLaunch(false);
        absl::StatusOr<double> serial_us = TimeGraph(stream, batch, o.graph_replays, launch);
        cuda::EnableDependentLaunch(true);
        if (!serial_us.ok()) return serial_us.status();
        t->graph_serial_us = *serial_us;
        Row row;
        row.scheme = std::string(SchemeName(scheme)) + (shape.zero_points ? "-ZP" : "") +
                     (shape.act_order ? "-ACT" : "");
        row.shape = bs;
        row.group_size = group_size;
        row.m = m;
        row.t = *t;
        row.bytes_read =
            PackedBytes(scheme, shape) + m * bs.k * static_cast<int64_t>(DTypeSize(x_dtype));
        row.copies = n_copies;
        out.push_back(row);
      }
      return absl::OkStatus();
    };

    std::vector<Row> baseline;
    QMM_RETURN_IF_ERROR(time_scheme(Scheme::kFp16, DType::kF16, o.y_dtype, 0, baseline));
    std::map<int64_t, double> cublas_us;
    for (Row& r : baseline) {
      r.scheme = "cuBLAS-FP16";
      cublas_us[r.m] = r.t.graph_us;
    }
    for (Scheme scheme : o.schemes) {
      std::vector<Row> out;
      const int32_t group = scheme == Scheme::kW4A16 ? kW4GroupSize : 0;
      const DType x_dtype = scheme == Scheme::kFp16   ? DType::kF16
                            : scheme == Scheme::kBf16 ? DType::kBF16
                                                      : o.x_dtype;
      QMM_RETURN_IF_ERROR(time_scheme(scheme, x_dtype, o.y_dtype, group, out));
      rows.insert(rows.end(), out.begin(), out.end());
    }
    rows.insert(rows.end(), baseline.begin(), baseline.end());
    for (Row& r : rows) {
      if (r.cublas_us == 0 && r.shape.k == bs.k && r.shape.n == bs.n) r.cublas_us = cublas_us[r.m];
    }
  }

  std::printf("\n%-12s %6s %6s %4s %9s %8s %8s %11s %8s %11s %11s\n", "scheme", "K", "N", "M", "us",
              "TB/s", "%copy", "cuBLAS us", "speedup", "serial us", "single us");
  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) {
    const double tbps = r.bytes_read / (r.t.graph_us * 1e-6) / 1e12;
    const double pct = 100.0 * tbps / *copy_tbps;
    const double speedup = r.cublas_us / r.t.graph_us;
    std::printf("%-12s %6ld %6ld %4ld %9.2f %8.2f %7.1f%% %11.2f %7.2fx %11.2f %11.2f\n",
                r.scheme.c_str(), static_cast<long>(r.shape.k), static_cast<long>(r.shape.n),
                static_cast<long>(r.m), r.t.graph_us, tbps, pct, r.cublas_us, speedup,
                r.t.graph_serial_us, r.t.median_us);
    results.push_back({{"scheme", r.scheme},
                       {"k", r.shape.k},
                       {"n", r.shape.n},
                       {"group_size", r.group_size},
                       {"m", r.m},
                       {"us", r.t.graph_us},
                       {"us_graph_serialized", r.t.graph_serial_us},
                       {"us_single_median", r.t.median_us},
                       {"us_single_min", r.t.min_us},
                       {"bytes_read", r.bytes_read},
                       {"tbps", tbps},
                       {"pct_of_copy", pct},
                       {"cublas_fp16_us", r.cublas_us},
                       {"speedup_vs_cublas_fp16", speedup},
                       {"weight_copies", r.copies}});
  }
  if (!o.json_path.empty()) {
    nlohmann::json root = {{"command", o.command},
                           {"device", prop.name},
                           {"sms", sms},
                           {"l2_bytes", l2_bytes},
                           {"sm_clock_mhz", clock_khz / 1000},
                           {"memory_clock_mhz", mem_clock_khz / 1000},
                           {"copy_ceiling_tbps", *copy_tbps},
                           {"copy_bytes", kCopyBytes},
                           {"x_dtype", std::string(DTypeName(o.x_dtype))},
                           {"y_dtype", std::string(DTypeName(o.y_dtype))},
                           {"warmup", o.warmup},
                           {"iters", o.iters},
                           {"graph_batch", o.graph_batch},
                           {"graph_replays", o.graph_replays},
                           {"rotation_min_bytes", min_rotation_bytes},
                           {"results", results}};
    std::ofstream out(o.json_path);
    out << root.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", o.json_path));
  }
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  return absl::OkStatus();
}

}  // namespace qmm::bench
