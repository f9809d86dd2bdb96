#include "server/lifecycle.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/string_view.h"
#include "server/cpu_backend.h"

namespace qmm {
namespace {

std::unique_ptr<QmmServer> StartServer(std::unique_ptr<Backend> backend) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  auto server = std::make_unique<QmmServer>(std::move(backend), options);
  EXPECT_TRUE(server->Start().ok());
  return server;
}

std::unique_ptr<Backend> Cpu() {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  return CreateCpuBackend(options);
}

// The signal is sent to this thread only, where it is blocked, so it stays pending until
// sigtimedwait takes it and never reaches a default handler elsewhere in the test.
void SendLater(pthread_t thread, int signal) {
  std::thread([thread, signal] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    pthread_kill(thread, signal);
  }).detach();
}

TEST(LifecycleTest, SigtermDrainsAndReturnsZero) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  std::unique_ptr<QmmServer> server = StartServer(Cpu());
  SendLater(pthread_self(), SIGTERM);
  EXPECT_EQ(ServeUntilSignal(*server, absl::Milliseconds(50)), 0);
}

TEST(LifecycleTest, SigintDrainsAndReturnsZero) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  std::unique_ptr<QmmServer> server = StartServer(Cpu());
  SendLater(pthread_self(), SIGINT);
  EXPECT_EQ(ServeUntilSignal(*server, absl::Milliseconds(50)), 0);
}

// A CPU backend that reports a lost device after a while.
class FailingBackend : public Backend {
 public:
  explicit FailingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  std::string device_name() const override { return inner_->device_name(); }
  int num_workers() const override { return inner_->num_workers(); }
  int64_t memory_total_bytes() const override { return inner_->memory_total_bytes(); }
  int64_t memory_free_bytes() const override { return inner_->memory_free_bytes(); }
  absl::Status CheckShape(Scheme s, const WeightShape& shape) const override {
    return inner_->CheckShape(s, shape);
  }
  absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight& packed) override {
    return inner_->Load(packed);
  }
  absl::StatusOr<int64_t> MatMul(int worker, const MatMulCall& call) override {
    return inner_->MatMul(worker, call);
  }
  bool healthy() const override { return ++polls_ < 3; }

 private:
  std::unique_ptr<Backend> inner_;
  mutable std::atomic<int> polls_{0};
};

TEST(LifecycleTest, UnhealthyBackendReturnsNonZero) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  std::unique_ptr<QmmServer> server = StartServer(std::make_unique<FailingBackend>(Cpu()));
  EXPECT_EQ(ServeUntilSignal(*server, absl::Milliseconds(20)), 1);
}

}  // namespace
}  // namespace qmm
