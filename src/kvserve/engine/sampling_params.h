// Per-request sampling parameters (SGLang's SamplingParams; the same names and defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::engine {

struct SamplingParams {
  int32_t max_new_tokens = 128;
  float temperature = 1.0f;         // below 1e-6: greedy
  float top_p = 1.0f;               // in (0, 1]
  int32_t top_k = -1;               // -1: the whole vocabulary
  float min_p = 0.0f;               // in [0, 1]
  float repetition_penalty = 1.0f;  // in (0, 2]; over prompt and output tokens (HF style)
  float frequency_penalty = 0.0f;   // in [-2, 2]; over output tokens (OpenAI style)
  float presence_penalty = 0.0f;    // in [-2, 2]
  std::optional<uint64_t> seed;     // per-request seed: same seed, same tokens, any batching
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t min_new_tokens = 0;
  bool return_logprob = false;
  int32_t top_logprobs_num = 0;

  bool greedy() const { return temperature < 1e-6f || top_k == 1; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  // Greedy, and nothing else reads the logits row: the argmax can be taken on the device.
  bool device_greedy() const {
    return greedy() && !has_penalties() && !return_logprob && top_logprobs_num == 0;
  }
};

// kInvalidArgument naming the field and the allowed range.
Status validate(const SamplingParams& p, int32_t vocab_size);

}  // namespace kvserve::engine
