#include "client/qmmctl/progress.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm::ctl {
namespace {

std::string Contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, got);
  std::fseek(f, 0, SEEK_END);  // C requires a seek between reading and writing again
  return out;
}

// Output to a file (not a terminal): no redraws, only the final line.
TEST(ProgressTest, WritesOnlyTheFinalLineToAFile) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const int64_t total = int64_t{64} << 20;
  UploadProgress progress = MakeProgressPrinter("w0", f);
  progress(int64_t{1} << 20, total);
  progress(int64_t{2} << 20, total);
  EXPECT_EQ(Contents(f), "");
  progress(total, total);
  const std::string out = Contents(f);
  std::fclose(f);
  EXPECT_THAT(out, ::testing::StartsWith("upload w0: 64.0/64.0 MiB (100%) "));
  EXPECT_THAT(out, ::testing::EndsWith(" MiB/s\n"));
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

}  // namespace
}  // namespace qmm::ctl
