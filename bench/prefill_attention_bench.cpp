// prefill_attention_bench: `kvserve bench-attention` alone (the same command,
// cli/bench_attention.cpp) in a binary that links only the modules it uses, for quick kernel work
// on the GPU machine:
//   build/bench/prefill_attention_bench bench-attention --mode prefill --batch 1 --seq-len 8192
//       --num-q-heads 32 --num-kv-heads 8 --head-dim 128 --variant sm90,mma
#include <CLI/CLI.hpp>

#include "kvserve/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvserve bench-attention, alone"};
  app.require_subcommand(1);
  const kvserve::cli::Command cmd = kvserve::cli::add_bench_attention_command(app);
  CLI11_PARSE(app, argc, argv);
  return cmd.run();
}
