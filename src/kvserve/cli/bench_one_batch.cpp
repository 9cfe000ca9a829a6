// kvserve bench-one-batch: the latency of one static batch, without a server (SGLang's
// bench_one_batch.py).
//   kvserve bench-one-batch --model-path /tmp/tiny --batch-size 1 8 --input-len 256 512
//       --output-len 32 --run-name cpu --result-filename result.jsonl
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "kvserve/bench/one_batch.h"
#include "kvserve/cli/commands.h"

namespace kvserve::cli {
namespace {

struct BenchOneBatchArgs {
  std::string model_path;
  model::ModelRunnerOptions runner;
  bench::OneBatchOptions bench;
  std::string result_filename = "result.jsonl";
};

int fail(const Status& s) {
  fmt::print(stderr, "kvserve bench-one-batch: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

int run_bench_one_batch(BenchOneBatchArgs a) {
  for (const auto& [values, flag] : {std::pair{&a.bench.batch_sizes, "--batch-size"},
                                     std::pair{&a.bench.input_lens, "--input-len"},
                                     std::pair{&a.bench.output_lens, "--output-len"}}) {
    for (const int32_t v : *values) {
      if (v < 1) return fail(invalid_argument("{} values must be >= 1, got {}", flag, v));
    }
  }
  // Rows for the largest batch (SGLang sizes its graphs for it), unless given.
  if (a.runner.max_running_requests == 0) {
    a.runner.max_running_requests =
        *std::max_element(a.bench.batch_sizes.begin(), a.bench.batch_sizes.end());
  }
  auto runner = model::ModelRunner::create(a.model_path, a.runner);
  if (!runner.is_ok()) return fail(runner.status());
  model::ModelRunner& r = **runner;
  fmt::print("{}\n", r.summary());
  fmt::print("max_total_num_tokens={}\n", r.max_total_tokens());
  auto log = [](std::string_view line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  const auto results = bench::run_one_batch_sweep(r, a.bench, log);
  if (!results.is_ok()) return fail(results.status());
  if (!a.result_filename.empty() && !results->empty()) {
    std::ofstream out(a.result_filename, std::ios::app);
    for (const bench::OneBatchResult& res : *results)
      out << res.to_json().dump() << '\n';
    if (!out.good()) {
      return fail(make_status(StatusCode::kIoError, "--result-filename: cannot write {}",
                              a.result_filename));
    }
  }
  return 0;
}

}  // namespace

Command add_bench_one_batch_command(CLI::App& app) {
  auto a = std::make_shared<BenchOneBatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench-one-batch", "Time one static batch's prefill and decode steps, without a server");
  cmd->add_option("--model-path", a->model_path, "Hugging Face checkpoint directory")->required();
  cmd->add_option("--batch-size", a->bench.batch_sizes, "Batch sizes (a list)")
      ->capture_default_str();
  cmd->add_option("--input-len", a->bench.input_lens, "Input lengths (a list)")
      ->capture_default_str();
  cmd->add_option("--output-len", a->bench.output_lens, "Output lengths (a list)")
      ->capture_default_str();
  cmd->add_option("--run-name", a->bench.run_name)->capture_default_str();
  cmd->add_option("--result-filename", a->result_filename, "Append JSON lines here")
      ->capture_default_str();
  cmd->add_option("--seed", a->bench.seed, "Seed of the synthetic prompts")->capture_default_str();
  cmd->add_option("--device", a->runner.device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--page-size", a->runner.page_size)->capture_default_str();
  cmd->add_option("--attention-backend", a->runner.attention_backend, "cpu or native");
  cmd->add_option("--kv-cache-dtype", a->runner.kv_cache_dtype)->capture_default_str();
  cmd->add_option("--max-total-tokens", a->runner.max_total_tokens, "KV cache size in tokens");
  cmd->add_option("--mem-fraction-static", a->runner.mem_fraction_static);
  cmd->add_option("--max-running-requests", a->runner.max_running_requests,
                  "Request rows (default: the largest batch size)");
  cmd->add_option("--context-length", a->runner.context_length);
  return {cmd, [a] { return run_bench_one_batch(*a); }};
}

}  // namespace kvserve::cli
