#include "client/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <memory>

namespace qmm::client_internal {

std::array<uint8_t, 32> Sha256Digest(std::span<const uint8_t> bytes) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  // These calls fail only on allocation failure or a broken OpenSSL build; there is no
  // digest to hand back then.
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest.data(), &length) != 1 || length != digest.size()) {
    std::abort();
  }
  return digest;
}

}  // namespace qmm::client_internal
