// kvserve generate: run prompts as one batch through the model runner and print the results.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "kvserve/cli/commands.h"
#include "kvserve/cli/default_model.h"
#include "kvserve/cli/runner_options.h"
#include "kvserve/engine/generate.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::cli {
namespace {

struct GenerateOptions {
  std::string model_path;
  std::vector<std::string> prompts;
  std::vector<std::string> input_ids;
  model::ModelRunnerOptions runner;
  bool disable_radix_cache = false;
  int32_t max_new_tokens = 32;
  std::optional<float> temperature;
  float top_p = 1.0f;
  int32_t top_k = -1;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  int32_t top_logprobs = 0;
  bool json = false;
};

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument("--input-ids: '{}' is not a comma-separated list of token ids", text);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

int fail(const Status& s) {
  fmt::print(stderr, "kvserve generate: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

int run_generate(GenerateOptions o) {
  if (!resolve_model_path(o.model_path, "generate")) return 2;
  if (o.prompts.empty() == o.input_ids.empty()) {
    return fail(invalid_argument("give either --prompt or --input-ids (one per request)"));
  }
  if (Status s = read_kernel_switches(o.runner); !s.is_ok()) return fail(s);
  auto runner = model::ModelRunner::create(o.model_path, o.runner);
  if (!runner.is_ok()) return fail(runner.status());
  model::ModelRunner& r = **runner;
  fmt::print(stderr, "{}\n", r.summary());

  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (auto t = tokenizer::Tokenizer::from_directory(o.model_path); t.is_ok()) {
    tok = std::move(t).value();
  } else if (!o.prompts.empty()) {
    return fail(t.status());
  }
  auto gen_config = checkpoint::load_generation_config(o.model_path);
  if (!gen_config.is_ok()) return fail(gen_config.status());

  engine::SamplingParams sp;
  sp.max_new_tokens = o.max_new_tokens;
  sp.temperature = o.temperature.value_or(
      gen_config->do_sample ? static_cast<float>(gen_config->temperature.value_or(1.0)) : 0.0f);
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repetition_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.seed = o.seed;
  sp.ignore_eos = o.ignore_eos;
  sp.return_logprob = o.json;
  sp.top_logprobs_num = o.top_logprobs;

  std::vector<engine::GenerateRequest> requests;
  for (const std::string& p : o.prompts)
    requests.push_back({tok->encode(p), sp});
  for (const std::string& ids : o.input_ids) {
    auto parsed = parse_ids(ids);
    if (!parsed.is_ok()) return fail(parsed.status());
    requests.push_back({std::move(parsed).value(), sp});
  }
  engine::GenerateOptions gopt;
  gopt.eos_token_ids = gen_config->eos_token_ids;
  if (gopt.eos_token_ids.empty()) gopt.eos_token_ids = r.config().eos_token_ids;

  mem::HostKvMemory memory(r.kv_shape(), o.disable_radix_cache ? mem::PrefixCacheKind::kChunk
                                                               : mem::PrefixCacheKind::kRadix);
  const auto t0 = std::chrono::steady_clock::now();
  auto results = engine::generate(r, memory, requests, gopt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!results.is_ok()) return fail(results.status());

  size_t generated = 0;
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < results->size(); ++i) {
    const engine::GenerateResult& g = (*results)[i];
    generated += g.output_ids.size();
    const std::string text = tok ? tok->decode(g.output_ids) : std::string();
    if (o.json) {
      nlohmann::json j = {{"input_ids", requests[i].input_ids},
                          {"output_ids", g.output_ids},
                          {"output_logprobs", g.output_logprobs},
                          {"finish_reason", g.finish_reason},
                          {"cached_tokens", g.cached_tokens}};
      if (tok) j["text"] = text;
      if (o.top_logprobs > 0) j["top_logprobs"] = g.top_logprobs;
      out.push_back(std::move(j));
    } else {
      if (tok) {
        fmt::print("{}\n", text);
      } else {
        fmt::print("{}\n", fmt::join(g.output_ids, ","));
      }
    }
  }
  if (o.json) fmt::print("{}\n", out.dump());
  fmt::print(stderr, "{} requests, {} tokens generated in {:.3f} s ({:.1f} tok/s)\n",
             results->size(), generated, secs, generated / std::max(secs, 1e-9));
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Run prompts as one batch and print the output");
  cmd->add_option("--model-path", o->model_path,
                  "Hugging Face checkpoint directory (default: the demo model, models/demo-lm)");
  cmd->add_option("--prompt", o->prompts, "A prompt (repeat for a batch)");
  cmd->add_option("--input-ids", o->input_ids, "Token ids '1,2,3' (repeat for a batch)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens)->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "Default: greedy unless generation_config.json samples");
  cmd->add_option("--top-p", o->top_p)->capture_default_str();
  cmd->add_option("--top-k", o->top_k)->capture_default_str();
  cmd->add_option("--min-p", o->min_p)->capture_default_str();
  cmd->add_option("--repetition-penalty", o->repetition_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", o->frequency_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", o->presence_penalty)->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past EOS");
  cmd->add_option("--top-logprobs", o->top_logprobs, "With --json: top-k logprobs per token");
  cmd->add_flag("--json", o->json, "Print token ids, text and logprobs as JSON");
  add_device_option(cmd, o->runner.device);
  cmd->add_option("--page-size", o->runner.page_size)->capture_default_str();
  add_attention_backend_option(cmd, o->runner.attention_backend,
                               "cpu or native (CPU), cuda-paged or cuda-ragged (CUDA); default: "
                               "the device's");
  add_kv_cache_dtype_option(cmd, o->runner.kv_cache_dtype);
  cmd->add_option("--max-total-tokens", o->runner.max_total_tokens, "KV cache size in tokens");
  cmd->add_option("--mem-fraction-static", o->runner.mem_fraction_static);
  cmd->add_option("--max-running-requests", o->runner.max_running_requests);
  cmd->add_option("--context-length", o->runner.context_length);
  add_cuda_graph_options(cmd, o->runner);
  add_gpu_memory_option(cmd, o->runner);
  add_tensor_parallel_options(cmd, o->runner);
  cmd->add_flag("--disable-radix-cache", o->disable_radix_cache);
  return {cmd, [o] { return run_generate(*o); }};
}

}  // namespace kvserve::cli
