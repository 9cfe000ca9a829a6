// A float64 statement of the sampling semantics (platform/ops/sampling_params.h), independent of
// the library's samplers: a full sort for the kept set, the draw in id order, and how close a row
// is to a decision boundary (so tests comparing two f32/f64 implementations can skip rows where
// rounding may legitimately flip the token, and count them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::test_support {

// The old host sampler's penalty loops over the token lists (f32 arithmetic, two roundings for
// frequency * count + presence).
void reference_penalties(std::vector<float>& logits, const ops::SampleRowParams& p,
                         std::span<const int32_t> prompt, std::span<const int32_t> output);

struct ReferenceSample {
  int32_t token = 0;
  std::vector<int32_t> kept;  // ascending ids
  std::vector<double> probs;  // the kept distribution (sums to 1), parallel to `kept`
  // The smallest relative distance of a rounding-sensitive decision to its boundary: the draw
  // (u's distance to the chosen token's cumulative bounds / kept mass), top-p (|prefix mass -
  // target| / target at the cut) and min-p
  // (|p / p_max - min_p| / min_p over the candidates). Infinity for greedy rows.
  double margin = 0;
};

// On an already penalized row. Greedy rows: the first maximum, margin infinity.
ReferenceSample reference_sample(std::span<const float> logits, const ops::SampleRowParams& p);

}  // namespace kvserve::test_support
