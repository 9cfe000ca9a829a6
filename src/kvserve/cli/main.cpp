// The kvserve command line. Subcommands (one file each in cli/) follow SGLang's names and flags.
//   kvserve                 version, platforms and a memory-system self-check
//   kvserve version
//   kvserve self-check      the randomised memory-system check
//   kvserve supported-models  what kvserve serves (Markdown, from the loaders' tables)
#include <fmt/format.h>

#include <vector>

#include "kvserve/cli/commands.h"
#include "kvserve/core/check.h"
#include "kvserve/core/log_output.h"
#include "kvserve/core/logging.h"

namespace kvserve::cli {
namespace {

int main(int argc, char** argv) {
  log_to_stderr();  // results go to stdout, logs never do
  CLI::App app{"kvserve: an LLM serving engine with SGLang's KV-cache design, in C++"};
  app.require_subcommand(0, 1);
  app.fallthrough();  // global flags (--log-level) may also follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();

  const std::vector<Command> commands = {
      add_version_command(app),         add_self_check_command(app),
      add_make_model_command(app),      add_generate_command(app),
      add_serve_command(app),           add_bench_serving_command(app),
      add_bench_one_batch_command(app), add_bench_attention_command(app),
      add_transcribe_command(app),      add_supported_models_command(app),
      add_tp_worker_command(app),       add_router_command(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error (an unknown flag, a value a validator
    // refuses: a bad --attention-backend or --device) is exit 2, as the commands' own checks.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!set_log_level(log_level)) {
    fmt::print(stderr, "kvserve: --log-level: unknown level '{}'\n", log_level);
    return 2;
  }
  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    // No subcommand: what kvserve is and whether its memory system holds up on this machine.
    print_version_and_platforms();
    return run_default_self_check();
  } catch (const CheckError& e) {
    fmt::print(stderr, "kvserve: internal error (a bug, please report it): {}\n", e.what());
    return 70;
  }
}

}  // namespace
}  // namespace kvserve::cli

int main(int argc, char** argv) {
  return kvserve::cli::main(argc, argv);
}
