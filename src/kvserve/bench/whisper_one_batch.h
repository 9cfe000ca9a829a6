// `kvserve bench-one-batch` on a Whisper checkpoint: the latency of one static batch of
// transcriptions on a WhisperRunner's ModelRunner, per encoder KV layout (mem/encoder_layout.h),
// without a server.
//
// Every request gets seeded random log-mel features [num_mel_bins, 2 * max_source_positions] (so
// the encoder emits max_source_positions tokens, 1500 for real Whisper) and a decoder prompt
// (the front end's <|startoftranscript|> prompt, or a given length of it followed by random text
// ids). The batch runs through the engine's Scheduler (engine/scheduler.h) on the runner's
// ModelRunner, the server's own path, greedy with eos ignored so every step decodes the whole
// batch, and is timed between device synchronizations:
//   encoder  every request's encoder output into device memory (timed inside the prefill step by
//            the runner: ModelRunner::set_encoder_timing);
//   prefill  the rest of the prefill step: rows allocated, the cross K/V of every decoder layer
//            written into the encoder regions, the prompt's self K/V and the first greedy pick;
//   decode   each of output_len - 1 scheduler steps (a slot per request, forward, suppression,
//            argmax).
// Each run also reports what its layout costs per request: the encoder region's padding (aligned
// layout) and, for a backend that gathers the cache into contiguous buffers (cuda-ragged, native),
// the encoder K/V bytes each decode step copies.
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
#include "kvserve/model/whisper_generate.h"
#include "kvserve/model/whisper_runner.h"

namespace kvserve::bench {

struct WhisperOneBatchOptions {
  std::string run_name = "default";
  std::vector<int32_t> batch_sizes = {1};
  std::vector<int32_t> decoder_input_lens = {0};  // 0: the transcriber's prompt
  std::vector<int32_t> output_lens = {16};
  uint64_t seed = 0;
  bool warmup = true;
};

// What the runner's encoder KV layout costs one request.
struct WhisperLayoutAccounting {
  std::string layout;  // "aligned" or "ragged"
  int32_t page_size = 1;
  std::string attention_backend;
  int32_t encoder_len = 0;           // encoder tokens (max_source_positions)
  int32_t encoder_reserved_len = 0;  // row positions the encoder region takes
  int32_t padding_slots = 0;         // encoder_reserved_len - encoder_len
  int64_t padding_bytes = 0;         // those slots' K and V over every decoder layer
  bool gathers = false;              // the backend copies K/V into contiguous buffers
  // Encoder K/V bytes one decode step of the whole batch copies when `gathers` (else 0):
  // batch x encoder_len x decoder_layers x 2 (K, V) x kv_heads x head_dim x dtype bytes.
  int64_t gathered_bytes_per_step = 0;
};

struct WhisperOneBatchResult : DecodeTiming {
  std::string run_name;
  std::string device;
  int32_t batch_size = 0;
  int32_t decoder_input_len = 0;  // prompt tokens per request
  int32_t output_len = 0;         // generated tokens per request
  WhisperLayoutAccounting layout;
  double encoder_latency = 0;     // seconds
  double encoder_throughput = 0;  // batch * encoder_len / latency, tokens/s
  double prefill_latency = 0;     // seconds
  double prefill_throughput = 0;  // batch * decoder_input_len / latency
  // DecodeTiming: total_latency is encoder + prefill + every decode step, overall_throughput
  // (decoder_input_len + output_len) * batch / total_latency.
  std::vector<int32_t> first_request_tokens;  // what request 0 generated (not in the JSON)

  // One JSON line: the run, the latencies and the layout accounting.
  nlohmann::json to_json() const;
};

// The runner's layout accounting for a batch of `batch_size`.
WhisperLayoutAccounting whisper_layout_accounting(model::WhisperRunner& runner, int32_t batch_size);

// The batch a run with `seed` decodes: features and prompts, request-major.
Result<std::vector<model::WhisperRequest>> whisper_one_batch_requests(
    const model::WhisperRunner& runner, int32_t batch_size, int32_t decoder_input_len,
    uint64_t seed);

// Why a combination cannot run on this runner, or nothing: more requests than rows, a prompt +
// output past the decoder's length limit, or batch x whole pages of (reserved encoder + prompt +
// output) over the pool.
std::optional<std::string> whisper_one_batch_misfit(model::WhisperRunner& runner,
                                                    int32_t batch_size, int32_t decoder_input_len,
                                                    int32_t output_len);

// One run on a runner whose rows and slots are all free (CHECKed before and after). Progress
// lines as bench-one-batch prints them ("Encoder. latency: ...", "Prefill. ...", the first five
// "Decode i. ...", "Decode.  median ...", "Total. ...", "Layout. ...") go to `log`.
Result<WhisperOneBatchResult> run_whisper_one_batch_once(
    model::WhisperRunner& runner, const std::string& run_name, int32_t batch_size,
    int32_t decoder_input_len, int32_t output_len, uint64_t seed,
    const std::function<void(std::string_view)>& log);

// The warmup (first batch size and prompt, min(32, first output length)), then every
// (batch, prompt, output) in that order; combinations that do not fit are skipped with a
// "skipping (b, i, o) ..." line. kInvalidArgument for empty lists or bad values.
Result<std::vector<WhisperOneBatchResult>> run_whisper_one_batch_sweep(
    model::WhisperRunner& runner, const WhisperOneBatchOptions& options,
    const std::function<void(std::string_view)>& log);

}  // namespace kvserve::bench
