// kvserve make-model: a random-weight checkpoint in Hugging Face's layout (makemodel/make_model.h).
//   kvserve make-model --preset tiny --output /tmp/tiny [--seed S] [--dtype bf16|f16|f32]
#include <fmt/format.h>

#include <memory>

#include "kvserve/cli/commands.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/makemodel/presets.h"

namespace kvserve::cli {
namespace {

struct MakeModelArgs {
  std::string preset;
  std::string output;
  uint64_t seed = 0;
  std::string dtype = "bf16";
  std::string max_shard_size = "5GB";
  int threads = 0;
  bool force = false;
  bool quiet = false;
};

std::string preset_list() {
  std::string out;
  for (const std::string& n : makemodel::preset_names())
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

int run_make_model(const MakeModelArgs& a) {
  if (a.preset.empty()) {
    fmt::print(stderr, "kvserve make-model: --preset is required (one of: {})\n", preset_list());
    return 2;
  }
  if (a.output.empty()) {
    fmt::print(stderr, "kvserve make-model: --output DIR is required\n");
    return 2;
  }
  if (a.threads < 0) {
    fmt::print(stderr, "kvserve make-model: --threads must be >= 0, got {}\n", a.threads);
    return 2;
  }
  makemodel::MakeModelOptions opt;
  opt.preset = a.preset;
  opt.output = a.output;
  opt.seed = a.seed;
  opt.force = a.force;
  opt.threads = a.threads;
  DType dtype;
  if (!parse_dtype(a.dtype, &dtype) ||
      (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32)) {
    fmt::print(stderr, "kvserve make-model: --dtype: '{}' is not one of bf16, f16, f32\n", a.dtype);
    return 2;
  }
  opt.dtype = dtype;
  const Result<uint64_t> shard = makemodel::parse_shard_size(a.max_shard_size);
  if (!shard.is_ok()) {
    fmt::print(stderr, "kvserve make-model: {}\n", shard.status().message());
    return 2;
  }
  opt.max_shard_bytes = *shard;
  if (!a.quiet) opt.progress = [](std::string_view line) { fmt::print("  {}\n", line); };

  if (!a.quiet)
    fmt::print("make-model: preset {}, seed {}, {} -> {}\n", a.preset, a.seed, a.dtype, a.output);
  const Result<makemodel::MakeModelReport> r = makemodel::make_model(opt);
  if (!r.is_ok()) {
    fmt::print(stderr, "kvserve make-model: {}\n", r.status().message());
    // Usage errors (bad preset, dtype, output path) are 2; failures while writing are 1.
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string params = r->parameters >= 1'000'000'000
                                 ? fmt::format("{:.2f} B", r->parameters / 1e9)
                                 : fmt::format("{:.2f} M", r->parameters / 1e6);
  fmt::print(
      "make-model: wrote {}: {} tensors, {} parameters, {:.1f} MB of weights in {} file{}, "
      "{:.1f} s\n",
      a.output, r->tensors, params, r->weight_bytes / 1e6, r->shards, r->shards == 1 ? "" : "s",
      r->seconds);
  return 0;
}

}  // namespace

Command add_make_model_command(CLI::App& app) {
  auto a = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a random-weight checkpoint in Hugging Face's layout from a preset");
  // Required, but checked in run_make_model so that a missing one exits with 2 and names
  // the choices.
  cmd->add_option("--preset", a->preset, "One of: " + preset_list() + " (required)");
  cmd->add_option("--output", a->output, "Checkpoint directory to create (required)");
  cmd->add_option("--seed", a->seed, "Random seed (the weights are a function of it)")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "Weight dtype: bf16, f16 or f32")->capture_default_str();
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "Split model.safetensors into shards above this size (as save_pretrained)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Generator threads (0: one per core)");
  cmd->add_flag("--force", a->force, "Write into a non-empty output directory");
  cmd->add_flag("--quiet", a->quiet, "Print only the summary");
  return {cmd, [a] { return run_make_model(*a); }};
}

}  // namespace kvserve::cli
