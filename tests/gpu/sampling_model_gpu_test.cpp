// ModelRunner::forward_sample on CUDA (the eager prefill, then decode-graph replays, each followed
// by the sampling kernel) against the host sampler, with the shipped demo model and three sampled
// requests (temperature 0.8, top_p 0.9, seeded; one with repetition / frequency / presence
// penalties, one with top-k and min-p), teacher-forced with the CPU's tokens for 8 decode steps:
//   * the device token equals the host sampler's token on the same CUDA logits (a second session
//     on the same runner) except where the float64 reference puts the decision within 1e-5 of a
//     boundary;
//   * against the CPU runner (f32 weights), the logits agree (tests/support/logits_agreement.h)
//     and the tokens are equal wherever the reference on the CPU logits puts every decision
//     further from its boundary than the two runs' largest logit difference can move it.
// Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>

#include "kvserve/engine/penalties.h"
#include "kvserve/engine/sampler.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/ops/sampling.h"
#include "kvserve/platform/platform.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "support/sampling_reference.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<model::ModelRunner> make_runner(const std::string& device) {
  model::ModelRunnerOptions o;
  o.device = device;
  o.page_size = 16;
  o.max_total_tokens = 4096;
  o.max_running_requests = 8;
  auto r = model::ModelRunner::create(fs::path(KVSERVE_SOURCE_MODELS_DIR) / "demo-lm", o);
  KV_CHECK(r.is_ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

TEST(SamplingModelGpuTest, ForwardSampleMatchesHostSamplerAndCpu) {
  if (!platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok()) {
    GTEST_SKIP() << "no CUDA device";
  }
  auto cpu = make_runner("cpu");
  auto gpu = make_runner("cuda");
  ASSERT_NE(gpu->decode_graphs(), nullptr);
  const int64_t vocab = cpu->config().vocab_size;
  const uint64_t seed = std::random_device{}();
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);

  const int n = 3;
  std::vector<engine::SamplingParams> sp(n);
  for (auto& p : sp) {
    p.temperature = 0.8f;
    p.top_p = 0.9f;
  }
  sp[1].repetition_penalty = 1.3f;
  sp[1].frequency_penalty = 0.5f;
  sp[1].presence_penalty = 0.3f;
  sp[2].top_k = 20;
  sp[2].min_p = 0.05f;
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<engine::PenaltyCounts> counts;
  for (int b = 0; b < n; ++b) {
    for (int i = 0; i < 12 + 9 * b; ++i)
      prompts[b].push_back(static_cast<int32_t>(rng() % vocab));
    counts.emplace_back(prompts[b], std::span<const int32_t>());
  }
  const std::vector<uint64_t> seeds = {rng(), rng(), rng()};

  test_support::ModelSession sc(*cpu, n), sg(*gpu, n), sg_logits(*gpu, n);
  std::vector<std::vector<int32_t>> add = prompts;
  int compared_cpu = 0, equal_cpu = 0, skipped = 0;
  for (int step = 0; step <= 8; ++step) {
    const bool decode = step > 0;
    std::vector<ops::SampleRowParams> rows;
    engine::PenaltyCsr csr;
    for (int b = 0; b < n; ++b) {
      rows.push_back(engine::sample_row_params(sp[b], seeds[b], step));
      csr.add_row(sp[b].has_penalties() ? counts[b].entries()
                                        : std::span<const ops::PenaltyEntry>());
    }
    model::ForwardBatch fb = sg.batch(add, decode);
    std::vector<int32_t> dev;
    gpu->forward_sample(
        fb, {.rows = rows, .penalty_offsets = csr.offsets, .penalty_entries = csr.entries}, dev);
    const std::vector<float> lg = sg_logits.logits(add, decode);
    const std::vector<float> lc = sc.logits(add, decode);
    const auto agreement = test_support::logits_agreement(lc, lg, vocab);
    EXPECT_LT(agreement.rel_l2, 0.03) << "step " << step;
    std::vector<int32_t> next(n);
    for (int b = 0; b < n; ++b) {
      auto row_of = [&](const std::vector<float>& l) {
        return std::span<const float>(l.data() + b * vocab, static_cast<size_t>(vocab));
      };
      auto penalized = [&](const std::vector<float>& l) {
        std::vector<float> r(row_of(l).begin(), row_of(l).end());
        if (sp[b].has_penalties()) ops::cpu::apply_penalties(r, rows[b], counts[b].entries());
        return r;
      };
      const auto entries =
          sp[b].has_penalties() ? counts[b].entries() : std::span<const ops::PenaltyEntry>();
      const int32_t host_on_gpu_logits =
          engine::sample(row_of(lg), sp[b], entries, seeds[b], step).token;
      const auto ref_gpu = test_support::reference_sample(penalized(lg), rows[b]);
      if (ref_gpu.margin >= 1e-5) {
        EXPECT_EQ(dev[b], host_on_gpu_logits) << "step " << step << " request " << b;
      } else {
        ++skipped;
      }
      const int32_t host_on_cpu = engine::sample(row_of(lc), sp[b], entries, seeds[b], step).token;
      const auto ref_cpu = test_support::reference_sample(penalized(lc), rows[b]);
      // Logits that differ by at most d move each probability by a factor within exp(+-2d/T), so
      // every cumulative boundary relative to the kept mass by less than 2 (exp(2d/T) - 1).
      double d = 0;
      for (int64_t v = 0; v < vocab; ++v)
        d = std::max(d, static_cast<double>(std::abs(row_of(lc)[v] - row_of(lg)[v])));
      const double bound = 2 * (std::exp(2 * d / sp[b].temperature) - 1) + 1e-3;
      if (ref_cpu.margin > bound) {
        ++compared_cpu;
        equal_cpu += dev[b] == host_on_cpu ? 1 : 0;
        EXPECT_EQ(dev[b], host_on_cpu) << "step " << step << " request " << b << " margin "
                                       << ref_cpu.margin << " bound " << bound;
      }
      next[b] = host_on_cpu;  // teacher-forced with the CPU's tokens
      counts[b].add_output(host_on_cpu);
    }
    add.clear();
    for (const int32_t t : next)
      add.push_back({t});
  }
  EXPECT_GT(gpu->decode_graphs()->replays(), 0);
  std::cout << "[ tokens   ] " << equal_cpu << "/" << compared_cpu
            << " equal to the CPU's where the reference margin exceeds the logits' bound; "
            << skipped << " device-vs-host rows within 1e-5 of a boundary" << std::endl;
}

}  // namespace
}  // namespace kvserve
