#include "kvserve/cli/runner_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvserve/platform/kernel_switches_env.h"
#include "kvserve/platform/platform.h"

namespace kvserve::cli {

CLI::Option* add_device_option(CLI::App* cmd, Device& device) {
  auto* opt = cmd->add_option_function<std::string>(
      "--device",
      [&device](const std::string& name) { device = platform::parse_device(name).value(); },
      "cpu, cuda or cuda:N (default: cpu)");
  opt->check(CLI::Validator(
      [](std::string& name) -> std::string {
        const auto d = platform::parse_device(name);
        return d.is_ok() ? std::string() : d.status().message();
      },
      "DEVICE"));
  return opt;
}

CLI::Option* add_attention_backend_option(CLI::App* cmd,
                                          std::optional<attention::AttentionBackendKind>& kind,
                                          const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          "--attention-backend",
          [&kind](const std::string& name) {
            kind = attention::parse_attention_backend(name).value();
          },
          help)
      ->check(CLI::IsMember(attention::attention_backend_names()));
}

CLI::Option* add_kv_cache_dtype_option(CLI::App* cmd, std::optional<DType>& dtype) {
  auto* opt = cmd->add_option_function<std::string>(
      "--kv-cache-dtype",
      [&dtype](const std::string& name) {
        DType t{};
        if (name == "auto") {
          dtype.reset();
        } else if (parse_dtype(name, &t)) {
          dtype = t;
        }
      },
      kKvCacheDtypeHelp);
  opt->check(CLI::Validator(
      [](std::string& name) -> std::string {
        DType t{};
        if (name == "auto" || parse_dtype(name, &t)) return {};
        return fmt::format("unknown dtype '{}' (expected auto or one of {})", name,
                           dtype_choices());
      },
      "DTYPE"));
  return opt;
}

CLI::Option* add_encoder_kv_layout_option(CLI::App* cmd, mem::EncoderKvLayout& layout,
                                          const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          "--encoder-kv-layout",
          [&layout](const std::string& name) {
            layout = mem::parse_encoder_kv_layout(name).value();
          },
          help)
      ->check(CLI::IsMember({"aligned", "ragged"}));
}

void add_cuda_graph_options(CLI::App* cmd, model::ModelRunnerOptions& runner) {
  cmd->add_option("--cuda-graph-max-bs", runner.cuda_graph_max_bs,
                  "Largest decode batch replayed from a captured graph (CUDA; default " +
                      std::to_string(model::kDefaultCudaGraphMaxBs) +
                      ", at most --max-running-requests)")
      ->check(CLI::Range(1, std::numeric_limits<int32_t>::max()));
  cmd->add_flag("--disable-cuda-graph", runner.disable_cuda_graph,
                "Run every decode step eagerly (no graph capture)");
}

void add_gpu_memory_option(CLI::App* cmd, model::ModelRunnerOptions& runner) {
  cmd->add_option("--gpu-memory-utilization", runner.device_pool.utilization,
                  "CUDA: the share of the GPU's total memory this process takes (weights, KV "
                  "cache, activations, graphs), so that several servers can share one GPU; "
                  "default: all the free memory")
      ->check(CLI::Range(0.0, 1.0));
}

void add_tensor_parallel_options(CLI::App* cmd, model::ModelRunnerOptions& runner) {
  cmd->add_option("--tp-size", runner.tp_size,
                  "Tensor-parallel ranks, one process each (this one is rank 0 and launches the "
                  "others); must divide the attention heads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--base-gpu-id", runner.base_gpu_id,
                  "CUDA: the GPU of rank 0 (default: --device's index); rank r uses base + r")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--nccl-port", runner.nccl_port,
                  "Accepted for SGLang command lines; kvserve passes NCCL's unique id over its "
                  "shared-memory control channel and opens no port")
      ->check(CLI::Range(1, 65535));
}

Status read_kernel_switches(model::ModelRunnerOptions& runner) {
  KV_ASSIGN_OR_RETURN(runner.kernel_switches, platform::kernel_switches_from_env());
  return Status::ok();
}

}  // namespace kvserve::cli
