#include "server/sha256.h"

#include <cstdlib>

namespace qmm {

// EVP only fails on allocation failure or a broken OpenSSL build; neither is something a
// request can cause or recover from.
Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
}

void Sha256::Update(absl::string_view data) {
  if (EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) != 1) std::abort();
}

Sha256::Digest Sha256::Finish() {
  Digest digest;
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &size) != 1 || size != digest.size()) {
    std::abort();
  }
  return digest;
}

}  // namespace qmm
