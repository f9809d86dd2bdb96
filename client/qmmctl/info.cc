// qmmctl info: what the server runs on and its limits.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/qmmctl/commands.h"
#include "client/qmmctl/names.h"

namespace qmm::ctl {

absl::Status RunInfo(Client& client) {
  absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
  if (!info.ok()) return info.status();
  std::vector<std::string> schemes;
  for (int s : info->schemes()) schemes.push_back(ProtoSchemeName(static_cast<v1::Scheme>(s)));
  const v1::Limits& limits = info->limits();
  std::printf(
      "version:            %s\n"
      "backend:            %s\n"
      "device:             %s\n"
      "memory used:        %lld / %lld bytes\n"
      "weights:            %lld\n"
      "schemes:            %s\n"
      "max message bytes:  %lld\n"
      "max chunk bytes:    %lld\n"
      "max dim (N, K):     %lld\n"
      "max rows (M):       %lld\n"
      "max name length:    %lld\n",
      info->version().c_str(), info->backend().c_str(), info->device_name().c_str(),
      static_cast<long long>(info->memory_used_bytes()),
      static_cast<long long>(info->memory_limit_bytes()), static_cast<long long>(info->weights()),
      absl::StrJoin(schemes, " ").c_str(), static_cast<long long>(limits.max_message_bytes()),
      static_cast<long long>(limits.max_chunk_bytes()), static_cast<long long>(limits.max_dim()),
      static_cast<long long>(limits.max_rows()), static_cast<long long>(limits.max_name_length()));
  return absl::OkStatus();
}

}  // namespace qmm::ctl
