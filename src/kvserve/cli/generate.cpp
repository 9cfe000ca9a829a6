// kvserve generate (being written).
#include "kvserve/cli/commands.h"

namespace kvserve::cli {

Command add_generate_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("generate", "(not available yet)");
  return {cmd, [] { return 1; }};
}

}  // namespace kvserve::cli
