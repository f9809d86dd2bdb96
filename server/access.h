// Who may change what the server holds. Under mutual TLS, the calls that add or remove
// weights and models (UploadWeight, DeleteWeight, CreateModel, DeleteModel) can be kept to
// operators: clients whose certificate carries one of the admin names, as a subject
// alternative name (DNS, URI...) or as its common name. Every other call (MatMul, Forward,
// the reads, health) stays open to each client the TLS handshake admitted. Without admin
// names, every client may do everything.
//
// Threads: immutable after construction; CheckAdmin may be called from any thread.
#ifndef QMM_SERVER_ACCESS_H_
#define QMM_SERVER_ACCESS_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace qmm {

class AccessPolicy {
 public:
  explicit AccessPolicy(const std::vector<std::string>& admin_names = {})
      : admins_(admin_names.begin(), admin_names.end()) {}

  // OK when `rpc`'s client may call the operator method `method` ("UploadWeight"...);
  // PERMISSION_DENIED naming the method otherwise.
  absl::Status CheckAdmin(const grpc::ServerContextBase& rpc, absl::string_view method) const;

 private:
  absl::flat_hash_set<std::string> admins_;
};

}  // namespace qmm

#endif  // QMM_SERVER_ACCESS_H_
