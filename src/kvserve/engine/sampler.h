// Token sampling from one request's logits (host, f32).
//
// The semantics are those of ops::sample_rows (platform/ops/sampling_params.h), and the host path
// runs its CPU implementation, so host and device samplers share one definition. Order, as SGLang
// and vLLM apply it: penalties (repetition over prompt and output tokens, frequency and presence
// over output tokens) -> greedy argmax, or temperature -> top-k -> top-p -> min-p -> a draw. The
// kept tokens are visited in token-id order for the draw (the same distribution as visiting them
// by probability; the device needs no sort for it). The draw uses a counter-based random stream
// keyed by (seed, step), so a seeded request samples the same tokens whatever else is in its
// batch. Logprobs are those of the model's distribution: log_softmax of the raw logits (before
// penalties and temperature).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kvserve/engine/sampling_params.h"
#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::engine {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                                 // of `token`
  std::vector<std::pair<int32_t, float>> top_logprobs;  // params.top_logprobs_num best
};

// The kernel's per-row parameters for a request. `step` = the number of tokens this request has
// generated so far; `seed` is the request's seed (SamplingParams::seed, or one the engine drew for
// it at admission).
ops::SampleRowParams sample_row_params(const SamplingParams& params, uint64_t seed, int64_t step);

// `penalties`: the request's PenaltyCounts entries (penalties.h); ignored without penalties.
SampledToken sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const ops::PenaltyEntry> penalties, uint64_t seed, int64_t step);
// The same, counting the penalty set from the token lists (O(prompt + output); tests, one-offs).
SampledToken sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                    uint64_t seed, int64_t step);

// Whether a request's logprobs need its raw logits row on the host after sampling: top-N
// logprobs, or the chosen token's logprob under penalties (the sampler rewrites a penalized row in
// place, on the device as on the host).
bool needs_raw_logits(const SamplingParams& params);
// The logprob of t.token and the top-N of the raw row, as params ask (what sample() adds to the
// token; the device path calls it on the rows it copied back).
void fill_logprobs(SampledToken& t, std::span<const float> raw, const SamplingParams& params);

// log_softmax of raw logits at `token`, and the `k` most likely tokens (ties: lower id first).
float token_logprob(std::span<const float> logits, int32_t token);
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace kvserve::engine
