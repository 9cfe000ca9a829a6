#include "kvserve/cli/runner_options.h"

#include <cstdint>
#include <limits>
#include <string>

namespace kvserve::cli {

void add_cuda_graph_options(CLI::App* cmd, model::ModelRunnerOptions& runner) {
  cmd->add_option("--cuda-graph-max-bs", runner.cuda_graph_max_bs,
                  "Largest decode batch replayed from a captured graph (CUDA; default " +
                      std::to_string(model::kDefaultCudaGraphMaxBs) +
                      ", at most --max-running-requests)")
      ->check(CLI::Range(1, std::numeric_limits<int32_t>::max()));
  cmd->add_flag("--disable-cuda-graph", runner.disable_cuda_graph,
                "Run every decode step eagerly (no graph capture)");
}

}  // namespace kvserve::cli
