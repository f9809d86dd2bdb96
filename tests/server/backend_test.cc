#include "server/backend.h"

#include <gtest/gtest.h>

#include "absl/strings/string_view.h"

namespace qmm {
namespace {

TEST(CreateBackendTest, CpuOnRequest) {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  options.num_workers = 3;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  EXPECT_EQ((*backend)->num_workers(), 3);
}

TEST(CreateBackendTest, AutoGivesAWorkingBackend) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->name() == "cpu" || (*backend)->name() == "cuda");
#ifndef QMM_HAVE_CUDA
  EXPECT_EQ((*backend)->name(), "cpu");
#endif
}

#ifndef QMM_HAVE_CUDA
TEST(CreateBackendTest, CudaWithoutCudaBuildIsFailedPrecondition) {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCuda;
  const absl::Status status = CreateBackend(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("without CUDA"), absl::string_view::npos) << status;
}
#endif

TEST(CreateBackendTest, BadWorkerCountsAreInvalidArgument) {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  options.num_workers = 0;
  EXPECT_EQ(CreateBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.num_workers = 1;
  options.cpu_threads = -1;
  EXPECT_EQ(CreateBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace qmm
