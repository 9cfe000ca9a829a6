// kvserve bench-one-batch: the latency of one static batch, without a server (SGLang's
// bench_one_batch.py).
//   kvserve bench-one-batch --model-path /tmp/tiny --batch-size 1 8 --input-len 256 512
//       --output-len 32 --run-name cpu --result-filename result.jsonl
// A Whisper checkpoint (config.json model_type "whisper") runs bench/whisper_one_batch.h instead:
//   kvserve bench-one-batch --model-path /tmp/whisper --device cuda --page-size 64
//       --encoder-kv-layout ragged --batch-size 1 4 16 --output-len 64
// (--input-len, when given, is the decoder prompt's length; default: the transcriber's prompt).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "kvserve/bench/one_batch.h"
#include "kvserve/bench/whisper_one_batch.h"
#include "kvserve/cli/commands.h"
#include "kvserve/cli/runner_options.h"
#include "kvserve/model/model_runner.h"

namespace kvserve::cli {
namespace {

struct BenchOneBatchArgs {
  std::string model_path;
  model::ModelRunnerOptions runner;
  bench::OneBatchOptions bench;
  std::string result_filename = "result.jsonl";
  mem::EncoderKvLayout encoder_kv_layout = mem::EncoderKvLayout::kAligned;  // Whisper only
  CLI::Option* layout_flag = nullptr;     // whether --encoder-kv-layout was given
  CLI::Option* input_len_flag = nullptr;  // whether --input-len was given
};

int fail(const Status& s) {
  fmt::print(stderr, "kvserve bench-one-batch: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

template <typename JsonResult>
Status append_json_lines(const std::string& filename, const std::vector<JsonResult>& results) {
  if (filename.empty() || results.empty()) return Status::ok();
  std::ofstream out(filename, std::ios::app);
  for (const JsonResult& res : results)
    out << res.to_json().dump() << '\n';
  if (!out.good()) {
    return make_status(StatusCode::kIoError, "--result-filename: cannot write {}", filename);
  }
  return Status::ok();
}

void log_line(std::string_view line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

// A Whisper checkpoint: encoder, prefill and decode steps of one batch of transcriptions on a
// WhisperRunner in the chosen encoder KV layout.
int run_bench_one_batch_whisper(const BenchOneBatchArgs& a) {
  const model::ModelRunnerOptions& r = a.runner;
  if (r.kv_cache_dtype.has_value()) {
    return fail(invalid_argument(
        "--kv-cache-dtype {}: a Whisper checkpoint keeps its KV cache in the compute dtype (auto)",
        dtype_name(*r.kv_cache_dtype)));
  }
  if (r.tp_group_of_one) {
    return fail(invalid_argument(
        "--tp-group-of-one: tensor parallelism is not implemented for Whisper checkpoints"));
  }
  if (r.mem_fraction_static != 0) {
    return fail(invalid_argument(
        "--mem-fraction-static: a Whisper checkpoint sizes its KV cache for full rows (or "
        "--max-total-tokens)"));
  }
  if (r.context_length != 0) {
    return fail(
        invalid_argument("--context-length: a Whisper checkpoint's rows are max_source_positions + "
                         "max_target_positions"));
  }
  model::WhisperRunnerOptions wo;
  wo.device = r.device.to_string();
  wo.page_size = r.page_size;
  if (r.attention_backend) {  // else the device's default for the layout
    wo.attention_backend = attention::attention_backend_name(*r.attention_backend);
  }
  wo.max_running_requests = r.max_running_requests;
  wo.max_total_tokens = r.max_total_tokens;
  wo.layout = a.encoder_kv_layout;
  wo.kernel_switches = r.kernel_switches;
  wo.device_pool = r.device_pool;
  bench::WhisperOneBatchOptions bo;
  bo.run_name = a.bench.run_name;
  bo.batch_sizes = a.bench.batch_sizes;
  if (a.input_len_flag != nullptr && a.input_len_flag->count() > 0) {
    bo.decoder_input_lens = a.bench.input_lens;
  }
  bo.output_lens = a.bench.output_lens;
  bo.seed = a.bench.seed;
  auto runner = model::WhisperRunner::create(a.model_path, wo);
  if (!runner.is_ok()) return fail(runner.status());
  model::WhisperRunner& w = **runner;
  const checkpoint::WhisperConfig& c = w.config();
  const model::WhisperRunnerOptions& ro = w.options();
  fmt::print(
      "Whisper: {}+{} layers, d_model {}, encoder_len {}, on {}; page size {}, {} encoder KV "
      "layout, {} attention\n",
      c.encoder_layers, c.decoder_layers, c.d_model, c.max_source_positions, ro.device,
      ro.page_size, mem::encoder_kv_layout_name(ro.layout), ro.attention_backend);
  fmt::print("max_total_num_tokens={}\n", w.allocator().size());
  const auto results = bench::run_whisper_one_batch_sweep(w, bo, log_line);
  if (!results.is_ok()) return fail(results.status());
  if (Status s = append_json_lines(a.result_filename, *results); !s.is_ok()) return fail(s);
  return 0;
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
  if (Status s = read_kernel_switches(a.runner); !s.is_ok()) return fail(s);
  if (a.runner.tp_group_of_one && a.runner.tp_size != 1) {
    return fail(
        invalid_argument("--tp-group-of-one runs --tp-size 1; got --tp-size {}", a.runner.tp_size));
  }
  if (model::is_whisper_checkpoint(a.model_path)) return run_bench_one_batch_whisper(a);
  if (a.layout_flag != nullptr && a.layout_flag->count() > 0) {
    return fail(invalid_argument(
        "--encoder-kv-layout applies to Whisper checkpoints only; {} is not one (its config.json "
        "model_type is not \"whisper\")",
        a.model_path));
  }
  auto runner = model::ModelRunner::create(a.model_path, a.runner);
  if (!runner.is_ok()) return fail(runner.status());
  model::ModelRunner& r = **runner;
  fmt::print("{}\n", r.summary());
  fmt::print("max_total_num_tokens={}\n", r.max_total_tokens());
  const auto results = bench::run_one_batch_sweep(r, a.bench, log_line);
  if (!results.is_ok()) return fail(results.status());
  if (Status s = append_json_lines(a.result_filename, *results); !s.is_ok()) return fail(s);
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
  a->input_len_flag =
      cmd->add_option("--input-len", a->bench.input_lens,
                      "Input lengths (a list); Whisper: decoder prompt lengths (default: the "
                      "transcriber's prompt)")
          ->capture_default_str();
  cmd->add_option("--output-len", a->bench.output_lens, "Output lengths (a list)")
      ->capture_default_str();
  cmd->add_option("--run-name", a->bench.run_name)->capture_default_str();
  cmd->add_option("--result-filename", a->result_filename, "Append JSON lines here")
      ->capture_default_str();
  cmd->add_option("--seed", a->bench.seed, "Seed of the synthetic prompts")->capture_default_str();
  add_device_option(cmd, a->runner.device);
  cmd->add_option("--page-size", a->runner.page_size)->capture_default_str();
  add_attention_backend_option(
      cmd, a->runner.attention_backend,
      "cpu or native (CPU), cuda-paged or cuda-ragged (CUDA); default: "
      "the device's (Whisper on CUDA with the ragged layout: cuda-ragged)");
  a->layout_flag = add_encoder_kv_layout_option(
      cmd, a->encoder_kv_layout,
      "Whisper checkpoints only: aligned (default) or ragged encoder KV rows");
  add_kv_cache_dtype_option(cmd, a->runner.kv_cache_dtype);
  cmd->add_option("--max-total-tokens", a->runner.max_total_tokens, "KV cache size in tokens");
  cmd->add_option("--mem-fraction-static", a->runner.mem_fraction_static);
  cmd->add_option("--max-running-requests", a->runner.max_running_requests,
                  "Request rows (default: the largest batch size)");
  cmd->add_option("--context-length", a->runner.context_length);
  add_cuda_graph_options(cmd, a->runner);
  add_gpu_memory_option(cmd, a->runner);
  add_tensor_parallel_options(cmd, a->runner);
  cmd->add_flag("--tp-group-of-one", a->runner.tp_group_of_one,
                "Run --tp-size 1 as a tensor-parallel group of one rank: every all-reduce of the "
                "forward goes through the group's communicator (NCCL on CUDA), which measures what "
                "the collectives cost without a second GPU");
  return {cmd, [a] { return run_bench_one_batch(*a); }};
}

}  // namespace kvserve::cli
