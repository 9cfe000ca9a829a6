// Command-line options of the model runner that every command running a ModelRunner shares
// (serve, generate, bench-one-batch), registered in one place.
#pragma once

#include <CLI/CLI.hpp>

#include "kvserve/model/model_runner.h"

namespace kvserve::cli {

// --kv-cache-dtype's help (serve, generate, bench-one-batch).
inline constexpr const char* kKvCacheDtypeHelp =
    "auto (the compute dtype: f32 on the CPU, bf16 on CUDA), bf16, f16, f32 (CPU), or fp8_e4m3 / "
    "fp8_e5m2 (CPU and CUDA: half of bf16's KV bytes; values stored divided by a per-layer scale, "
    "1.0 today: docs/fp8-kv-cache.md)";

// --cuda-graph-max-bs and --disable-cuda-graph (model/decode_graph_runner.h).
void add_cuda_graph_options(CLI::App* cmd, model::ModelRunnerOptions& runner);

}  // namespace kvserve::cli
