#include "server/access.h"

#include <grpcpp/security/auth_context.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace qmm {

absl::Status AccessPolicy::CheckAdmin(const grpc::ServerContextBase& rpc,
                                      absl::string_view method) const {
  if (admins_.empty()) return absl::OkStatus();
  const std::shared_ptr<const grpc::AuthContext> auth = rpc.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property : {GRPC_X509_SAN_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME}) {
      for (const grpc::string_ref& name : auth->FindPropertyValues(property)) {
        if (admins_.contains(absl::string_view(name.data(), name.size()))) return absl::OkStatus();
      }
    }
  }
  // The names the client presented are not echoed: the message says what is needed.
  return absl::PermissionDeniedError(
      absl::StrCat(method,
                   " is for operators: it needs a client certificate that carries one of the "
                   "server's admin names"));
}

}  // namespace qmm
