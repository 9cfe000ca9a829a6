// LogitRules: per-request rules a request's raw logits go through before sampling, the decoding
// rules of a model that the engine applies for it (Whisper's generation_config.json:
// suppress_tokens at every step, begin_suppress_tokens at the first generated token, as
// transformers' SuppressTokensLogitsProcessor and SuppressTokensAtBeginLogitsProcessor). The
// engine attaches the model's rules to every request of an encoder-decoder model; a request may
// bring its own. A request with rules samples on the host (its logits row is copied, the rules
// applied to the copy); logprobs are then those of the ruled row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/checkpoint/whisper_config.h"

namespace kvserve::engine {

struct LogitRules {
  std::vector<int32_t> suppress_tokens;        // -inf at every step
  std::vector<int32_t> begin_suppress_tokens;  // -inf at the first generated token too

  bool empty() const { return suppress_tokens.empty() && begin_suppress_tokens.empty(); }
  // The rules for the request's generated token number `step` (0: its first). Ids outside the
  // row are ignored.
  void apply(std::span<float> logits, int64_t step) const;
};

// A Whisper checkpoint's rules: generation_config.json's suppress_tokens and
// begin_suppress_tokens.
LogitRules whisper_logit_rules(const checkpoint::WhisperGenerationConfig& generation);

}  // namespace kvserve::engine
