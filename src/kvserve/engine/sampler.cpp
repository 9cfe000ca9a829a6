#include "kvserve/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvserve/core/check.h"
#include "kvserve/engine/penalties.h"
#include "kvserve/platform/ops/sampling.h"

namespace kvserve::engine {

ops::SampleRowParams sample_row_params(const SamplingParams& p, uint64_t seed, int64_t step) {
  return {.temperature = p.temperature,
          .top_k = p.top_k,
          .top_p = p.top_p,
          .min_p = p.min_p,
          .repetition_penalty = p.repetition_penalty,
          .frequency_penalty = p.frequency_penalty,
          .presence_penalty = p.presence_penalty,
          .greedy = p.greedy() ? 1 : 0,
          .seed = seed,
          .step = step};
}

float token_logprob(std::span<const float> logits, int32_t token) {
  return ops::cpu::token_logprob(logits, token);
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k) {
  k = std::min<int32_t>(k, static_cast<int32_t>(logits.size()));
  if (k <= 0) return {};
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const float m = logits[ids[0]];
  double s = 0;
  for (const float v : logits)
    s += std::exp(static_cast<double>(v) - m);
  const double lse = m + std::log(s);
  std::vector<std::pair<int32_t, float>> out(k);
  for (int32_t i = 0; i < k; ++i)
    out[i] = {ids[i], static_cast<float>(logits[ids[i]] - lse)};
  return out;
}

SampledToken sample(std::span<const float> raw, const SamplingParams& p,
                    std::span<const ops::PenaltyEntry> penalties, uint64_t seed, int64_t step) {
  KV_CHECK(!raw.empty(), "no logits");
  const ops::SampleRowParams row = sample_row_params(p, seed, step);
  // Penalties work on a copy; without them the row is read in place (a 128k-entry row is 512 KB,
  // and a fresh allocation of that size costs page faults on every token).
  std::vector<float> adjusted;
  std::span<const float> logits = raw;
  if (p.has_penalties() && !penalties.empty()) {
    adjusted.assign(raw.begin(), raw.end());
    ops::cpu::apply_penalties(adjusted, row, penalties);
    logits = adjusted;
  }
  SampledToken out;
  out.token = ops::cpu::sample_row(logits, row);
  fill_logprobs(out, raw, p);
  return out;
}

bool needs_raw_logits(const SamplingParams& p) {
  return p.top_logprobs_num > 0 || (p.return_logprob && p.has_penalties());
}

void fill_logprobs(SampledToken& t, std::span<const float> raw, const SamplingParams& p) {
  if (p.return_logprob || p.top_logprobs_num > 0) {
    t.logprob = token_logprob(raw, t.token);
    t.top_logprobs = top_logprobs(raw, p.top_logprobs_num);
  }
}

SampledToken sample(std::span<const float> logits, const SamplingParams& p,
                    std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                    uint64_t seed, int64_t step) {
  if (!p.has_penalties())
    return sample(logits, p, std::span<const ops::PenaltyEntry>(), seed, step);
  const PenaltyCounts counts(prompt_ids, output_ids);
  return sample(logits, p, counts.entries(), seed, step);
}

}  // namespace kvserve::engine
