// kvserve version: the build and the devices it can drive.
#include <fmt/format.h>

#include "kvserve/cli/commands.h"
#include "kvserve/core/version.h"
#include "kvserve/platform/platform.h"

namespace kvserve::cli {

void print_version_and_platforms() {
  fmt::print("kvserve {} (CUDA platform {})\n", kVersion,
             platform::cuda_compiled() ? "built" : "not built");
  fmt::print("platforms:\n");
  for (const auto& p : platform::list_platforms()) {
    fmt::print("  {:<8} {}\n", p.device.to_string(), p.description);
  }
}

Command add_version_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version and the build's platforms");
  return {cmd, [] {
            print_version_and_platforms();
            return 0;
          }};
}

}  // namespace kvserve::cli
