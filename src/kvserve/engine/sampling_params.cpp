#include "kvserve/engine/sampling_params.h"

namespace kvserve::engine {

Status validate(const SamplingParams& p, int32_t vocab_size) {
  if (p.max_new_tokens < 0)
    return invalid_argument("max_new_tokens must be >= 0, got {}", p.max_new_tokens);
  if (!(p.temperature >= 0.0f))
    return invalid_argument("temperature must be >= 0, got {}", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got {}", p.top_p);
  if (p.top_k == 0 || p.top_k < -1)
    return invalid_argument("top_k must be -1 or >= 1, got {}", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return invalid_argument("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) {
    return invalid_argument("repetition_penalty must be in (0, 2], got {}", p.repetition_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return invalid_argument("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return invalid_argument("presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  }
  if (p.min_new_tokens < 0 || p.min_new_tokens > p.max_new_tokens) {
    return invalid_argument("min_new_tokens must be in [0, max_new_tokens], got {}",
                            p.min_new_tokens);
  }
  if (p.top_logprobs_num < 0 || p.top_logprobs_num > 20) {
    return invalid_argument("top_logprobs_num must be in [0, 20], got {}", p.top_logprobs_num);
  }
  for (const int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("stop_token_ids: {} is outside the vocabulary of {}", id, vocab_size);
    }
  }
  return Status::ok();
}

}  // namespace kvserve::engine
