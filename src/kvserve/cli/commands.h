// kvserve subcommands. Each file of cli/ adds one: it registers its options on the app and
// returns how to run it once the command line has been parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kvserve::cli {

struct Command {
  CLI::App* app = nullptr;   // the subcommand, to see whether it was selected
  std::function<int()> run;  // its exit code
};

Command add_version_command(CLI::App& app);
Command add_self_check_command(CLI::App& app);
Command add_make_model_command(CLI::App& app);        // make_model.cpp
Command add_generate_command(CLI::App& app);          // generate.cpp
Command add_bench_serving_command(CLI::App& app);     // bench_serving.cpp
Command add_bench_one_batch_command(CLI::App& app);   // bench_one_batch.cpp
Command add_bench_attention_command(CLI::App& app);   // bench_attention.cpp
Command add_serve_command(CLI::App& app);             // serve.cpp
Command add_router_command(CLI::App& app);            // router.cpp
Command add_transcribe_command(CLI::App& app);        // transcribe.cpp
Command add_supported_models_command(CLI::App& app);  // supported_models.cpp
Command add_tp_worker_command(CLI::App& app);         // tp_worker.cpp (hidden)

// What `kvserve` with no subcommand does: version, platforms and the memory self-check.
void print_version_and_platforms();
int run_default_self_check();

}  // namespace kvserve::cli
