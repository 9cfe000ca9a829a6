#include "kvserve/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "kvserve/core/check.h"

namespace kvserve::engine {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, step), independent of batch composition.
double uniform01(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

double log_sum_exp(std::span<const float> x) {
  const float m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (const float v : x)
    s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

void apply_penalties(std::vector<float>& logits, const SamplingParams& p,
                     std::span<const int32_t> prompt, std::span<const int32_t> output) {
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(logits.size());
    for (const auto ids : {prompt, output}) {
      for (const int32_t t : ids) {
        if (t < 0 || static_cast<size_t>(t) >= logits.size() || seen[t]) continue;
        seen[t] = 1;
        logits[t] =
            logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
      }
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (const int32_t t : output)
      ++counts[t];
    for (const auto& [t, n] : counts) {
      if (t < 0 || static_cast<size_t>(t) >= logits.size()) continue;
      logits[t] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
    }
  }
}

int32_t argmax(std::span<const float> x) {
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

}  // namespace

float token_logprob(std::span<const float> logits, int32_t token) {
  KV_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "token {}", token);
  return static_cast<float>(logits[token] - log_sum_exp(logits));
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k) {
  k = std::min<int32_t>(k, static_cast<int32_t>(logits.size()));
  if (k <= 0) return {};
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double lse = log_sum_exp(logits);
  std::vector<std::pair<int32_t, float>> out(k);
  for (int32_t i = 0; i < k; ++i)
    out[i] = {ids[i], static_cast<float>(logits[ids[i]] - lse)};
  return out;
}

SampledToken sample(std::span<const float> raw, const SamplingParams& p,
                    std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                    uint64_t seed, int64_t step) {
  KV_CHECK(!raw.empty(), "no logits");
  // Penalties work on a copy; without them the row is read in place (a 128k-entry row is 512 KB,
  // and a fresh allocation of that size costs page faults on every token).
  std::vector<float> adjusted;
  std::span<const float> logits = raw;
  if (p.has_penalties()) {
    adjusted.assign(raw.begin(), raw.end());
    apply_penalties(adjusted, p, prompt_ids, output_ids);
    logits = adjusted;
  }
  SampledToken out;
  if (p.greedy()) {
    out.token = argmax(logits);
  } else {
    // Candidates by probability after temperature, most likely first.
    const double inv_t = 1.0 / p.temperature;
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, ids.size()) : ids.size();
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
    ids.resize(k);
    const double top = logits[ids[0]] * inv_t;
    std::vector<double> probs(k);
    double sum = 0;
    for (size_t i = 0; i < k; ++i)
      sum += probs[i] = std::exp(logits[ids[i]] * inv_t - top);
    // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
    size_t keep = k;
    if (p.top_p < 1.0f) {
      double mass = 0;
      for (size_t i = 0; i < k; ++i) {
        mass += probs[i] / sum;
        if (mass >= p.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    // min-p: drop tokens below min_p times the most likely one.
    if (p.min_p > 0.0f) {
      const double floor = p.min_p * probs[0];
      size_t n = 0;
      while (n < keep && probs[n] >= floor)
        ++n;
      keep = std::max<size_t>(n, 1);
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i)
      kept += probs[i];
    const double u = uniform01(seed, step) * kept;
    double acc = 0;
    out.token = ids[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      acc += probs[i];
      if (u < acc) {
        out.token = ids[i];
        break;
      }
    }
  }
  if (p.return_logprob || p.top_logprobs_num > 0) {
    out.logprob = token_logprob(raw, out.token);
    out.top_logprobs = top_logprobs(raw, p.top_logprobs_num);
  }
  return out;
}

}  // namespace kvserve::engine
