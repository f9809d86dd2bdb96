#include "client/file_io.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;

TEST(FileIoTest, WritesReadsAndReadsRanges) {
  const std::string path = testing::TempDir() + "/file_io_test." + std::to_string(getpid());
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(WriteFile(path, bytes).ok());
  absl::StatusOr<std::vector<uint8_t>> all = ReadFile(path);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, bytes);

  absl::StatusOr<InputFile> file = InputFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size(), 1000);
  absl::StatusOr<std::vector<uint8_t>> part = file->ReadAt(990, 10);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, std::vector<uint8_t>(bytes.begin() + 990, bytes.end()));
  EXPECT_TRUE(file->ReadAt(1000, 0).ok());
  const absl::Status past = file->ReadAt(995, 10).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), HasSubstr("cannot read bytes [995, 1005)"));
  EXPECT_FALSE(file->ReadAt(-1, 2).ok());

  // A moved-from file closes nothing twice and the moved-to one still reads.
  InputFile moved = *std::move(file);
  EXPECT_TRUE(moved.ReadAt(0, 1).ok());
  std::remove(path.c_str());
}

TEST(FileIoTest, ErrorsNameThePathAndCarryTheRightCode) {
  const std::string missing = testing::TempDir() + "/file_io_test_missing/none.bin";
  const absl::Status not_found = ReadFile(missing).status();
  EXPECT_EQ(not_found.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(not_found.message(), HasSubstr(missing));
  EXPECT_EQ(WriteFile(missing, {}).code(), absl::StatusCode::kNotFound);
  const absl::Status directory = ReadFile(testing::TempDir()).status();
  EXPECT_EQ(directory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.message(), HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace qmm
