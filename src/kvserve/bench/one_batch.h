// `kvserve bench-one-batch`: SGLang's bench_one_batch.py latency test, without a server.
//
// One static batch of synthetic prompts (token ids uniform in [0, min(10000, vocab))) runs
// through a ModelRunner: a prefill (allocation + forward + greedy pick), then output_len - 1
// decode steps, each timed between device synchronizations. Before each run every row and slot
// is free (a fresh ChunkCache; everything is released after the run). A warmup run (the first
// batch size and input length, min(32, first output length) outputs) comes first.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/bench/decode_timing.h"
#include "kvserve/core/status.h"
#include "kvserve/model/model_runner.h"

namespace kvserve::bench {

struct OneBatchOptions {
  std::string run_name = "default";
  std::vector<int32_t> batch_sizes = {1};
  std::vector<int32_t> input_lens = {1024};
  std::vector<int32_t> output_lens = {16};
  uint64_t seed = 0;
  bool warmup = true;
};

struct OneBatchResult : DecodeTiming {
  std::string run_name;
  int32_t batch_size = 0;
  int32_t input_len = 0;
  int32_t output_len = 0;
  double prefill_latency = 0;     // seconds
  double prefill_throughput = 0;  // batch * input / prefill_latency, tokens/s
  // DecodeTiming: total_latency is prefill + every decode step, overall_throughput
  // (input + output) * batch / total_latency.

  // SGLang's JSON line: run_name, batch_size, input_len, output_len, prefill_latency,
  // prefill_throughput, [median_decode_latency, median_decode_throughput,] total_latency,
  // overall_throughput.
  nlohmann::json to_json() const;
};

// Why a combination cannot run on this runner, or nothing: SGLang's rule
// batch > max_total_tokens / (input + output) (with input + output rounded up to whole pages),
// more requests than rows, or input + output over the context length.
std::optional<std::string> one_batch_misfit(const model::ModelRunner& runner, int32_t batch_size,
                                            int32_t input_len, int32_t output_len);

// One run; the combination must fit (one_batch_misfit). Progress lines as SGLang prints them
// ("Prefill. latency: ...", the first five "Decode i. ..." lines, "Decode.  median ...",
// "Total. ...") go to `log`. kOutOfMemory if the pools do not hold the batch after all.
Result<OneBatchResult> run_one_batch_once(model::ModelRunner& runner, const std::string& run_name,
                                          int32_t batch_size, int32_t input_len, int32_t output_len,
                                          uint64_t seed,
                                          const std::function<void(std::string_view)>& log);

// The warmup, then every (batch, input, output) of the sweep in SGLang's order; combinations
// that do not fit are skipped with a "skipping (b, i, o) ..." line. kInvalidArgument for empty
// lists or a value < 1.
Result<std::vector<OneBatchResult>> run_one_batch_sweep(
    model::ModelRunner& runner, const OneBatchOptions& options,
    const std::function<void(std::string_view)>& log);

}  // namespace kvserve::bench
