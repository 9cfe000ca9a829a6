// Sampling: penalties, greedy, filters, the seeded draw's distribution, logprobs, validation; the
// incremental penalty counts and their CSR; the host sampler (the CPU ops::sample_rows) against a
// float64 reference of the semantics (tests/support/sampling_reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <random>

#include "kvserve/engine/penalties.h"
#include "kvserve/engine/sampler.h"
#include "kvserve/platform/ops/sampling.h"
#include "kvserve/platform/platform.h"
#include "support/sampling_reference.h"

namespace kvserve::engine {
namespace {

std::vector<double> softmax(const std::vector<float>& x, double t = 1.0) {
  double mx = -INFINITY;
  for (float v : x)
    mx = std::max(mx, double(v) / t);
  std::vector<double> p(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i)
    s += p[i] = std::exp(double(x[i]) / t - mx);
  for (auto& v : p)
    v /= s;
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
  for (int s = 0; s < n; ++s)
    ++count[sample(logits, p, {}, {}, uint64_t(s), 3).token];
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
  for (int s = 0; s < 3000; ++s)
    ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.contains(0) && seen.contains(1));

  p = SamplingParams{};
  p.top_p = static_cast<float>(probs[0] + probs[1] * 0.5);  // the first two reach top_p
  seen.clear();
  for (int s = 0; s < 3000; ++s)
    ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
  EXPECT_EQ(seen.size(), 2u);

  p = SamplingParams{};
  p.min_p = static_cast<float>(probs[2] / probs[0] * 1.01);  // token 2 is just below the floor
  seen.clear();
  for (int s = 0; s < 3000; ++s)
    ++seen[sample(logits, p, {}, {}, uint64_t(s), 0).token];
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

// Random rows and parameters covering every filter and penalty (shared shape with the GPU test).
ops::SampleRowParams random_row_params(std::mt19937_64& rng, int32_t vocab) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  ops::SampleRowParams p;
  p.temperature = 0.3f + 1.2f * unit(rng);
  const uint64_t kind = rng() % 6;
  if (kind == 1 || kind == 5) p.top_k = 1 + static_cast<int32_t>(rng() % std::min(vocab, 200));
  if (kind == 2 || kind == 5) p.top_p = 0.05f + 0.9f * unit(rng);
  if (kind == 3 || kind == 5) p.min_p = 0.3f * unit(rng);
  if (kind == 4) p.repetition_penalty = 0.5f + 1.5f * unit(rng);
  if (kind == 4) p.frequency_penalty = 2.0f * unit(rng) - 1.0f;
  if (kind == 4) p.presence_penalty = 2.0f * unit(rng) - 1.0f;
  p.seed = rng();
  p.step = static_cast<int64_t>(rng() % 1000);
  return p;
}

std::vector<float> random_logits(std::mt19937_64& rng, int32_t vocab) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x)
    v = d(rng);
  // A few exact ties, as bf16 logits have.
  for (int i = 0; i < 4; ++i)
    x[rng() % x.size()] = x[rng() % x.size()];
  return x;
}

TEST(PenaltyCounts, IncrementalEqualsRecountAndTheOldLoops) {
  const uint64_t seed = std::random_device{}();
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t vocab = 50;
    std::vector<int32_t> prompt(rng() % 40), output(rng() % 40);
    for (auto& t : prompt)
      t = static_cast<int32_t>(rng() % vocab);
    for (auto& t : output)
      t = static_cast<int32_t>(rng() % vocab);
    PenaltyCounts inc(prompt, {});
    for (const int32_t t : output)
      inc.add_output(t);
    const PenaltyCounts full(prompt, output);
    // Same multiset of entries, unique by token, against a naive count.
    std::map<int32_t, std::pair<int32_t, int32_t>> want;  // token -> (output count, in prompt)
    for (const int32_t t : prompt)
      want[t].second = 1;
    for (const int32_t t : output)
      ++want[t].first;
    for (const PenaltyCounts* c : {static_cast<const PenaltyCounts*>(&inc), &full}) {
      std::map<int32_t, std::pair<int32_t, int32_t>> got;
      for (const ops::PenaltyEntry& e : c->entries()) {
        EXPECT_FALSE(got.contains(e.token)) << e.token;
        got[e.token] = {e.output_count, e.in_prompt};
      }
      EXPECT_EQ(got, want);
    }
    // Applied through the op's CPU code: bit-equal to the old host loops.
    ops::SampleRowParams p = random_row_params(rng, vocab);
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.7f;
    p.presence_penalty = -0.4f;
    std::vector<float> a = random_logits(rng, vocab), b = a;
    ops::cpu::apply_penalties(a, p, inc.entries());
    test_support::reference_penalties(b, p, prompt, output);
    EXPECT_EQ(a, b);
  }
  PenaltyCsr csr;
  const ops::PenaltyEntry e{.token = 3, .output_count = 1, .in_prompt = 0};
  csr.add_row({});
  csr.add_row(std::span(&e, 1));
  csr.add_row({});
  EXPECT_EQ(csr.offsets, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(csr.rows(), 3);
}

// The host sampler (kept set by a partial sort, the draw in id order) against the float64
// reference: equal tokens except where the reference shows a decision within 1e-9 of a boundary
// (f64 sums in another order); such rows are counted and must be rare.
TEST(Sampler, HostMatchesTheFloat64Reference) {
  const uint64_t seed = std::random_device{}();
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  int skipped = 0;
  const int trials = 3000;
  for (int trial = 0; trial < trials; ++trial) {
    const int32_t vocab = trial % 3 == 0 ? 7 : 1000;
    const std::vector<float> logits = random_logits(rng, vocab);
    const ops::SampleRowParams rp = random_row_params(rng, vocab);
    SamplingParams sp;
    sp.temperature = rp.temperature;
    sp.top_k = rp.top_k;
    sp.top_p = rp.top_p;
    sp.min_p = rp.min_p;
    sp.repetition_penalty = rp.repetition_penalty;
    sp.frequency_penalty = rp.frequency_penalty;
    sp.presence_penalty = rp.presence_penalty;
    std::vector<int32_t> prompt(5), output(5);
    for (auto& t : prompt)
      t = static_cast<int32_t>(rng() % vocab);
    for (auto& t : output)
      t = static_cast<int32_t>(rng() % vocab);
    std::vector<float> penalized = logits;
    test_support::reference_penalties(penalized, rp, prompt, output);
    const auto ref = test_support::reference_sample(penalized, rp);
    const SampledToken got = sample(logits, sp, prompt, output, rp.seed, rp.step);
    if (ref.margin < 1e-9) {
      ++skipped;
      continue;
    }
    ASSERT_EQ(got.token, ref.token) << "trial " << trial << " vocab " << vocab;
  }
  std::cout << "[ skipped  ] " << skipped << " of " << trials << std::endl;
  EXPECT_LE(skipped, trials / 100);
}

// Empirical frequencies over many seeds against the exact kept distribution (top-k, top-p and
// min-p together): within 5 standard errors plus 1e-3 per token, and nothing outside the set.
TEST(Sampler, DrawFrequenciesFollowTheKeptDistribution) {
  std::mt19937_64 rng(12345);
  const std::vector<float> logits = random_logits(rng, 64);
  ops::SampleRowParams rp;
  rp.temperature = 0.9f;
  rp.top_k = 20;
  rp.top_p = 0.8f;
  rp.min_p = 0.02f;
  const auto ref = test_support::reference_sample(logits, rp);
  SamplingParams sp;
  sp.temperature = rp.temperature;
  sp.top_k = rp.top_k;
  sp.top_p = rp.top_p;
  sp.min_p = rp.min_p;
  std::map<int32_t, int> count;
  const int n = 60000;
  for (int s = 0; s < n; ++s)
    ++count[sample(logits, sp, {}, {}, uint64_t(s), 9).token];
  ASSERT_GT(ref.kept.size(), 2u);
  int in_set = 0;
  for (size_t i = 0; i < ref.kept.size(); ++i) {
    const double f = double(count[ref.kept[i]]) / n;
    const double p = ref.probs[i];
    EXPECT_NEAR(f, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-3) << ref.kept[i];
    in_set += count[ref.kept[i]];
  }
  EXPECT_EQ(in_set, n);
}

// The CPU op over a batch with a penalty CSR: each row as the per-request sampler; logprobs of
// the raw row, NaN for a penalized row (its raw logits were rewritten in place).
TEST(SampleRows, CpuBatchEqualsPerRowSampling) {
  std::mt19937_64 rng(7);
  const int32_t vocab = 500;
  const int rows = 9;
  std::vector<float> logits;
  std::vector<ops::SampleRowParams> params;
  std::vector<PenaltyCounts> counts;
  PenaltyCsr csr;
  std::vector<SamplingParams> sps;
  for (int r = 0; r < rows; ++r) {
    const auto row = random_logits(rng, vocab);
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(random_row_params(rng, vocab));
    params.back().greedy = r % 4 == 0 ? 1 : 0;
    std::vector<int32_t> prompt{1, 2, 3, static_cast<int32_t>(r)}, output{4, 4, 5};
    counts.emplace_back(prompt, output);
  }
  const std::vector<float> raw = logits;
  for (int r = 0; r < rows; ++r) {
    const ops::SampleRowParams& p = params[r];
    const bool pen =
        p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    csr.add_row(pen ? counts[r].entries() : std::span<const ops::PenaltyEntry>());
  }
  std::vector<int32_t> tokens(rows);
  std::vector<float> logprobs(rows);
  ops::cpu::sample_rows({.logits = logits.data(),
                         .rows = rows,
                         .vocab = vocab,
                         .ld = vocab,
                         .row_params = params.data(),
                         .penalty_offsets = csr.offsets.data(),
                         .penalty_entries = csr.entries.data(),
                         .out_tokens = tokens.data(),
                         .out_logprobs = logprobs.data()});
  for (int r = 0; r < rows; ++r) {
    const std::span<const float> row(raw.data() + r * vocab, vocab);
    const ops::SampleRowParams& p = params[r];
    SamplingParams sp;
    sp.temperature = p.greedy != 0 ? 0.0f : p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.repetition_penalty = p.repetition_penalty;
    sp.frequency_penalty = p.frequency_penalty;
    sp.presence_penalty = p.presence_penalty;
    const bool pen = csr.offsets[r + 1] > csr.offsets[r];
    EXPECT_EQ(tokens[r], sample(row, sp, counts[r].entries(), p.seed, p.step).token) << r;
    if (pen) {
      EXPECT_TRUE(std::isnan(logprobs[r])) << r;
    } else {
      EXPECT_NEAR(logprobs[r], token_logprob(row, tokens[r]), 1e-6) << r;
    }
  }
}

// A batch where no row has penalty entries may pass its CSR offsets with a null entry array (an
// empty vector's data()); the dispatching op accepts it and samples as with no penalties at all.
TEST(SampleRows, OffsetsWithoutEntriesMeanNoPenalties) {
  std::mt19937_64 rng(11);
  const int32_t vocab = 300;
  const int rows = 4;
  std::vector<float> logits;
  std::vector<ops::SampleRowParams> params;
  for (int r = 0; r < rows; ++r) {
    const auto row = random_logits(rng, vocab);
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(random_row_params(rng, vocab));
  }
  auto platform = std::move(platform::create_platform(Device{}).value());
  const std::vector<int32_t> offsets(rows + 1, 0);
  auto run = [&](const int32_t* offs) {
    std::vector<float> x = logits;
    std::vector<int32_t> tokens(rows);
    ops::sample_rows(*platform, {.logits = x.data(),
                                 .rows = rows,
                                 .vocab = vocab,
                                 .ld = vocab,
                                 .row_params = params.data(),
                                 .penalty_offsets = offs,
                                 .penalty_entries = nullptr,
                                 .out_tokens = tokens.data()});
    return tokens;
  };
  EXPECT_EQ(run(offsets.data()), run(nullptr));
}

}  // namespace
}  // namespace kvserve::engine
