// kvserve make-model (being written).
#include "kvserve/cli/commands.h"

namespace kvserve::cli {

Command add_make_model_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("make-model", "(not available yet)");
  return {cmd, [] { return 1; }};
}

}  // namespace kvserve::cli
