// ModelRunner::forward_sample on the CPU (the tiny preset): a prefill and decode steps whose
// tokens equal the host sampler's on ModelRunner::forward's logits of the same batch (a second
// session on the same runner), for greedy, sampled, filtered and penalized rows in one batch;
// chosen-token logprobs of unpenalized rows equal log_softmax of the raw logits; the raw rows asked
// for (SamplingInputs::raw_rows: a plain and a penalized row) come back as forward's logits, before
// the sampler penalized them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kvserve/engine/penalties.h"
#include "kvserve/engine/sampler.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/model_runner.h"
#include "support/model_session.h"
#include "unit/model_test_util.h"

namespace kvserve::model {
namespace {

TEST(ForwardSample, CpuEqualsForwardThenHostSampler) {
  testing::TempDir dir;
  makemodel::MakeModelOptions mo;
  mo.preset = "tiny";
  mo.output = dir.path() / "tiny";
  ASSERT_TRUE(makemodel::make_model(mo).is_ok());
  ModelRunnerOptions o;
  o.max_total_tokens = 2048;
  o.max_running_requests = 8;
  auto made = ModelRunner::create(dir.path() / "tiny", o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  ModelRunner& runner = **made;
  const int64_t vocab = runner.config().vocab_size;

  const int n = 4;
  std::vector<engine::SamplingParams> sp(n);
  sp[0].temperature = 0;  // greedy
  sp[1].temperature = 0.8f;
  sp[1].top_p = 0.9f;
  sp[2].temperature = 1.2f;
  sp[2].top_k = 5;
  sp[2].min_p = 0.05f;
  sp[3].temperature = 0.7f;
  sp[3].repetition_penalty = 1.5f;
  sp[3].frequency_penalty = 0.4f;
  sp[3].presence_penalty = 0.2f;
  std::vector<std::vector<int32_t>> add(n);
  std::vector<engine::PenaltyCounts> counts;
  for (int b = 0; b < n; ++b) {
    for (int i = 0; i < 5 + 3 * b; ++i)
      add[b].push_back(static_cast<int32_t>((7 * i + 13 * b + 1) % vocab));
    counts.emplace_back(add[b], std::span<const int32_t>());
  }
  test_support::ModelSession sampled(runner, n), plain(runner, n);
  for (int step = 0; step < 6; ++step) {
    const bool decode = step > 0;
    std::vector<ops::SampleRowParams> rows;
    engine::PenaltyCsr csr;
    for (int b = 0; b < n; ++b) {
      rows.push_back(engine::sample_row_params(sp[b], 1000 + b, step));
      csr.add_row(sp[b].has_penalties() ? counts[b].entries()
                                        : std::span<const ops::PenaltyEntry>());
    }
    mem::ForwardBatch fb = sampled.batch(add, decode);
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<float> raw;
    const std::vector<int32_t> raw_rows = {3, 1};
    ASSERT_TRUE(runner
                    .forward_sample(fb,
                                    {.rows = rows,
                                     .penalty_offsets = csr.offsets,
                                     .penalty_entries = csr.entries,
                                     .raw_rows = raw_rows},
                                    tokens, &logprobs, &raw)
                    .is_ok());
    const std::vector<float> logits = plain.logits(add, decode);
    ASSERT_EQ(tokens.size(), static_cast<size_t>(n));
    ASSERT_EQ(raw.size(), raw_rows.size() * vocab);
    for (size_t j = 0; j < raw_rows.size(); ++j) {
      EXPECT_TRUE(std::equal(raw.begin() + j * vocab, raw.begin() + (j + 1) * vocab,
                             logits.begin() + raw_rows[j] * vocab))
          << "step " << step << " raw row " << raw_rows[j];
    }
    for (int b = 0; b < n; ++b) {
      const std::span<const float> row(logits.data() + b * vocab, static_cast<size_t>(vocab));
      const auto entries =
          sp[b].has_penalties() ? counts[b].entries() : std::span<const ops::PenaltyEntry>();
      EXPECT_EQ(tokens[b], engine::sample(row, sp[b], entries, 1000 + b, step).token)
          << "step " << step << " request " << b;
      if (sp[b].has_penalties()) {
        EXPECT_TRUE(std::isnan(logprobs[b]));
      } else {
        EXPECT_NEAR(logprobs[b], engine::token_logprob(row, tokens[b]), 1e-5);
      }
      counts[b].add_output(tokens[b]);
      add[b] = {tokens[b]};
    }
  }
}

}  // namespace
}  // namespace kvserve::model
