#include "support/sampling_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "kvserve/platform/ops/sampling.h"

namespace kvserve::test_support {

void reference_penalties(std::vector<float>& logits, const ops::SampleRowParams& p,
                         std::span<const int32_t> prompt, std::span<const int32_t> output) {
  if (p.repetition_penalty != 1.0f) {
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (const int32_t t : seen) {
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  std::map<int32_t, int32_t> counts;
  for (const int32_t t : output)
    ++counts[t];
  for (const auto& [t, n] : counts) {
    const float f = p.frequency_penalty * static_cast<float>(n);
    logits[static_cast<size_t>(t)] -= f + p.presence_penalty;
  }
}

ReferenceSample reference_sample(std::span<const float> logits, const ops::SampleRowParams& p) {
  const auto n = static_cast<int32_t>(logits.size());
  ReferenceSample out;
  out.margin = std::numeric_limits<double>::infinity();
  if (p.greedy != 0) {
    out.token = 0;
    for (int32_t i = 1; i < n; ++i) {
      if (logits[i] > logits[out.token]) out.token = i;
    }
    out.kept = {out.token};
    out.probs = {1.0};
    return out;
  }
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const int32_t k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  const double t = p.temperature;
  std::vector<double> pr(static_cast<size_t>(k));
  double sum = 0;
  for (int32_t i = 0; i < k; ++i)
    sum += pr[i] = std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / t);
  int32_t keep = k;
  if (p.top_p < 1.0f) {
    const double target = static_cast<double>(p.top_p) * sum;
    double mass = 0;
    for (int32_t i = 0; i < k; ++i) {
      const double before = mass;
      mass += pr[i];
      if (mass >= target) {
        keep = i + 1;
        out.margin = std::min(out.margin, std::abs(mass - target) / target);
        if (i > 0) out.margin = std::min(out.margin, std::abs(target - before) / target);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int32_t m = 0;
    while (m < keep && pr[m] >= p.min_p)
      ++m;
    // The candidates nearest the floor on either side.
    for (int32_t i = std::max(0, m - 1); i < std::min(keep, m + 1); ++i)
      out.margin = std::min(out.margin, std::abs(pr[i] - p.min_p) / p.min_p);
    keep = std::max(m, 1);
  }
  std::vector<std::pair<int32_t, double>> kept;
  for (int32_t i = 0; i < keep; ++i)
    kept.emplace_back(order[i], pr[i]);
  std::sort(kept.begin(), kept.end());
  double total = 0;
  for (const auto& [id, w] : kept)
    total += w;
  const double u = ops::sampling_uniform01(p.seed, p.step) * total;
  double acc = 0;
  out.token = kept.back().first;
  bool found = false;
  for (const auto& [id, w] : kept) {
    out.kept.push_back(id);
    out.probs.push_back(w / total);
    const double before = acc;
    acc += w;
    if (!found && u < acc) {
      // Only the chosen token's two cumulative boundaries can flip the draw.
      out.token = id;
      found = true;
      out.margin = std::min({out.margin, (u - before) / total, (acc - u) / total});
    }
  }
  return out;
}

}  // namespace kvserve::test_support
