// Unix domain socket listen addresses: their parsing, and the check that keeps a second
// server from taking over a socket that a running one listens on (gRPC would unlink it).
#include "server/unix_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace qmm {
namespace {

TEST(UnixSocketPathTest, BothFormsOfTheAddressAndNothingElse) {
  EXPECT_EQ(UnixSocketPath("unix:/run/qmm/qmm.sock"), "/run/qmm/qmm.sock");
  EXPECT_EQ(UnixSocketPath("unix:qmm.sock"), "qmm.sock");
  EXPECT_EQ(UnixSocketPath("unix:///run/qmm.sock"), "/run/qmm.sock");
  // An authority, or nothing: no usable path, which the check refuses.
  EXPECT_EQ(UnixSocketPath("unix://host/qmm.sock"), "");
  EXPECT_EQ(UnixSocketPath("unix:"), "");
  EXPECT_EQ(UnixSocketPath("127.0.0.1:50051"), std::nullopt);
  EXPECT_EQ(UnixSocketPath("[::1]:0"), std::nullopt);
  EXPECT_EQ(UnixSocketPath("unix-abstract:qmm"), std::nullopt);
  EXPECT_EQ(UnixSocketPath("localhost:50051"), std::nullopt);
}

class CheckUnixSocketFreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/unix_socket_test_", getpid(), ".sock");
    std::remove(path_.c_str());
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    std::remove(path_.c_str());
  }

  // A socket bound at path_, listening or not.
  void Bind(bool listening) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(path_.size(), sizeof(address.sun_path));
    std::memcpy(address.sun_path, path_.data(), path_.size());
    ASSERT_EQ(bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
        << std::strerror(errno);
    if (listening) {
      ASSERT_EQ(listen(fd_, 1), 0);
    }
  }

  std::string path_;
  int fd_ = -1;
};

TEST_F(CheckUnixSocketFreeTest, AFreePathIsFree) { EXPECT_TRUE(CheckUnixSocketFree(path_).ok()); }

TEST_F(CheckUnixSocketFreeTest, ASocketSomeoneListensOnIsUnavailable) {
  Bind(/*listening=*/true);
  const absl::Status status = CheckUnixSocketFree(path_);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("unix:" + path_), std::string::npos) << status;
  EXPECT_NE(status.message().find("another server"), std::string::npos) << status;
}

TEST_F(CheckUnixSocketFreeTest, AStaleSocketMayBeReplaced) {
  Bind(/*listening=*/false);  // bound, never listening: a connection is refused
  EXPECT_TRUE(CheckUnixSocketFree(path_).ok());
  close(fd_);
  fd_ = -1;  // closed and left behind, as by a server that was killed
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(CheckUnixSocketFree(path_).ok());
}

TEST_F(CheckUnixSocketFreeTest, AFileThatIsNoSocketIsLeftAlone) {
  std::ofstream(path_) << "data";
  const absl::Status status = CheckUnixSocketFree(path_);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("not a socket"), std::string::npos) << status;
  std::ifstream in(path_);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "data");
}

TEST_F(CheckUnixSocketFreeTest, PathsASocketAddressCannotHoldAreInvalid) {
  for (const std::string& path : {std::string(), "/tmp/" + std::string(103, 'x')}) {
    const absl::Status status = CheckUnixSocketFree(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path.size();
    EXPECT_NE(status.message().find("1 to 107 bytes"), std::string::npos) << status;
  }
  EXPECT_TRUE(CheckUnixSocketFree("/tmp/" + std::string(102, 'y')).ok());  // 107 bytes
}

}  // namespace
}  // namespace qmm
