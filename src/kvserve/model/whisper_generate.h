// Decoding of Whisper requests on a WhisperRunner, as transformers'
// WhisperForConditionalGeneration.generate(num_beams=1) does for short-form audio (one 30 s
// window, no timestamps):
//   prompt = <|startoftranscript|> [<|lang|> <|task|> if multilingual] [<|notimestamps|>];
//   at every step suppress_tokens get -inf, at the first generated step begin_suppress_tokens too;
//   the next token is the argmax (temperature 0: do_sample=False) or a draw from
//   softmax(logits / temperature) (whisper_pick_token); a request stops at an eos token (kept) or
//   at max_length tokens (prompt included) or after max_new_tokens. A temperature is used as given:
//   no fallback to higher temperatures on a failed compression-ratio or logprob check
//   (openai-whisper does that for long-form audio).
// All requests are prefilled in one batch (encoder K/V stored once), then decoded together.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvserve/model/whisper_front_end.h"
#include "kvserve/model/whisper_runner.h"

namespace kvserve::model {

// Where whisper_generate reports its progress (bench-one-batch times the phases):
// kEncoded once every encoder output is in device memory (before any KV is allocated), kPicked
// after each step's tokens are picked (the first one ends the prefill, each later one a decode
// step).
enum class WhisperGeneratePoint { kEncoded, kPicked };

struct WhisperGenerateOptions {
  std::string language = "en";      // "en" or "<|en|>"; multilingual models only
  std::string task = "transcribe";  // or "translate"; multilingual models only
  int32_t max_new_tokens = 0;       // 0: until max_length
  bool keep_logits = false;         // keep each step's raw logits (before suppression)
  bool ignore_eos = false;          // stop only at the length limit (benchmarks: a fixed batch)
  std::function<void(WhisperGeneratePoint)> on_progress = nullptr;  // optional
};

struct WhisperRequest {
  // [num_mel_bins, input_frames()] row-major; empty: a text-only request (encoder_len 0).
  std::vector<float> features;
  std::vector<int32_t> prompt;  // empty: whisper_prompt(language, task)
  float temperature = 0.0f;     // 0: greedy; > 0: sampled (whisper_pick_token)
  uint64_t seed = 0;            // the draws of a sampled request: (seed, step), batch-independent
};

struct WhisperGenerateResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;                  // generated, a final eos included
  std::vector<std::vector<float>> step_logits;  // one per generated token when keep_logits
};

// suppress_tokens -> -inf; also begin_suppress_tokens when `first_step`. Ids outside the
// vocabulary are ignored.
void apply_whisper_suppression(const checkpoint::WhisperGenerationConfig& generation,
                               bool first_step, std::span<float> logits);

// The next token from a suppressed logits row: the argmax (the first on ties, as torch.argmax) at
// temperature 0, else a draw from softmax(row / temperature) over the whole vocabulary by the host
// sampler (ops::cpu::sample_row: the engine's semantics; counter-based on (seed, step), so a
// request draws the same tokens whatever else is in its batch). Suppressed tokens (-inf) are never
// drawn.
int32_t whisper_pick_token(std::span<const float> suppressed_row, float temperature, uint64_t seed,
                           int64_t step);

// kInvalidArgument for bad features, a negative or non-finite temperature, or a prompt that leaves
// no room to generate; kOutOfMemory when the runner has no rows or slots for the batch (nothing
// stays allocated on any failure).
Result<std::vector<WhisperGenerateResult>> whisper_generate(
    WhisperRunner& runner, std::span<const WhisperRequest> requests,
    const WhisperGenerateOptions& options);

}  // namespace kvserve::model
