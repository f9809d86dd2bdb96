// qmmctl ls: one line per weight.
#include <cstdio>

#include "client/qmmctl/commands.h"
#include "client/qmmctl/names.h"

namespace qmm::ctl {

absl::Status RunList(Client& client) {
  absl::StatusOr<std::vector<v1::WeightInfo>> weights = client.ListWeights();
  if (!weights.ok()) return weights.status();
  // ZP: zero points; ACT: activation order (WeightInfo.zero_points, .act_order).
  std::printf("%-32s %-6s %8s %8s %6s %4s %4s %14s %14s\n", "NAME", "SCHEME", "N", "K", "GROUP",
              "ZP", "ACT", "PACKED_BYTES", "DEVICE_BYTES");
  for (const v1::WeightInfo& w : *weights) {
    std::printf("%-32s %-6s %8lld %8lld %6d %4s %4s %14lld %14lld\n", w.name().c_str(),
                ProtoSchemeName(w.scheme()).c_str(), static_cast<long long>(w.n()),
                static_cast<long long>(w.k()), w.group_size(), w.zero_points() ? "yes" : "-",
                w.act_order() ? "yes" : "-", static_cast<long long>(w.packed_bytes()),
                static_cast<long long>(w.device_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace qmm::ctl
