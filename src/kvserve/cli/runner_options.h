// Command-line options of the model runner that every command running a ModelRunner shares
// (serve, generate, bench-one-batch), registered in one place. Names become typed values here,
// at the boundary (CLI11 checks them and lists the valid ones); nothing past it parses a name.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "kvserve/attention/capabilities.h"
#include "kvserve/core/status.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/model/model_runner.h"

namespace kvserve::cli {

// --kv-cache-dtype's help (serve, generate, bench-one-batch).
inline constexpr const char* kKvCacheDtypeHelp =
    "auto (the compute dtype: f32 on the CPU, bf16 on CUDA), bf16, f16, f32 (CPU), or fp8_e4m3 / "
    "fp8_e5m2 (CPU and CUDA: half of bf16's KV bytes; values stored divided by a per-layer scale, "
    "1.0 today: docs/fp8-kv-cache.md)";

// --device: cpu, cuda or cuda:N.
CLI::Option* add_device_option(CLI::App* cmd, Device& device);
// --attention-backend: a name of attention/capabilities.h's table; unset: the device's default.
CLI::Option* add_attention_backend_option(CLI::App* cmd,
                                          std::optional<attention::AttentionBackendKind>& kind,
                                          const std::string& help);
// --kv-cache-dtype: auto (nullopt) or a dtype name.
CLI::Option* add_kv_cache_dtype_option(CLI::App* cmd, std::optional<DType>& dtype);
// --encoder-kv-layout: aligned or ragged.
CLI::Option* add_encoder_kv_layout_option(CLI::App* cmd, mem::EncoderKvLayout& layout,
                                          const std::string& help);

// --cuda-graph-max-bs and --disable-cuda-graph (model/decode_graph_runner.h).
void add_cuda_graph_options(CLI::App* cmd, model::ModelRunnerOptions& runner);

// --gpu-memory-utilization (vLLM's name; platform/device_pool.h).
void add_gpu_memory_option(CLI::App* cmd, model::ModelRunnerOptions& runner);

// --tp-size, --base-gpu-id and --nccl-port (SGLang's names; docs/tensor-parallel.md).
void add_tensor_parallel_options(CLI::App* cmd, model::ModelRunnerOptions& runner);

// The CUDA kernels' A/B switches from the environment (platform/kernel_switches_env.h), for a
// command's runner options: the one place the command line reads them. A bad value is an error
// naming the variable.
Status read_kernel_switches(model::ModelRunnerOptions& runner);

}  // namespace kvserve::cli
