// A test Backend that forwards to a real one, records every MatMul and Forward call
// (a Forward as a call with no weight), and can hold calls at a gate until the test
// opens it: the way batching tests make "a launch is
// running while these requests arrive" happen deterministically.
//
// With RegistersHost(true) it also plays a device that reads registered host memory:
// RegisterHost keeps a list of the ranges, and MatMulBlocks, after checking that every
// block lies in one, gathers the rows, runs the inner MatMul and scatters the results.
//
// Thread-safe; MatMul is called from the batcher's workers.
#ifndef QMM_TESTS_SERVER_GATED_BACKEND_H_
#define QMM_TESTS_SERVER_GATED_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend.h"

namespace qmm::testing {

class GatedBackend : public Backend {
 public:
  struct Call {
    const BackendWeight* weight = nullptr;
    DType x_dtype = DType::kF32;
    DType y_dtype = DType::kF32;
    int64_t m = 0;
    bool blocks = false;  // a MatMulBlocks call
  };

  explicit GatedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // From now on, calls for which `holds` is true (every call when it is empty; every
  // Forward only then) wait at the gate, after being recorded, until Open().
  void Close(std::function<bool(const MatMulCall&)> holds = nullptr);
  void Open();
  // Waits until `count` calls have started in all; false after `timeout`.
  bool WaitForCalls(int count, absl::Duration timeout = absl::Seconds(30));
  std::vector<Call> calls() const;
  // The most calls that ran at once.
  int max_concurrent() const;
  // Whether RegisterHost registers from now on (it returns null otherwise, as the CPU's).
  void RegistersHost(bool on);
  // Ranges registered and not yet released.
  int registrations() const;

  std::string_view name() const override { return inner_->name(); }
  std::string device_name() const override { return inner_->device_name(); }
  int num_workers() const override { return inner_->num_workers(); }
  int64_t memory_total_bytes() const override { return inner_->memory_total_bytes(); }
  int64_t memory_free_bytes() const override { return inner_->memory_free_bytes(); }
  absl::Status CheckShape(Scheme scheme, const WeightShape& shape) const override {
    return inner_->CheckShape(scheme, shape);
  }
  absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight& packed) override {
    return inner_->Load(packed);
  }
  absl::StatusOr<int64_t> MatMul(int worker, const MatMulCall& call) override;
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data, size_t bytes) override;
  absl::StatusOr<int64_t> MatMulBlocks(int worker, const BlocksMatMulCall& call) override;
  absl::StatusOr<std::unique_ptr<BackendModel>> LoadModel(
      std::span<const ModelLayer> layers) override {
    return inner_->LoadModel(layers);
  }
  absl::StatusOr<int64_t> Forward(int worker, const ForwardCall& call) override;
  bool healthy() const override { return inner_->healthy(); }

 private:
  class Registration;
  // Whether a MatMul call waits at the gate.
  bool Held(const MatMulCall& call) const;
  // Records the call and waits at the gate when `held`.
  void Enter(const Call& call, bool held);
  void Leave();
  // Whether [p, p + bytes) lies in a registered range.
  bool Registered(const void* p, size_t bytes) const;

  const std::unique_ptr<Backend> inner_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<bool(const MatMulCall&)> holds_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int max_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool registers_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<const uint8_t*, size_t>> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace qmm::testing

#endif  // QMM_TESTS_SERVER_GATED_BACKEND_H_
