// kvserve bench-serving: benchmark a running server over HTTP (SGLang's bench_serving.py).
//   kvserve bench-serving --backend sglang --dataset-name random --num-prompts 100
//       --random-input-len 256 --random-output-len 64 --request-rate 4 --max-concurrency 16
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>

#include "kvserve/bench/serving.h"
#include "kvserve/cli/commands.h"

namespace kvserve::cli {
namespace {

struct BenchServingArgs {
  bench::ServingOptions serving;
  std::string backend = "sglang";
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string request_rate = "inf";
  bool disable_ignore_eos = false;
  bool disable_stream = false;
  std::optional<int32_t> sharegpt_output_len;
  std::optional<int32_t> sharegpt_context_len;
};

int usage_error(const std::string& message) {
  fmt::print(stderr, "kvserve bench-serving: {}\n", message);
  return 2;
}

int run_bench_serving(BenchServingArgs a) {
  bench::ServingOptions& o = a.serving;
  const auto backend = bench::parse_backend(a.backend);
  if (!backend.is_ok()) return usage_error(backend.status().message());
  o.client.backend = *backend;
  if (a.port < 1 || a.port > 65535) {
    return usage_error(fmt::format("--port must be in 1..65535, got {}", a.port));
  }
  o.client.base_url = a.base_url.empty() ? fmt::format("http://{}:{}", a.host, a.port) : a.base_url;
  while (!o.client.base_url.empty() && o.client.base_url.back() == '/')
    o.client.base_url.pop_back();
  o.client.stream = !a.disable_stream;
  o.client.ignore_eos = !a.disable_ignore_eos;
  o.sharegpt_output_len = a.sharegpt_output_len;
  o.sharegpt_context_len = a.sharegpt_context_len;

  char* end = nullptr;
  errno = 0;
  const double rate = std::strtod(a.request_rate.c_str(), &end);
  if (a.request_rate.empty() || *end != '\0' || errno != 0 || !(rate > 0)) {
    return usage_error(
        fmt::format("--request-rate must be a number > 0 or inf, got '{}'", a.request_rate));
  }
  o.request_rate = rate;

  fmt::print(stderr, "bench-serving: {} at {}, dataset {}, {} prompts, request rate {}\n",
             a.backend, o.client.base_url, o.dataset_name, o.num_prompts, a.request_rate);
  auto log = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
  const Result<bench::ServingResult> result = bench::run_bench_serving(o, log);
  if (!result.is_ok()) {
    const Status& s = result.status();
    fmt::print(stderr, "kvserve bench-serving: {}\n", s.message());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
  }
  fmt::print("\n{}", result->table);
  std::fflush(stdout);
  if (result->metrics.completed == 0) {
    fmt::print(stderr, "kvserve bench-serving: every request failed\n");
    return 1;
  }
  return 0;
}

}  // namespace

Command add_bench_serving_command(CLI::App& app) {
  auto a = std::make_shared<BenchServingArgs>();
  bench::ServingOptions& o = a->serving;
  CLI::App* cmd = app.add_subcommand(
      "bench-serving", "Benchmark a running server's online serving (SGLang's bench_serving)");
  cmd->add_option("--backend", a->backend, "sglang (POST /generate) or openai (/v1/completions)")
      ->capture_default_str();
  cmd->add_option("--base-url", a->base_url, "Server URL (default: http://HOST:PORT)");
  cmd->add_option("--host", a->host)->capture_default_str();
  cmd->add_option("--port", a->port)->capture_default_str();
  cmd->add_option("--model", o.client.model, "The openai model name (default: GET /v1/models)");
  cmd->add_option("--tokenizer", o.tokenizer,
                  "Directory with tokenizer.json (default: the server's model path from "
                  "/get_server_info)");
  cmd->add_option("--dataset-name", o.dataset_name, "sharegpt, random or random-ids")
      ->capture_default_str();
  cmd->add_option("--dataset-path", o.dataset_path, "The ShareGPT JSON file");
  cmd->add_option("--num-prompts", o.num_prompts)->capture_default_str();
  cmd->add_option("--sharegpt-output-len", a->sharegpt_output_len,
                  "Fixed output length for ShareGPT prompts");
  cmd->add_option("--sharegpt-context-len", a->sharegpt_context_len,
                  "Drop ShareGPT requests whose prompt + output exceed this");
  cmd->add_option("--random-input-len", o.random_input_len)->capture_default_str();
  cmd->add_option("--random-output-len", o.random_output_len)->capture_default_str();
  cmd->add_option("--random-range-ratio", o.random_range_ratio,
                  "Lengths uniform in [max(int(L * ratio), 1), L]")
      ->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate,
                  "Requests per second (Poisson arrivals); inf sends all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o.max_concurrency,
                  "At most this many requests in flight (default: no limit)");
  cmd->add_option("--seed", o.seed)->capture_default_str();
  cmd->add_flag("--disable-ignore-eos", a->disable_ignore_eos, "Let requests stop at EOS");
  cmd->add_flag("--disable-stream", a->disable_stream, "Non-streaming requests (TTFT = latency)");
  cmd->add_flag("--flush-cache", o.flush_cache, "POST /flush_cache before the run");
  cmd->add_option("--warmup-requests", o.warmup_requests)->capture_default_str();
  cmd->add_option("--output-file", o.output_file, "Append the results as one JSON line");
  return {cmd, [a] { return run_bench_serving(*a); }};
}

}  // namespace kvserve::cli
