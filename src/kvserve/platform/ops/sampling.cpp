// ops::sample_rows: the checks, the dispatch, and the CPU implementation (the engine's host
// sampler). The CPU side sorts (partial_sort by (logit desc, id asc)) because it is the readable
// statement of the semantics; the CUDA kernel finds the same thresholds without a sort.
#include "kvserve/platform/ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/sampling_radix.h"

namespace kvserve::ops {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

double sampling_uniform01(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

void sample_rows(platform::Platform& p, const SampleRowsParams& params,
                 platform::StreamHandle stream, SampleSelect select) {
  KV_CHECK(params.rows >= 0 && params.vocab > 0 && params.ld >= params.vocab,
           "sample_rows: rows {}, vocab {}, ld {}", params.rows, params.vocab, params.ld);
  KV_CHECK(params.vocab < (int64_t{1} << 31), "sample_rows: vocab {} over int32", params.vocab);
  KV_CHECK(params.rows == 0 || (params.logits != nullptr && params.row_params != nullptr &&
                                params.out_tokens != nullptr),
           "sample_rows: null logits, row params or output");
  // Offsets without entries is a batch whose rows all have zero entries (an empty vector's
  // data() is null); entries without offsets cannot be read.
  KV_CHECK(params.penalty_entries == nullptr || params.penalty_offsets != nullptr,
           "sample_rows: penalty entries without offsets");
  if (params.rows == 0) return;
  switch (p.device().kind) {
    case DeviceKind::kCpu:
      return cpu::sample_rows(params);
    case DeviceKind::kCuda:
      if (select == SampleSelect::kRadix) {
        return platform::cuda::sample_rows_radix(params, p.resolve(stream));
      }
      return platform::cuda::sample_rows(params, p.resolve(stream));
  }
}

namespace cpu {

void apply_penalties(std::span<float> logits, const SampleRowParams& p,
                     std::span<const PenaltyEntry> penalties) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const PenaltyEntry& e : penalties) {
    if (e.token < 0 || e.token >= vocab) continue;
    float& l = logits[e.token];
    if (p.repetition_penalty != 1.0f && (e.in_prompt != 0 || e.output_count > 0)) {
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    if (e.output_count > 0) {
      // Two roundings, as the kernel does (__fmul_rn, __fadd_rn: no fused multiply-add).
      const float f = p.frequency_penalty * static_cast<float>(e.output_count);
      l -= f + p.presence_penalty;
    }
  }
}

float token_logprob(std::span<const float> logits, int32_t token) {
  KV_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "token {}", token);
  const float m = *std::max_element(logits.begin(), logits.end());
  double s = 0;
  for (const float v : logits)
    s += std::exp(static_cast<double>(v) - m);
  return static_cast<float>(logits[token] - (m + std::log(s)));
}

int32_t sample_row(std::span<const float> logits, const SampleRowParams& p) {
  KV_CHECK(!logits.empty(), "no logits");
  const auto n = static_cast<int32_t>(logits.size());
  if (p.greedy != 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  KV_CHECK(p.temperature > 0, "sample_row: temperature {} on a non-greedy row", p.temperature);
  // The kept set: a prefix of the order (logit desc, id asc).
  const double inv_t = 1.0 / p.temperature;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const int32_t k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(static_cast<size_t>(k));
  const double top = logits[ids[0]] * inv_t;
  std::vector<double> probs(static_cast<size_t>(k));
  double sum = 0;
  for (int32_t i = 0; i < k; ++i)
    sum += probs[i] = std::exp(logits[ids[i]] * inv_t - top);
  // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
  int32_t keep = k;
  if (p.top_p < 1.0f) {
    const double target = p.top_p * sum;
    double mass = 0;
    for (int32_t i = 0; i < k; ++i) {
      mass += probs[i];
      if (mass >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p times the most likely one (probs[0] == 1).
  if (p.min_p > 0.0f) {
    int32_t m = 0;
    while (m < keep && probs[m] >= p.min_p)
      ++m;
    keep = std::max(m, 1);
  }
  // The draw, visiting the kept tokens in id order (sampling_params.h).
  std::vector<std::pair<int32_t, double>> kept(static_cast<size_t>(keep));
  for (int32_t i = 0; i < keep; ++i)
    kept[i] = {ids[i], probs[i]};
  std::sort(kept.begin(), kept.end());
  double mass = 0;
  for (const auto& [id, prob] : kept)
    mass += prob;
  const double u = sampling_uniform01(p.seed, p.step) * mass;
  double acc = 0;
  for (const auto& [id, prob] : kept) {
    acc += prob;
    if (u < acc) return id;
  }
  return kept.back().first;
}

void sample_rows(const SampleRowsParams& params) {
  for (int64_t r = 0; r < params.rows; ++r) {
    std::span<float> row(params.logits + r * params.ld, static_cast<size_t>(params.vocab));
    const SampleRowParams& rp = params.row_params[r];
    std::span<const PenaltyEntry> pen;
    if (params.penalty_offsets != nullptr) {
      const int32_t b = params.penalty_offsets[r];
      const int32_t e = params.penalty_offsets[r + 1];
      KV_CHECK(0 <= b && b <= e, "sample_rows: penalty offsets {}..{} of row {}", b, e, r);
      KV_CHECK(params.penalty_entries != nullptr || b == e,
               "sample_rows: row {} has {} penalty entries but no entry array", r, e - b);
      pen = {params.penalty_entries + b, static_cast<size_t>(e - b)};
    }
    apply_penalties(row, rp, pen);
    const int32_t token = sample_row(row, rp);
    params.out_tokens[r] = token;
    if (params.out_logprobs != nullptr) {
      params.out_logprobs[r] = pen.empty() ? token_logprob(row, token) : std::nanf("");
    }
  }
}

}  // namespace cpu
}  // namespace kvserve::ops
