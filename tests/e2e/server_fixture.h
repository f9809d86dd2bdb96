// A gtest fixture for the end-to-end tests: a real qmm-server on 127.0.0.1:0 for each
// test, stopped with SIGTERM at the end (which must drain and exit 0), and the real
// qmmctl pointed at it. The including target defines QMM_SERVER_PATH and QMMCTL_PATH.
#ifndef QMM_TESTS_E2E_SERVER_FIXTURE_H_
#define QMM_TESTS_E2E_SERVER_FIXTURE_H_

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/subprocess.h"

namespace qmm::e2e {

class ServerFixture : public ::testing::Test {
 protected:
  // The server's flags; tests that look at /metrics turn it on.
  virtual std::vector<std::string> ServerFlags() const {
    return {"--listen=127.0.0.1:0", "--metrics_listen=", "--backend=auto"};
  }

  void SetUp() override {
    scratch_ = ::testing::TempDir();
    absl::StatusOr<ServerProcess> server =
        ServerProcess::Start(QMM_SERVER_PATH, ServerFlags(), scratch_, absl::Seconds(60));
    ASSERT_TRUE(server.ok()) << server.status();
    server_.emplace(*std::move(server));
  }

  // Every test ends with a graceful stop: SIGTERM drains and exits 0.
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
    if (!server_) return;
    absl::StatusOr<int> code = server_->Stop(SIGTERM, absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << server_->Log();
    EXPECT_EQ(*code, 0) << server_->Log();
  }

  RunResult Qmmctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--server=" + server_->address());
    absl::StatusOr<RunResult> result = RunProcess(QMMCTL_PATH, args, scratch_);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : RunResult{};
  }

  // Runs qmmctl and expects exit code 0, printing its output otherwise.
  std::string Ok(std::vector<std::string> args) {
    const std::string command = absl::StrJoin(args, " ");
    RunResult r = Qmmctl(std::move(args));
    EXPECT_EQ(r.exit_code, 0) << "qmmctl " << command << "\n"
                              << r.output << "\nserver log:\n"
                              << server_->Log();
    return r.output;
  }

  // A scratch file name, removed after the test.
  std::string Path(std::string_view name) {
    written_.push_back(absl::StrCat(scratch_, "/e2e_", getpid(), "_", std::string(name)));
    return written_.back();
  }

  std::string scratch_;
  std::optional<ServerProcess> server_;
  std::vector<std::string> written_;
};

}  // namespace qmm::e2e

#endif  // QMM_TESTS_E2E_SERVER_FIXTURE_H_
