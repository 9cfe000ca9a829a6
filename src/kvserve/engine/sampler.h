// Token sampling from one request's logits (host, f32).
//
// Order, as SGLang and vLLM apply it: penalties (repetition over prompt and output tokens,
// frequency and presence over output tokens) -> greedy argmax, or temperature -> top-k -> top-p ->
// min-p -> a draw. The draw uses a counter-based random stream keyed by (seed, step), so a seeded
// request samples the same tokens whatever else is in its batch. Logprobs are those of the
// model's distribution: log_softmax of the raw logits (before penalties and temperature).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kvserve/engine/sampling_params.h"

namespace kvserve::engine {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                                 // of `token`
  std::vector<std::pair<int32_t, float>> top_logprobs;  // params.top_logprobs_num best
};

// `step` = the number of tokens this request has generated so far. `seed` is the request's
// seed (SamplingParams::seed, or one the engine drew for it at admission).
SampledToken sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                    uint64_t seed, int64_t step);

// log_softmax of raw logits at `token`, and the `k` most likely tokens (ties: lower id first).
float token_logprob(std::span<const float> logits, int32_t token);
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace kvserve::engine
