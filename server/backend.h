// The compute backend interface: where weights live and how MatMul runs.
//
// Two implementations: CpuBackend (always built; the default without a GPU) and
// CudaBackend (built when QMM_CUDA_ENABLED, used when a device is present).
//
// Threads: Load/MatMul may be called concurrently from any thread. MatMul takes a
// `worker` index in [0, num_workers()): the server guarantees that at most one call per
// worker index runs at a time, so a backend may keep per-worker resources (a CUDA stream,
// pinned staging buffers) without locking.
#ifndef QMM_SERVER_BACKEND_H_
#define QMM_SERVER_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/activation.h"
#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/layer_kind.h"

namespace qmm {

// A weight converted into the backend's own layout. Immutable once loaded; the backend
// frees its memory in the destructor (which may run on any thread, after every MatMul
// that used it returned).
class BackendWeight {
 public:
  virtual ~BackendWeight() = default;
  virtual Scheme scheme() const = 0;
  virtual const WeightShape& shape() const = 0;
  // Bytes of device (or host, for the CPU backend) memory this weight holds.
  virtual int64_t device_bytes() const = 0;
};

// How long one call spent moving its data between the host and the memory its kernels use
// (the qmm_transfer_duration_seconds histogram): CUDA's copy of x to the device and of y
// back (device time, from events); the CPU backend's conversion of x into its fp32 working
// buffer and of y out of it (wall time; 0 when the data is fp32 and used in place).
// Negative: not measured.
struct TransferTimes {
  int64_t h2d_ns = -1;
  int64_t d2h_ns = -1;
};

// One MatMul: y[m][n] = sum_k x[m][k] * w[n][k]. Host pointers; x is [m, k] of x_dtype,
// y is [m, n] of y_dtype, both row-major and already validated by the caller.
struct MatMulCall {
  const BackendWeight* weight = nullptr;
  DType x_dtype = DType::kF32;
  const void* x = nullptr;
  int64_t m = 0;
  DType y_dtype = DType::kF32;
  void* y = nullptr;
  // When set, receives the call's transfer times (written only when it succeeds).
  TransferTimes* transfer = nullptr;
};

// One request's rows in a MatMulBlocks call: `rows` rows of x ([rows, k], the call's
// x_dtype) and where their results go (y, [rows, n] of y_dtype), both row-major.
struct RowBlock {
  const void* x = nullptr;
  void* y = nullptr;
  int64_t rows = 0;
};

// One MatMul over the rows of several requests, each block's x and y in host memory
// registered with the backend (Backend::RegisterHost), where its device reads and writes
// them in place.
struct BlocksMatMulCall {
  const BackendWeight* weight = nullptr;
  DType x_dtype = DType::kF16;
  DType y_dtype = DType::kF16;
  std::span<const RowBlock> blocks;
  // As MatMulCall::transfer.
  TransferTimes* transfer = nullptr;
};

// A host memory range the backend's device may access directly until this is destroyed.
class HostRegistration {
 public:
  virtual ~HostRegistration() = default;
};

// Host buffers a backend stages its copies through (Backend::StageHost).
struct HostStaging {
  void* x = nullptr;
  void* y = nullptr;
};

// One layer of a model as the backend runs it, already checked by the server (features
// line up, weights fit their role: server/model.h). LoadModel copies the parameters.
struct ModelLayer {
  LayerKind kind = LayerKind::kLinear;
  // kEmbedding: {table}; kLinear: {weight}; kGatedMlp: {gate, up, down}.
  const BackendWeight* weights[3] = {nullptr, nullptr, nullptr};
  std::span<const float> bias = {};               // kLinear: empty or out_features values
  float alpha = 0.0f;                             // kDyT
  std::span<const float> gamma = {};              // kDyT, kRmsNorm (its weight): in_features
  std::span<const float> beta = {};               // kDyT: empty or in_features values
  float epsilon = 0.0f;                           // kRmsNorm
  Activation activation = Activation::kIdentity;  // kActivation
  // kGatedMlp: act in down(act(gate(x)) * up(x)), SiLU for SwiGLU, GELU for GeGLU; its
  // sub-norm, when gamma is set: down(rmsnorm(act(gate(x)) * up(x))), gamma [the gate's N].
  Activation gate_activation = Activation::kSilu;
  int32_t block_start = -1;  // kResidual
  int64_t in_features = 0;   // 0 for an embedding
  int64_t out_features = 0;
};

// A model prepared by the backend (its parameters in the backend's memory, its launch
// plan). The weights its layers use must outlive it; it is destroyed, on any thread,
// after every Forward that used it returned.
class BackendModel {
 public:
  virtual ~BackendModel() = default;
  // Bytes of device (or host) memory the model's own parameters hold.
  virtual int64_t device_bytes() const = 0;
};

// One Forward: y = model(input). Host pointers, already validated by the caller: token
// ids [m], each in range (a model that starts with an embedding), or x [m, in_features]
// of x_dtype; y is [m, out_features] of y_dtype, row-major.
struct ForwardCall {
  const BackendModel* model = nullptr;
  const int32_t* token_ids = nullptr;
  DType x_dtype = DType::kF32;
  const void* x = nullptr;
  int64_t m = 0;
  DType y_dtype = DType::kF32;
  void* y = nullptr;
  // As MatMulCall::transfer.
  TransferTimes* transfer = nullptr;
};

struct BackendOptions {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int device = 0;       // CUDA device ordinal
  int num_workers = 2;  // concurrent MatMul calls (CUDA: one stream each)
  int cpu_threads = 0;  // CPU kernel threads per call; 0 = hardware concurrency
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;    // "cpu" or "cuda"
  virtual std::string device_name() const = 0;  // e.g. "NVIDIA H200" or the CPU model
  virtual int num_workers() const = 0;
  // Device memory the backend could use in all, and what is free now (for the default
  // --memory_limit_bytes).
  virtual int64_t memory_total_bytes() const = 0;
  virtual int64_t memory_free_bytes() const = 0;

  // Shapes this backend's kernels take beyond ValidateShape(); INVALID_ARGUMENT naming
  // the field and the constraint otherwise, or UNIMPLEMENTED for what this backend has no
  // kernel for.
  virtual absl::Status CheckShape(Scheme scheme, const WeightShape& shape) const = 0;

  // Converts a validated packed weight into the backend's layout. RESOURCE_EXHAUSTED
  // when the device cannot hold it; the backend stays usable either way.
  virtual absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight& packed) = 0;

  // Runs one call on `worker`; returns the compute time in nanoseconds (device time on
  // the GPU, wall time of the kernel on the CPU; transfers apart: MatMulCall::transfer).
  // Errors are INTERNAL (a device fault); a sticky device error is reported through
  // healthy().
  virtual absl::StatusOr<int64_t> MatMul(int worker, const MatMulCall& call) = 0;

  // Host buffers of `worker`, of at least x_bytes and y_bytes, that the next MatMul on
  // `worker` may take as its x and y (not Forward, which may stage more than it is
  // given): a backend that copies through staging memory of its own (CUDA's pinned
  // buffers) then skips those copies, so a caller that gathers a batch gathers it there.
  // The worker contract of MatMul applies; they stay valid until the next StageHost, or
  // MatMul on `worker` with more bytes. Null members (the default): the backend has none,
  // and the caller uses memory of its own. RESOURCE_EXHAUSTED when they cannot be
  // allocated.
  virtual absl::StatusOr<HostStaging> StageHost(int worker, size_t x_bytes, size_t y_bytes);

  // Lets the device read and write [data, data + bytes) in place (CUDA: page-locked and
  // mapped), for MatMulBlocks; the range must stay mapped until the registration is
  // destroyed, and then no call may use it. Null (the default): the backend gains nothing
  // from it (the CPU's) or its device cannot; the caller then stages its rows itself.
  // RESOURCE_EXHAUSTED or INTERNAL when the range cannot be registered.
  virtual absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data, size_t bytes);

  // Runs one call over blocks that all lie in ranges this backend registered (the MatMul
  // worker contract; the compute time as MatMul returns it): the device gathers the rows
  // and scatters the results itself, without host copies. Backends whose RegisterHost
  // returns null answer UNIMPLEMENTED.
  virtual absl::StatusOr<int64_t> MatMulBlocks(int worker, const BlocksMatMulCall& call);

  // Prepares a checked chain of layers for Forward. RESOURCE_EXHAUSTED when the device
  // cannot hold its parameters. Backends without models answer UNIMPLEMENTED.
  virtual absl::StatusOr<std::unique_ptr<BackendModel>> LoadModel(
      std::span<const ModelLayer> layers);

  // Runs one Forward on `worker` (the MatMul worker contract) with every intermediate in
  // the backend's memory; returns the compute time in nanoseconds as MatMul does. Errors
  // as MatMul's.
  virtual absl::StatusOr<int64_t> Forward(int worker, const ForwardCall& call);

  // False once the device is unusable (lost context); the server then reports
  // NOT_SERVING and exits non-zero.
  virtual bool healthy() const { return true; }
};

// Picks and creates the backend: kAuto takes CUDA when it was built and a device is
// present, the CPU otherwise. kCuda without a usable device is FAILED_PRECONDITION.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

}  // namespace qmm

#endif  // QMM_SERVER_BACKEND_H_
