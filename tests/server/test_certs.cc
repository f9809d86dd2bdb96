#include "tests/server/test_certs.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"

namespace qmm::testing {
namespace {

// Test code: a failed OpenSSL call is a broken test machine, not a case to handle.
void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "test_certs: %s failed\n", what);
    std::abort();
  }
}

struct Deleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  void operator()(X509* x) const { X509_free(x); }
  void operator()(BIO* b) const { BIO_free(b); }
};
template <typename T>
using Owned = std::unique_ptr<T, Deleter>;

template <typename T, typename Write>
std::string ToPem(T* object, Write write) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  Check(write(bio.get(), object) == 1, "PEM_write");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

template <typename T, typename Read>
Owned<T> FromPem(const std::string& pem, Read read) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Owned<T> object(read(bio.get(), nullptr, nullptr, nullptr));
  Check(object != nullptr, "PEM_read");
  return object;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  Check(ext != nullptr, "X509V3_EXT_conf_nid");
  Check(X509_add_ext(cert, ext, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(ext);
}

// A certificate for `name` and a fresh key, signed by (issuer, issuer_key), or by its own
// key when issuer is null.
// `san`: the subjectAltName of a leaf certificate, in OpenSSL's configuration syntax.
Pem Make(const std::string& name, X509* issuer, EVP_PKEY* issuer_key, absl::Duration not_before,
         absl::Duration not_after, bool ca, const std::string& san = "") {
  static std::atomic<long> serial{1};
  Owned<EVP_PKEY> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  Check(key != nullptr, "EVP_PKEY_Q_keygen");
  Owned<X509> cert(X509_new());
  Check(X509_set_version(cert.get(), 2) == 1, "X509_set_version");
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), absl::ToInt64Seconds(not_before));
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(not_after));
  Check(X509_set_pubkey(cert.get(), key.get()) == 1, "X509_set_pubkey");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  Check(X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) == 1, "issuer");
  if (ca) {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert.get(), signer, NID_subject_alt_name, san.c_str());
    AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  Check(X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key.get(), EVP_sha256()) > 0,
        "X509_sign");
  return {.cert = ToPem(cert.get(), PEM_write_bio_X509),
          .key = ToPem(key.get(), [](BIO* bio, EVP_PKEY* k) {
            return PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr);
          })};
}

// A leaf certificate signed by `ca`.
Pem SignedBy(const Pem& ca, const std::string& name, absl::Duration not_before,
             absl::Duration not_after, const std::string& san) {
  Owned<X509> issuer = FromPem<X509>(ca.cert, PEM_read_bio_X509);
  Owned<EVP_PKEY> issuer_key = FromPem<EVP_PKEY>(ca.key, PEM_read_bio_PrivateKey);
  return Make(name, issuer.get(), issuer_key.get(), not_before, not_after, /*ca=*/false, san);
}

}  // namespace

Pem MakeCa(const std::string& name) {
  return Make(name, nullptr, nullptr, absl::Hours(-1), absl::Hours(24), /*ca=*/true);
}

Pem MakeCert(const Pem& ca, const std::string& name, absl::Duration not_before,
             absl::Duration not_after) {
  return SignedBy(ca, name, not_before, not_after, "IP:127.0.0.1,DNS:localhost");
}

Pem MakeClientCert(const Pem& ca, const std::string& dns_name) {
  return SignedBy(ca, dns_name, absl::Hours(-1), absl::Hours(24), "DNS:" + dns_name);
}

std::shared_ptr<grpc::Channel> TlsChannel(int port, const std::optional<std::string>& ca,
                                          const std::optional<Pem>& identity,
                                          const std::string& server_name) {
  grpc::ChannelArguments args;
  // So that one case's handshake is not reused by another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (ca) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *ca;
    if (identity) {
      ssl.pem_cert_chain = identity->cert;
      ssl.pem_private_key = identity->key;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  }
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), credentials, args);
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  static std::atomic<int> counter{0};
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/qmm_", getpid(), "_", counter++, "_", name);
  std::ofstream out(path, std::ios::binary);
  out << text;
  Check(out.good(), "write");
  return path;
}

PemFiles WriteTempPem(const Pem& pem) {
  return {.cert = WriteTempFile("cert.pem", pem.cert), .key = WriteTempFile("key.pem", pem.key)};
}

}  // namespace qmm::testing
