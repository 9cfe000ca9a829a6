// Req: one request inside the engine (SGLang's Req), owned by the engine thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/engine/disagg_target.h"
#include "kvserve/engine/logit_rules.h"
#include "kvserve/engine/penalties.h"
#include "kvserve/engine/request_stream.h"
#include "kvserve/engine/sampling_params.h"
#include "kvserve/mem/prefix_cache.h"

namespace kvserve::engine {

using Clock = std::chrono::steady_clock;

struct Req {
  uint64_t id = 0;
  std::string rid;  // the client-visible id
  std::vector<int32_t> origin_input_ids;
  std::vector<int32_t> output_ids;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<std::string> stop_strings;
  int32_t logprob_start_len = -1;  // -1: no input logprobs
  // With penalties: the prompt's and output's token counts, built at the first sampling and
  // updated per generated token (so a step does not recount the prompt).
  std::optional<PenaltyCounts> penalties;
  // Rules applied to the raw logits before sampling (logit_rules.h); null: none.
  std::shared_ptr<const LogitRules> logit_rules;

  // Encoder-decoder models: the encoder's input (Whisper: log-mel features), run as part of every
  // prefill of the request (again after a retraction); null for a text-only request. Its row is
  // [encoder region | decoder region]: the encoder output takes encoder_len positions (0 without
  // input), the region encoder_reserved positions (the scheduler's EncoderSplit sets it at
  // add_request), and origin_input_ids /
  // output_ids are the decoder's tokens.
  std::shared_ptr<const std::vector<float>> encoder_input;
  int32_t encoder_len = 0;
  int32_t encoder_reserved = 0;

  // This round: input + output tokens (truncated to the current chunk when chunked), and how many
  // of them the extend computes after the prefix.
  std::vector<int32_t> fill_ids;
  int32_t extend_input_len = 0;
  bool chunked = false;  // the current round is an intermediate chunk

  mem::KvReqState kv;
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache (first admission)
  int32_t retractions = 0;
  std::vector<float> input_logprobs;  // for positions logprob_start_len + 1 .. len(input) - 1

  FinishReason finish;
  bool abort_requested = false;

  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;

  std::shared_ptr<RequestStream> stream;

  // Prefill/decode disaggregation: the request's other half (null: served here alone), and on
  // the prefill side the events its forward produced, held until its KV transfer ends.
  std::optional<DisaggTarget> disagg;
  std::vector<StreamEvent> held_events;

  int32_t input_len() const { return static_cast<int32_t>(origin_input_ids.size()); }
  int32_t output_len() const { return static_cast<int32_t>(output_ids.size()); }
  bool finished() const { return finish.kind != FinishKind::kNone; }
  // Input followed by output: what the KV cache holds (all but the last sampled token).
  std::vector<int32_t> all_ids() const {
    std::vector<int32_t> ids = origin_input_ids;
    ids.insert(ids.end(), output_ids.begin(), output_ids.end());
    return ids;
  }
};

}  // namespace kvserve::engine
