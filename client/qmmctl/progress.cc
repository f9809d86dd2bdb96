#include "client/qmmctl/progress.h"

#include <unistd.h>

#include <memory>

namespace qmm::ctl {

UploadProgress MakeProgressPrinter(std::string name, std::FILE* out) {
  struct State {
    absl::Time start = absl::Now();
    absl::Time last_draw = absl::InfinitePast();
  };
  auto state = std::make_shared<State>();
  const bool terminal = isatty(fileno(out)) == 1;
  return [name = std::move(name), out, terminal, state](int64_t sent, int64_t total) {
    const absl::Time now = absl::Now();
    const bool done = sent >= total;
    if (!done && (!terminal || now - state->last_draw < absl::Milliseconds(100))) return;
    state->last_draw = now;
    constexpr double kMiB = 1 << 20;
    const double seconds = absl::ToDoubleSeconds(now - state->start);
    const double rate = seconds > 0 ? sent / kMiB / seconds : 0;
    std::fprintf(out, "%supload %s: %.1f/%.1f MiB (%3.0f%%) %.0f MiB/s%s", terminal ? "\r" : "",
                 name.c_str(), sent / kMiB, total / kMiB, total > 0 ? 100.0 * sent / total : 100.0,
                 rate, done ? "\n" : "");
    std::fflush(out);
  };
}

}  // namespace qmm::ctl
