// SHA-256 of a byte range (OpenSSL EVP), the digest an upload's header carries.
#ifndef QMM_CLIENT_SHA256_H_
#define QMM_CLIENT_SHA256_H_

#include <array>
#include <cstdint>
#include <span>

namespace qmm::client_internal {

std::array<uint8_t, 32> Sha256Digest(std::span<const uint8_t> bytes);

}  // namespace qmm::client_internal

#endif  // QMM_CLIENT_SHA256_H_
