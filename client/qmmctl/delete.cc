// qmmctl rm NAME.
#include <cstdio>

#include "client/qmmctl/commands.h"

namespace qmm::ctl {

absl::Status RunDelete(Client& client, const std::string& name) {
  if (absl::Status status = client.DeleteWeight(name); !status.ok()) return status;
  std::printf("deleted %s\n", name.c_str());
  return absl::OkStatus();
}

}  // namespace qmm::ctl
