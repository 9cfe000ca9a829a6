// Sampling: penalties, greedy, filters, the seeded draw's distribution, logprobs, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kvserve/engine/sampler.h"

namespace kvserve::engine {
namespace {

std::vector<double> softmax(const std::vector<float>& x, double t = 1.0) {
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, double(v) / t);
  std::vector<double> p(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(double(x[i]) / t - mx);
  for (auto& v : p) v /= s;
  return p;
}

TEST(Sampler, GreedyAndPenalties) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 2.9f};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample(logits, p, {}, {}, 1, 0).token, 1);
  // Repetition penalty 2 on token 1 (positive logit: divided): 3 -> 1.5, so 3 wins with 2.9.
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1};
  EXPECT_EQ(sample(logits, p, prompt, {}, 1, 0).token, 3);
  // A negative logit is multiplied: token 2 (-2) must stay the least likely.
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 1.0f;  // output tokens 1, 1, 3: 3 - 2 = 1, 2.9 - 1 = 1.9
  const std::vector<int32_t> out = {1, 1, 3};
  EXPECT_EQ(sample(logits, p, {}, out, 1, 0).token, 3);
  p.frequency_penalty = 0;
  p.presence_penalty = 1.5f;  // 3 - 1.5 = 1.5, 2.9 - 1.5 = 1.4, so 0 (1.0) < 1.5: token 1
  EXPECT_EQ(sample(logits, p, {}, out, 1, 0).token, 1);
  p.presence_penalty = 0;
  p.temperature = 1.0f;
  p.top_k = 1;  // top_k 1 is greedy
  EXPECT_EQ(sample(logits, p, {}, {}, 99, 5).token, 1);
}

TEST(Sampler, SeededDrawsFollowTheDistribution) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0.7f;
  const auto want = softmax(logits, 0.7);
  std::map<int32_t, int> count;
  const int n = 40000;
  for (int s = 0; s < n; ++s) ++count[sample(logits, p, {}, {}, uint64_t(s), 3).token];
  for (size_t i = 0; i < logits.size(); ++i) {
    const double f = double(count[int32_t(i)]) / n;
    EXPECT_NEAR(f, want[i], 4 * std::sqrt(want[i] * (1 - want[i]) / n) + 1e-3) << i;
  }
  // Same seed and step: same token; the draw does not depend on anything else.
  EXPECT_EQ(sample(logits, p, {}, {}, 7, 11).token, sample(logits, p, {}, {}, 7, 11).token);
}

TEST(Sampler, TopKTopPMinPRestrictTheSupport) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f, -1.0f};
  const auto probs = softmax(logits);
  SamplingParams p;
  p.top_k = 2;
  std::map<int32_t, int> seen;
  for (int s = 0; s < 3000; ++s) ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.contains(0) && seen.contains(1));

  p = SamplingParams{};
  p.top_p = static_cast<float>(probs[0] + probs[1] * 0.5);  // the first two reach top_p
  seen.clear();
  for (int s = 0; s < 3000; ++s) ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
  EXPECT_EQ(seen.size(), 2u);

  p = SamplingParams{};
  p.min_p = static_cast<float>(probs[2] / probs[0] * 1.01);  // token 2 is just below the floor
  seen.clear();
  for (int s = 0; s < 3000; ++s) ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
  EXPECT_EQ(seen.size(), 2u);
}

TEST(Sampler, LogprobsOfRawLogits) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 2.0f};
  const auto p = softmax(logits);
  EXPECT_NEAR(token_logprob(logits, 1), std::log(p[1]), 1e-6);
  const auto top = top_logprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 2);  // ties: lower id first
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 0);
  EXPECT_NEAR(top[2].second, std::log(p[0]), 1e-6);
  SamplingParams sp;
  sp.temperature = 0;
  sp.return_logprob = true;
  sp.top_logprobs_num = 2;
  sp.repetition_penalty = 2.0f;  // penalties change the choice, not the reported logprobs
  const std::vector<int32_t> prompt = {2, 3};
  const SampledToken t = sample(logits, sp, prompt, {}, 0, 0);
  EXPECT_EQ(t.token, 2);  // 2.0 / 2 = 1.0 for tokens 2 and 3, above token 0's 0.5: the first max
  EXPECT_NEAR(t.logprob, std::log(p[t.token]), 1e-6);
  EXPECT_EQ(t.top_logprobs.size(), 2u);
}

TEST(SamplingParams, ValidationNamesTheField) {
  const std::vector<std::pair<std::function<void(SamplingParams&)>, std::string>> bad = {
      {[](SamplingParams& p) { p.temperature = -1; }, "temperature"},
      {[](SamplingParams& p) { p.top_p = 0; }, "top_p"},
      {[](SamplingParams& p) { p.top_k = 0; }, "top_k"},
      {[](SamplingParams& p) { p.min_p = 2; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = 3; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = -3; }, "presence_penalty"},
      {[](SamplingParams& p) { p.max_new_tokens = -1; }, "max_new_tokens"},
      {[](SamplingParams& p) { p.stop_token_ids = {100}; }, "stop_token_ids"},
  };
  for (const auto& [mutate, field] : bad) {
    SamplingParams p;
    mutate(p);
    const Status s = validate(p, 50);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
  EXPECT_TRUE(validate(SamplingParams{}, 50).is_ok());
}

}  // namespace
}  // namespace kvserve::engine
