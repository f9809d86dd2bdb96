#include "server/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace qmm {
namespace {

std::string Hex(const Sha256::Digest& d) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d.data()), 32));
}

// FIPS 180-2 test vectors.
TEST(Sha256Test, KnownVectors) {
  Sha256 empty;
  EXPECT_EQ(Hex(empty.Finish()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.Update("abc");
  EXPECT_EQ(Hex(abc.Finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 31 + 7));
  Sha256 one;
  one.Update(data);
  Sha256 parts;
  for (size_t offset = 0; offset < data.size(); offset += 4099) {
    parts.Update(absl::string_view(data).substr(offset, 4099));
  }
  EXPECT_EQ(one.Finish(), parts.Finish());
}

}  // namespace
}  // namespace qmm
