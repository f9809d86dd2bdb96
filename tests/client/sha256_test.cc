#include "client/sha256.h"

#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace qmm::client_internal {
namespace {

std::string Hex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::array<uint8_t, 32> Digest(std::string_view s) {
  return Sha256Digest({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

// FIPS 180-2 test vectors.
TEST(Sha256Test, MatchesKnownVectors) {
  EXPECT_EQ(Hex(Digest("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Digest("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(Hex(Digest(million)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace qmm::client_internal
