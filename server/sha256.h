// Incremental SHA-256 (OpenSSL EVP), for checking upload payloads as they arrive.
#ifndef QMM_SERVER_SHA256_H_
#define QMM_SERVER_SHA256_H_

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"

namespace qmm {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // The digest of everything passed to Update(); call once.
  Digest Finish();

 private:
  struct CtxFree {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx_;
};

}  // namespace qmm

#endif  // QMM_SERVER_SHA256_H_
