#include "server/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/chain.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/host_blocks.h"
#include "kernels/cuda/kernels.h"
#include "kernels/dtype.h"
#include "server/cuda_model.h"

namespace qmm {
namespace {

constexpr float kF16Max = 65504.0f;
// cuBLAS's recommended workspace on Hopper; given explicitly so that it is allocated once
// per worker, up front, and counted.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Forward pads up to a power of two rows up to here, so that a few CUDA graphs per model
// and worker cover every decode batch size; larger batches run at their own size, where a
// graph saves little next to the kernels.
constexpr int64_t kMaxBucketRows = 64;
// Up to this many rows, a quantized kernel writes y straight into the worker's pinned
// staging buffer (under unified addressing the device writes host memory over PCIe)
// instead of device memory and a copy back. On an H100 (session 80, W4A16 8192 x 8192)
// the kernel and the result of a 1-row launch took 20-21 us of device time that way,
// against 26-30 through device memory (the copy engine's latency is 7-8 us); launches
// of about 22 rows took 53 us against 44: their stores over PCIe cost more than the copy.
constexpr int64_t kMaxDirectRows = 4;

int64_t ForwardRows(int64_t m) {
  if (m > kMaxBucketRows) return m;
  int64_t rows = 1;
  while (rows < m) rows *= 2;
  return rows;
}

// Errors after which the context is unusable: every later call fails the same way.
bool IsSticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorAssert:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorInitializationError:
    case cudaErrorCudartUnloading:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

std::string CudaMessage(cudaError_t err) {
  return absl::StrCat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

// A device or pinned host buffer that only grows; the caller guarantees that no queued
// work still uses it when it grows (each MatMul synchronizes its stream before returning).
class GrowBuffer {
 public:
  enum class Kind { kDevice, kPinnedHost };
  explicit GrowBuffer(Kind kind) : kind_(kind) {}
  ~GrowBuffer() { Free(); }
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;

  cudaError_t Reserve(size_t bytes) {
    if (bytes <= capacity_) return cudaSuccess;
    Free();
    // Half again what is asked, so that slowly rising batch sizes reallocate rarely.
    const size_t want = std::max(bytes, capacity_ + capacity_ / 2);
    cudaError_t err = Allocate(want);
    if (err == cudaErrorMemoryAllocation && want > bytes) {
      cudaGetLastError();
      err = Allocate(bytes);
    }
    return err;
  }
  void* get() const { return ptr_; }
  size_t capacity() const { return capacity_; }

 private:
  cudaError_t Allocate(size_t bytes) {
    const cudaError_t err = kind_ == Kind::kDevice
                                ? cudaMalloc(&ptr_, bytes)
                                : cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault);
    if (err == cudaSuccess) {
      capacity_ = bytes;
    } else {
      ptr_ = nullptr;
    }
    return err;
  }
  void Free() {
    if (ptr_ != nullptr) kind_ == Kind::kDevice ? cudaFree(ptr_) : cudaFreeHost(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
  }

  const Kind kind_;
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Host memory registered with CUDA (RegisterHost) until destroyed.
class CudaHostRegistration : public HostRegistration {
 public:
  explicit CudaHostRegistration(void* data) : data_(data) {}
  ~CudaHostRegistration() override { cudaHostUnregister(data_); }
  CudaHostRegistration(const CudaHostRegistration&) = delete;
  CudaHostRegistration& operator=(const CudaHostRegistration&) = delete;

 private:
  void* const data_;
};

class CudaWeight : public BackendWeight {
 public:
  CudaWeight(const PackedWeight& packed, const cuda::KernelOps* ops, int device, void* ptr,
             int64_t bytes)
      : scheme_(packed.scheme),
        shape_(packed.shape),
        ops_(ops),
        device_(device),
        ptr_(ptr),
        bytes_(bytes) {}
  ~CudaWeight() override {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }

  Scheme scheme() const override { return scheme_; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return bytes_; }
  const cuda::KernelOps& ops() const { return *ops_; }
  const void* data() const { return ptr_; }

 private:
  const Scheme scheme_;
  const WeightShape shape_;
  const cuda::KernelOps* const ops_;
  const int device_;
  void* const ptr_;
  const int64_t bytes_;
};

// What one worker owns; used by one MatMul at a time (the Backend contract).
struct Worker {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // Around each call: copy_in, H2D copy, start, kernels, stop, D2H copy, copy_out.
  cudaEvent_t copy_in = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEvent_t copy_out = nullptr;
  void* cublas_workspace = nullptr;
  void* sync = nullptr;  // GemmArgs::sync of this stream's launches, zeroed once
  GrowBuffer host_x{GrowBuffer::Kind::kPinnedHost};
  GrowBuffer host_y{GrowBuffer::Kind::kPinnedHost};
  GrowBuffer host_blocks{GrowBuffer::Kind::kPinnedHost};  // RunBlocks' table, read by the device
  GrowBuffer wire_x{GrowBuffer::Kind::kDevice};           // x as it came
  GrowBuffer kernel_x{GrowBuffer::Kind::kDevice};         // x in the kernel's dtype
  GrowBuffer kernel_y{GrowBuffer::Kind::kDevice};         // fp32 y when x was scaled
  GrowBuffer y{GrowBuffer::Kind::kDevice};                // y in the caller's dtype
  GrowBuffer workspace{GrowBuffer::Kind::kDevice};
  GrowBuffer arena{GrowBuffer::Kind::kDevice};  // a Forward's intermediates (chain.h)

  ~Worker() {
    if (cublas != nullptr) cuda::Cublas()->destroy(cublas);
    for (cudaEvent_t event : {copy_in, start, stop, copy_out}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
    cudaFree(cublas_workspace);
    cudaFree(sync);
  }
};

// The dtype the kernel of `scheme` gets for activations that arrive as `wire`.
DType KernelXDtype(Scheme scheme, DType wire) {
  if (scheme == Scheme::kFp16) return DType::kF16;
  if (scheme == Scheme::kBf16) return DType::kBF16;
  // W2A8 quantizes its activations to int8 itself: from fp32 as they came, like the CPU.
  if (scheme == Scheme::kW2A8) return wire;
  return wire == DType::kBF16 ? DType::kBF16 : DType::kF16;
}

// max|x| over `count` elements of `dtype` as fp32 (NaN ignored).
float MaxAbs(DType dtype, const void* data, size_t count) {
  float max_abs = 0.0f;
  if (dtype == DType::kF32) {
    const float* v = static_cast<const float*>(data);
    for (size_t i = 0; i < count; ++i) max_abs = std::fmax(max_abs, std::fabs(v[i]));
  } else {
    const uint16_t* v = static_cast<const uint16_t*>(data);
    for (size_t i = 0; i < count; ++i) {
      const float f = dtype == DType::kBF16 ? Bf16ToFloat(v[i]) : HalfToFloat(v[i]);
      max_abs = std::fmax(max_abs, std::fabs(f));
    }
  }
  return max_abs;
}

// Copies `count` elements of `dtype` from src to dst (skipped when they are the same
// buffer) and returns MaxAbs over them.
float CopyWithMaxAbs(DType dtype, const void* src, size_t count, void* dst) {
  if (src != dst) std::memcpy(dst, src, count * DTypeSize(dtype));
  return MaxAbs(dtype, dst, count);
}

// Waits for `event` by polling it. cudaStreamSynchronize may put the thread to sleep
// (blocking sync, or a yield under the driver's scheduling heuristic), and waking it
// costs tens of microseconds per launch, more than a decode kernel runs.
cudaError_t SpinWait(cudaEvent_t event) {
  cudaError_t err;
  bool polled = false;
  while ((err = cudaEventQuery(event)) == cudaErrorNotReady) {
    polled = true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  // "Not ready" is a status, not an error; make sure no launch check after this reads it
  // as one. Every earlier call's error was checked where it was returned.
  if (polled && err == cudaSuccess) cudaGetLastError();
  return err;
}

// The time between two completed events, in nanoseconds.
cudaError_t ElapsedNs(cudaEvent_t from, cudaEvent_t to, int64_t* ns) {
  float ms = 0.0f;
  const cudaError_t err = cudaEventElapsedTime(&ms, from, to);
  *ns = static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6));
  return err;
}

// The power of two that brings max_abs within fp16 range (1 when it already is, or when
// max_abs is infinite: scaling cannot save that).
float RangeScale(float max_abs) {
  if (!(max_abs > kF16Max) || std::isinf(max_abs)) return 1.0f;
  int e = static_cast<int>(std::ceil(std::log2(max_abs / kF16Max)));
  while (std::ldexp(max_abs, -e) > kF16Max) ++e;
  return std::ldexp(1.0f, -e);
}

class CudaBackend : public Backend {
 public:
  CudaBackend(int device, std::string device_name, int num_workers, bool host_pointers)
      : device_(device),
        device_name_(std::move(device_name)),
        workers_(num_workers),
        host_pointers_(host_pointers) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (upload_stream_ != nullptr) cudaStreamDestroy(upload_stream_);
  }

  absl::Status Init() {
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    if (absl::Status s = Check(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking),
                               "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    std::string cublas_error;
    const cuda::CublasApi* cublas = cuda::Cublas(&cublas_error);
    if (cublas == nullptr) return absl::FailedPreconditionError(cublas_error);
    for (Worker& w : workers_) {
      // Non-blocking: uploads and other workers never serialize against these streams.
      if (absl::Status s = Check(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking),
                                 "cudaStreamCreate");
          !s.ok()) {
        return s;
      }
      for (cudaEvent_t* event : {&w.copy_in, &w.start, &w.stop, &w.copy_out}) {
        if (absl::Status s = Check(cudaEventCreate(event), "cudaEventCreate"); !s.ok()) return s;
      }
      if (absl::Status s = Check(cudaMalloc(&w.cublas_workspace, kCublasWorkspaceBytes),
                                 "cudaMalloc (cuBLAS workspace)");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = Check(cudaMalloc(&w.sync, cuda::kSyncBytes), "cudaMalloc (sync)");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = Check(cudaMemset(w.sync, 0, cuda::kSyncBytes), "cudaMemset (sync)");
          !s.ok()) {
        return s;
      }
      // cublasSetStream resets the workspace, so the workspace comes second.
      if (cublas->create(&w.cublas) != CUBLAS_STATUS_SUCCESS ||
          cublas->set_stream(w.cublas, w.stream) != CUBLAS_STATUS_SUCCESS ||
          cublas->set_workspace(w.cublas, w.cublas_workspace, kCublasWorkspaceBytes) !=
              CUBLAS_STATUS_SUCCESS) {
        return absl::InternalError("cannot create a cuBLAS handle");
      }
    }
    return absl::OkStatus();
  }

  std::string_view name() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  int num_workers() const override { return static_cast<int>(workers_.size()); }

  int64_t memory_total_bytes() const override { return MemInfo().second; }
  int64_t memory_free_bytes() const override { return MemInfo().first; }

  absl::Status CheckShape(Scheme scheme, const WeightShape&) const override {
    if (cuda::FindKernel(scheme) == nullptr) {
      return absl::UnimplementedError(absl::StrCat("scheme ", std::string(SchemeName(scheme)),
                                                   " has no CUDA kernel in this build; "
                                                   "serve it with --backend=cpu"));
    }
    // Every kernel takes every shape ValidateShape() accepts (kernels/cuda/gemm_args.h).
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight& packed) override {
    if (absl::Status s = CheckShape(packed.scheme, packed.shape); !s.ok()) return s;
    if (!healthy()) return LostError();
    const cuda::KernelOps* ops = cuda::FindKernel(packed.scheme);
    const std::vector<uint8_t> layout = ops->repack(packed);
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    void* ptr = nullptr;
    if (const cudaError_t err = cudaMalloc(&ptr, layout.size()); err != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky; clear it
      if (err == cudaErrorMemoryAllocation) {
        const auto [free_bytes, total_bytes] = MemInfo();
        return absl::ResourceExhaustedError(
            absl::StrCat("device memory: cannot allocate ", layout.size(), " bytes for the ",
                         std::string(SchemeName(packed.scheme)), " weight (", free_bytes, " of ",
                         total_bytes, " bytes free)"));
      }
      return Check(err, "cudaMalloc");
    }
    cudaError_t err =
        cudaMemcpyAsync(ptr, layout.data(), layout.size(), cudaMemcpyHostToDevice, upload_stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(upload_stream_);
    if (err != cudaSuccess) {
      cudaFree(ptr);
      return Check(err, "weight upload");
    }
    return std::make_unique<CudaWeight>(packed, ops, device_, ptr,
                                        static_cast<int64_t>(layout.size()));
  }

  absl::StatusOr<int64_t> MatMul(int worker, const MatMulCall& call) override {
    return OnWorker(worker, [&](Worker& w) { return Run(w, call); });
  }

  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data,
                                                                 size_t bytes) override {
    // Without it the device would need its own address for every block: not worth it.
    if (!host_pointers_) return nullptr;
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    const cudaError_t err =
        cudaHostRegister(data, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot page-lock ", bytes, " bytes of host memory"));
    }
    if (absl::Status s = Check(err, "cudaHostRegister"); !s.ok()) {
      cudaGetLastError();
      return s;
    }
    return std::make_unique<CudaHostRegistration>(data);
  }

  absl::StatusOr<int64_t> MatMulBlocks(int worker, const BlocksMatMulCall& call) override {
    if (!host_pointers_) return Backend::MatMulBlocks(worker, call);
    return OnWorker(worker, [&](Worker& w) { return RunBlocks(w, call); });
  }

  absl::StatusOr<HostStaging> StageHost(int worker, size_t x_bytes, size_t y_bytes) override {
    absl::StatusOr<Worker*> entered = Enter(worker);
    if (!entered.ok()) return entered.status();
    // No queued work uses these buffers: each call waits for its stream before returning.
    Worker& w = **entered;
    if (absl::Status s = Reserve(w.host_x, x_bytes, "x staging"); !s.ok()) return s;
    if (absl::Status s = Reserve(w.host_y, y_bytes, "y staging"); !s.ok()) return s;
    return HostStaging{.x = w.host_x.get(), .y = w.host_y.get()};
  }

  absl::StatusOr<std::unique_ptr<BackendModel>> LoadModel(
      std::span<const ModelLayer> layers) override {
    if (!healthy()) return LostError();
    std::vector<cuda::ChainLayer> chain;
    chain.reserve(layers.size());
    for (const ModelLayer& l : layers) {
      cuda::ChainLayer c;
      c.kind = l.kind;
      for (int i = 0; i < 3; ++i) {
        if (l.weights[i] == nullptr) continue;
        const auto& w = static_cast<const CudaWeight&>(*l.weights[i]);
        c.weights[i] = {w.scheme(), w.shape(), &w.ops(), w.data()};
      }
      c.bias = l.bias.empty() ? nullptr : l.bias.data();
      c.alpha = l.alpha;
      c.gamma = l.gamma.empty() ? nullptr : l.gamma.data();
      c.beta = l.beta.empty() ? nullptr : l.beta.data();
      c.epsilon = l.epsilon;
      c.activation = l.activation;
      c.gate_activation = l.gate_activation;
      c.block_start = l.block_start;
      c.in_features = l.in_features;
      c.out_features = l.out_features;
      chain.push_back(c);
    }
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    std::unique_ptr<CudaModel> model;
    const cudaError_t err =
        CudaModel::Create(device_, std::move(chain), num_workers(), upload_stream_, &model);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError("device memory: cannot allocate the model's parameters");
    }
    if (absl::Status s = Check(err, "model parameter upload"); !s.ok()) return s;
    return model;
  }

  absl::StatusOr<int64_t> Forward(int worker, const ForwardCall& call) override {
    return OnWorker(worker, [&](Worker& w) { return RunForward(w, worker, call); });
  }

  bool healthy() const override { return healthy_.load(std::memory_order_relaxed); }

 private:
  // `run` on `worker`'s entry (Enter). A failed call first waits for what it queued:
  // nothing may outlive it, since the next call can reallocate the buffers.
  template <typename RunOnWorker>
  absl::StatusOr<int64_t> OnWorker(int worker, RunOnWorker run) {
    absl::StatusOr<Worker*> entered = Enter(worker);
    if (!entered.ok()) return entered.status();
    absl::StatusOr<int64_t> result = run(**entered);
    if (!result.ok()) {
      cudaStreamSynchronize((*entered)->stream);
      cudaGetLastError();
    }
    return result;
  }

  // A worker's entry: its index in range, the device healthy and current on this thread.
  absl::StatusOr<Worker*> Enter(int worker) {
    if (worker < 0 || worker >= num_workers()) {
      return absl::InternalError(
          absl::StrCat("worker ", worker, " is out of range [0, ", num_workers(), ")"));
    }
    if (!healthy()) return LostError();
    if (absl::Status s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    return &workers_[worker];
  }

  // Stages the input (padded with zero rows to ForwardRows(m), so that graphs repeat),
  // runs the chain and copies the first m result rows back. The intermediates are fp16,
  // or bf16 for bf16 input, bf16 tables and fp32 input beyond the fp16 range.
  absl::StatusOr<int64_t> RunForward(Worker& w, int worker, const ForwardCall& call) {
    const auto& model = static_cast<const CudaModel&>(*call.model);
    const std::vector<cuda::ChainLayer>& layers = model.layers();
    const bool tokens = layers.front().kind == LayerKind::kEmbedding;
    const int64_t m = call.m;
    const int64_t rows = ForwardRows(m);
    const int64_t out = layers.back().out_features;

    DType act = DType::kF16;
    size_t in_bytes = 0, pad_from = 0;
    if (tokens) {
      in_bytes = static_cast<size_t>(rows) * sizeof(int32_t);
      pad_from = static_cast<size_t>(m) * sizeof(int32_t);
      if (absl::Status s = Reserve(w.host_x, in_bytes, "token staging"); !s.ok()) return s;
      std::memcpy(w.host_x.get(), call.token_ids, pad_from);
      if (layers.front().weights[0].scheme == Scheme::kBf16) act = DType::kBF16;
    } else {
      const size_t row_bytes = layers.front().in_features * DTypeSize(call.x_dtype);
      in_bytes = rows * row_bytes;
      pad_from = m * row_bytes;
      if (absl::Status s = Reserve(w.host_x, in_bytes, "x staging"); !s.ok()) return s;
      if (call.x_dtype == DType::kF32) {
        const float max_abs =
            CopyWithMaxAbs(DType::kF32, call.x, pad_from / sizeof(float), w.host_x.get());
        if (max_abs > kF16Max) act = DType::kBF16;
      } else {
        std::memcpy(w.host_x.get(), call.x, pad_from);
        if (call.x_dtype == DType::kBF16) act = DType::kBF16;
      }
    }
    // Zero rows: valid token ids and finite activations, whose results are dropped.
    std::memset(static_cast<char*>(w.host_x.get()) + pad_from, 0, in_bytes - pad_from);
    if (absl::Status s = Reserve(w.wire_x, in_bytes, "input"); !s.ok()) return s;
    // Every buffer before the first copy, so that the events time the copies alone.
    const size_t y_bytes = static_cast<size_t>(rows * out) * DTypeSize(call.y_dtype);
    if (absl::Status s = Reserve(w.y, y_bytes, "y"); !s.ok()) return s;
    if (absl::Status s = Reserve(w.arena, model.plan().ArenaBytes(rows), "activation arena");
        !s.ok()) {
      return s;
    }
    const size_t result_bytes = static_cast<size_t>(m * out) * DTypeSize(call.y_dtype);
    if (absl::Status s = Reserve(w.host_y, result_bytes, "y staging"); !s.ok()) return s;
    if (absl::Status s = Check(cudaEventRecord(w.copy_in, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cudaMemcpyAsync(w.wire_x.get(), w.host_x.get(), in_bytes,
                                               cudaMemcpyHostToDevice, w.stream),
                               "input upload");
        !s.ok()) {
      return s;
    }

    cuda::ChainRun run;
    run.ids = tokens ? static_cast<const int32_t*>(w.wire_x.get()) : nullptr;
    run.x_dtype = call.x_dtype;
    run.x = tokens ? nullptr : w.wire_x.get();
    run.m = rows;
    run.act_dtype = act;
    run.y_dtype = call.y_dtype;
    run.y = w.y.get();
    run.arena = w.arena.get();
    run.sync = w.sync;
    run.stream = w.stream;
    run.cublas = w.cublas;
    if (absl::Status s = Check(model.Run(worker, run, w.start), "model forward"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cudaEventRecord(w.stop, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cudaMemcpyAsync(w.host_y.get(), w.y.get(), result_bytes,
                                               cudaMemcpyDeviceToHost, w.stream),
                               "y download");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Finish(w, "Forward"); !s.ok()) return s;
    std::memcpy(call.y, w.host_y.get(), result_bytes);
    return Times(w, call.transfer);
  }

  absl::StatusOr<int64_t> Run(Worker& w, const MatMulCall& call) {
    const auto& weight = static_cast<const CudaWeight&>(*call.weight);
    const WeightShape& shape = weight.shape();
    const int64_t m = call.m;
    const size_t x_count = static_cast<size_t>(m * shape.k);
    const size_t y_count = static_cast<size_t>(m * shape.n);
    const DType kernel_x_dtype = KernelXDtype(weight.scheme(), call.x_dtype);

    // Stage x (unless the caller gathered it in host_x: StageHost); measure its range only
    // where fp16 might not hold it.
    const size_t wire_x_bytes = x_count * DTypeSize(call.x_dtype);
    const bool staged_x = call.x == w.host_x.get();
    if (absl::Status s = Reserve(w.host_x, wire_x_bytes, "x staging"); !s.ok()) return s;
    if (staged_x && call.x != w.host_x.get()) {
      return absl::InternalError("MatMul: x staged by StageHost was smaller than the call");
    }
    float scale = 1.0f;
    if (kernel_x_dtype == DType::kF16 && call.x_dtype != DType::kF16) {
      scale = RangeScale(CopyWithMaxAbs(call.x_dtype, call.x, x_count, w.host_x.get()));
    } else if (!staged_x) {
      std::memcpy(w.host_x.get(), call.x, wire_x_bytes);
    }
    if (absl::Status s = Reserve(w.wire_x, wire_x_bytes, "x"); !s.ok()) return s;
    // Every host buffer before the first copy: the events around the copies then time
    // the copies, not a host-side allocation between them.
    const size_t y_bytes = y_count * DTypeSize(call.y_dtype);
    const bool staged_y = call.y == w.host_y.get();
    if (absl::Status s = Reserve(w.host_y, y_bytes, "y staging"); !s.ok()) return s;
    if (staged_y && call.y != w.host_y.get()) {
      return absl::InternalError("MatMul: y staged by StageHost was smaller than the call");
    }
    if (absl::Status s = Check(cudaEventRecord(w.copy_in, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cudaMemcpyAsync(w.wire_x.get(), w.host_x.get(), wire_x_bytes,
                                               cudaMemcpyHostToDevice, w.stream),
                               "x upload");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<bool> direct_y =
        Compute(w, weight, call.x_dtype, m, call.y_dtype, scale, /*host_y=*/true);
    if (!direct_y.ok()) return direct_y.status();
    if (!*direct_y) {
      if (absl::Status s = Check(
              cudaMemcpyAsync(w.host_y.get(), w.y.get(), y_bytes, cudaMemcpyDeviceToHost, w.stream),
              "y download");
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Finish(w, "MatMul"); !s.ok()) return s;
    if (call.y != w.host_y.get()) std::memcpy(call.y, w.host_y.get(), y_bytes);
    return Times(w, call.transfer);
  }

  // MatMulBlocks' call: the device gathers the blocks' rows into wire_x and scatters the
  // results from y, through a table of the blocks in host_blocks (read by the device).
  absl::StatusOr<int64_t> RunBlocks(Worker& w, const BlocksMatMulCall& call) {
    const auto& weight = static_cast<const CudaWeight&>(*call.weight);
    const WeightShape& shape = weight.shape();
    const int count = static_cast<int>(call.blocks.size());
    const int64_t x_row_bytes = shape.k * static_cast<int64_t>(DTypeSize(call.x_dtype));
    const int64_t y_row_bytes = shape.n * static_cast<int64_t>(DTypeSize(call.y_dtype));
    if (absl::Status s = Reserve(w.host_blocks, 2 * count * sizeof(cuda::HostBlock), "block table");
        !s.ok()) {
      return s;
    }
    // Gathers first, then scatters; the rows of block i start where those before end.
    auto* table = static_cast<cuda::HostBlock*>(w.host_blocks.get());
    int64_t m = 0, max_x = 0, max_y = 0;
    float max_abs = 0.0f;
    const bool measure =
        KernelXDtype(weight.scheme(), call.x_dtype) == DType::kF16 && call.x_dtype != DType::kF16;
    for (int i = 0; i < count; ++i) {
      const RowBlock& b = call.blocks[i];
      table[i] = {reinterpret_cast<uint64_t>(b.x), m * x_row_bytes, b.rows * x_row_bytes};
      table[count + i] = {reinterpret_cast<uint64_t>(b.y), m * y_row_bytes, b.rows * y_row_bytes};
      max_x = std::max(max_x, table[i].bytes);
      max_y = std::max(max_y, table[count + i].bytes);
      if (measure) {
        max_abs =
            std::fmax(max_abs, MaxAbs(call.x_dtype, b.x, static_cast<size_t>(b.rows * shape.k)));
      }
      m += b.rows;
    }
    if (absl::Status s = Reserve(w.wire_x, static_cast<size_t>(m * x_row_bytes), "x"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cudaEventRecord(w.copy_in, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    if (absl::Status s = Check(cuda::LaunchBlockCopy(cuda::BlockCopy::kGather, table, count, max_x,
                                                     w.wire_x.get(), w.stream),
                               "x gather");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<bool> direct_y =
        Compute(w, weight, call.x_dtype, m, call.y_dtype, RangeScale(max_abs), /*host_y=*/false);
    if (!direct_y.ok()) return direct_y.status();
    if (absl::Status s = Check(cuda::LaunchBlockCopy(cuda::BlockCopy::kScatter, table + count,
                                                     count, max_y, w.y.get(), w.stream),
                               "y scatter");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Finish(w, "MatMul"); !s.ok()) return s;
    return Times(w, call.transfer);
  }

  // After x's upload into wire_x: records start, converts x to the kernel's dtype when
  // it differs or needs `scale`, runs the kernel and records stop. The result lands in y,
  // or, when `host_y` allows it and the kernel writes host memory well, straight in host_y
  // (returns true).
  absl::StatusOr<bool> Compute(Worker& w, const CudaWeight& weight, DType x_dtype, int64_t m,
                               DType y_dtype, float scale, bool host_y) {
    const WeightShape& shape = weight.shape();
    const size_t x_count = static_cast<size_t>(m * shape.k);
    const size_t y_count = static_cast<size_t>(m * shape.n);
    const size_t y_bytes = y_count * DTypeSize(y_dtype);
    const DType kernel_x_dtype = KernelXDtype(weight.scheme(), x_dtype);
    if (absl::Status s = Check(cudaEventRecord(w.start, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }

    const void* kernel_x = w.wire_x.get();
    if (kernel_x_dtype != x_dtype || scale != 1.0f) {
      if (absl::Status s = Reserve(w.kernel_x, x_count * DTypeSize(kernel_x_dtype), "x"); !s.ok()) {
        return s;
      }
      if (absl::Status s = Check(cuda::LaunchConvert(x_dtype, w.wire_x.get(), kernel_x_dtype,
                                                     w.kernel_x.get(), x_count, scale, w.stream),
                                 "activation conversion");
          !s.ok()) {
        return s;
      }
      kernel_x = w.kernel_x.get();
    }

    if (absl::Status s = Reserve(w.y, y_bytes, "y"); !s.ok()) return s;
    const bool rescale = scale != 1.0f;
    if (rescale) {
      if (absl::Status s = Reserve(w.kernel_y, y_count * sizeof(float), "y"); !s.ok()) return s;
    }
    const bool direct_y = host_y && !rescale && m <= kMaxDirectRows &&
                          weight.scheme() != Scheme::kFp16 && weight.scheme() != Scheme::kBf16;
    const cuda::KernelOps& ops = weight.ops();
    const size_t workspace_bytes = ops.workspace_bytes(shape, m);
    if (absl::Status s = Reserve(w.workspace, workspace_bytes, "kernel workspace"); !s.ok()) {
      return s;
    }

    cuda::GemmArgs args;
    args.weight = weight.data();
    args.shape = shape;
    args.x_dtype = kernel_x_dtype;
    args.x = kernel_x;
    args.m = m;
    args.y_dtype = rescale ? DType::kF32 : y_dtype;
    args.y = rescale ? w.kernel_y.get() : direct_y ? w.host_y.get() : w.y.get();
    args.workspace = workspace_bytes > 0 ? w.workspace.get() : nullptr;
    args.sync = w.sync;
    args.stream = w.stream;
    args.cublas = w.cublas;
    if (absl::Status s = Check(ops.launch(args),
                               absl::StrCat(std::string(SchemeName(weight.scheme())), " kernel"));
        !s.ok()) {
      return s;
    }
    if (rescale) {
      if (absl::Status s = Check(cuda::LaunchConvert(DType::kF32, w.kernel_y.get(), y_dtype,
                                                     w.y.get(), y_count, 1.0f / scale, w.stream),
                                 "result conversion");
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Check(cudaEventRecord(w.stop, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    return direct_y;
  }

  // Records copy_out after everything queued on the worker's stream and waits for it.
  absl::Status Finish(Worker& w, absl::string_view what) {
    if (absl::Status s = Check(cudaEventRecord(w.copy_out, w.stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    return Check(SpinWait(w.copy_out), what);
  }

  // The compute time of the finished call, and its transfer times into `transfer`.
  absl::StatusOr<int64_t> Times(Worker& w, TransferTimes* transfer) {
    int64_t compute_ns = 0;
    if (absl::Status s = Check(ElapsedNs(w.start, w.stop, &compute_ns), "cudaEventElapsedTime");
        !s.ok()) {
      return s;
    }
    if (transfer != nullptr) {
      TransferTimes t;
      if (absl::Status s = Check(ElapsedNs(w.copy_in, w.start, &t.h2d_ns), "cudaEventElapsedTime");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = Check(ElapsedNs(w.stop, w.copy_out, &t.d2h_ns), "cudaEventElapsedTime");
          !s.ok()) {
        return s;
      }
      *transfer = t;
    }
    return compute_ns;
  }

  absl::Status Reserve(GrowBuffer& buffer, size_t bytes, absl::string_view what) {
    const cudaError_t err = buffer.Reserve(bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes for the ", what, " buffer"));
    }
    return Check(err, absl::StrCat(what, " buffer"));
  }

  // OK for cudaSuccess; otherwise INTERNAL naming `what`, and a sticky error marks the
  // backend unhealthy.
  absl::Status Check(cudaError_t err, absl::string_view what) const {
    if (err == cudaSuccess) return absl::OkStatus();
    if (IsSticky(err)) healthy_.store(false, std::memory_order_relaxed);
    return absl::InternalError(
        absl::StrCat(what, " failed on CUDA device ", device_, ": ", CudaMessage(err)));
  }

  absl::Status LostError() const {
    return absl::InternalError(
        absl::StrCat("CUDA device ", device_, " is unusable after an earlier device fault"));
  }

  // (free, total) bytes of the device; zeros when the driver cannot say.
  std::pair<int64_t, int64_t> MemInfo() const {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(device_) != cudaSuccess ||
        cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      cudaGetLastError();
      return {0, 0};
    }
    return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
  }

  const int device_;
  const std::string device_name_;
  std::vector<Worker> workers_;
  // The device addresses registered host memory by its host pointers
  // (cudaDevAttrCanUseHostPointerForRegisteredMem): what RegisterHost needs.
  const bool host_pointers_;
  cudaStream_t upload_stream_ = nullptr;
  mutable std::atomic<bool> healthy_{true};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options) {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device is usable: ",
                     err != cudaSuccess ? CudaMessage(err) : std::string("none found")));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("device = ", options.device,
                                                      " is out of range: this machine has ", count,
                                                      " CUDA device", count == 1 ? "" : "s"));
  }
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers = ", options.num_workers, " must be at least 1"));
  }
  cudaDeviceProp prop{};
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, options.device); err != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cannot read CUDA device ", options.device, ": ", CudaMessage(err)));
  }
  int host_pointers = 0;
  if (cudaDeviceGetAttribute(&host_pointers, cudaDevAttrCanUseHostPointerForRegisteredMem,
                             options.device) != cudaSuccess) {
    cudaGetLastError();
    host_pointers = 0;
  }
  auto backend = std::make_unique<CudaBackend>(options.device, prop.name, options.num_workers,
                                               host_pointers != 0);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return backend;
}

}  // namespace qmm
