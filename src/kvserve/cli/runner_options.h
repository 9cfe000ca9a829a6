// Command-line options of the model runner that every command running a ModelRunner shares
// (serve, generate, bench-one-batch), registered in one place.
#pragma once

#include <CLI/CLI.hpp>

#include "kvserve/model/model_runner.h"

namespace kvserve::cli {

// --cuda-graph-max-bs and --disable-cuda-graph (model/decode_graph_runner.h).
void add_cuda_graph_options(CLI::App* cmd, model::ModelRunnerOptions& runner);

}  // namespace kvserve::cli
