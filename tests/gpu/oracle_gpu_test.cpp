// The transformers fixtures (tests/fixtures/oracle, made by tools/hf_oracle.py in fp32) on CUDA:
// every fixture whose head dim the CUDA kernels take (Gemma 2 and 3 with their interleaved
// sliding windows and soft-caps, Qwen3's q/k norms, the four rope-scaling types, Llama GQA
// ratios), through cuda-paged and cuda-ragged at page sizes 1, 16 and 64.
//   * last-position logits of a batched prefill against transformers' within the bf16 bound of
//     the CUDA model suites (relative L2 < 0.03), confident top-1 equal;
//   * 64 greedy tokens (engine::generate: prefill, then decode steps, graphs where the model has
//     them) equal transformers' up to the first step where bf16 flips a near-tie: at that step the
//     f32 CPU runner (equal to transformers, oracle_test), run the same way (prefill, then decode
//     steps fed with transformers' tokens), must put the two tokens within 0.05 x the logits'
//     standard deviation of each other (the suites' "confident" margin); a confident step that
//     differs fails;
//   * the same greedy check at batch 1 (each prompt alone: every decode step one row, the skinny
//     GEMV's shapes), which the batched run above never reaches.
// A fixture whose head dim CUDA refuses must be refused at load naming head_dim. Skips itself
// without a CUDA device. KVSERVE_ORACLE_DIR overrides the fixture directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/engine/generate.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/platform.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "support/oracle_fixtures.h"
#include "support/typed_options.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

bool have_cuda() {
  return platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok();
}

using test_support::oracle_dir;
using Expected = test_support::OracleExpected;
std::vector<std::string> fixture_names() {
  return test_support::oracle_fixture_names();
}
Expected load_expected(const fs::path& dir) {
  return test_support::load_oracle_expected(dir);
}

Result<std::unique_ptr<model::ModelRunner>> make_runner(const fs::path& dir,
                                                        const std::string& device,
                                                        int32_t page_size,
                                                        const std::string& backend) {
  model::ModelRunnerOptions o;
  o.device = test_support::device_of(device);
  o.page_size = page_size;
  o.attention_backend = test_support::backend_of(backend);
  o.max_total_tokens = 4096;
  o.max_running_requests = 8;
  // The rope-scaling fixtures run past their original context (prompt + 64 tokens).
  o.context_length = 512;
  // No device pool: GPU suites run side by side (ctest -j), none may take the whole GPU.
  o.device_pool.reserve = false;
  return model::ModelRunner::create(dir, o);
}

// Last-position logits of every prompt, as one batched prefill, [prompts, vocab].
std::vector<float> prefill_logits(model::ModelRunner& r,
                                  const std::vector<std::vector<int32_t>>& prompts) {
  mem::HostKvMemory host(r.kv_shape(), mem::PrefixCacheKind::kChunk);
  const mem::KvMemory memory = host.view();
  std::vector<mem::KvReqState> kv(prompts.size());
  std::vector<mem::BatchEntry> entries;
  for (size_t i = 0; i < prompts.size(); ++i)
    entries.push_back({&kv[i], prompts[i]});
  auto prepared = mem::prepare_extend(memory, entries);
  KV_CHECK(prepared.is_ok());
  mem::ForwardBatch batch = std::move(prepared).value();
  std::vector<float> logits;
  const Status s = r.forward(batch, logits);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  for (auto& k : kv)
    mem::release_kv_cache(memory, k, {}, false);
  return logits;
}

std::vector<std::vector<int32_t>> greedy(model::ModelRunner& r,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         int32_t steps) {
  mem::HostKvMemory cache(r.kv_shape(), mem::PrefixCacheKind::kChunk);
  std::vector<engine::GenerateRequest> reqs;
  for (const auto& p : prompts) {
    engine::SamplingParams sp;
    sp.temperature = 0;
    sp.max_new_tokens = steps;
    sp.ignore_eos = true;
    reqs.push_back({p, sp});
  }
  auto res = engine::generate(r, cache, reqs);
  EXPECT_TRUE(res.is_ok()) << res.status().to_string();
  std::vector<std::vector<int32_t>> out;
  if (!res.is_ok()) return out;
  for (const auto& g : *res)
    out.push_back(g.output_ids);
  return out;
}

// The f32 logits before greedy step `steps` as generation computes them: the prompt's prefill,
// then `steps` decode steps fed with `tokens` (a length-dependent rope keeps each key's rotation
// from the step that stored it, so one prefill of the whole prefix would not be the same).
std::vector<float> incremental_logits(model::ModelRunner& r, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& tokens, size_t steps) {
  test_support::ModelSession s(r, 1);
  std::vector<float> logits = s.logits({prompt}, false);
  for (size_t i = 0; i < steps; ++i)
    logits = s.logits({{tokens[i]}}, true);
  return logits;
}

double row_std(const std::vector<float>& row) {
  double mean = 0, sq = 0;
  for (float x : row)
    mean += x;
  mean /= double(row.size());
  for (float x : row)
    sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(row.size()));
}

// `tokens` (greedy, one row per prompt) against transformers': equal up to the first step where
// bf16 flips a near-tie of the f32 CPU runner `cpu` (the header says how near).
void expect_greedy_matches(const std::string& label, model::ModelRunner& cpu, const Expected& want,
                           const std::vector<std::vector<int32_t>>& tokens) {
  ASSERT_EQ(tokens.size(), want.greedy.size()) << label;
  int32_t equal_steps = 0, total_steps = 0, flips = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const auto& w = want.greedy[p];
    const auto& g = tokens[p];
    ASSERT_EQ(g.size(), w.size()) << label;
    size_t j = 0;
    while (j < w.size() && g[j] == w[j])
      ++j;
    equal_steps += int32_t(j);
    total_steps += int32_t(w.size());
    if (j == w.size()) continue;
    // The first difference must be a near-tie of the f32 model (equal to transformers).
    ++flips;
    const std::vector<float> ref = incremental_logits(cpu, want.prompts[p], w, j);
    const double gap = double(ref[size_t(w[j])]) - double(ref[size_t(g[j])]);
    const double margin = 0.05 * row_std(ref);
    std::cout << "[ greedy   ] " << label << ": prompt " << p << " differs at step " << j << " ("
              << w[j] << " vs " << g[j] << "), f32 gap " << gap << " <= margin " << margin
              << std::endl;
    EXPECT_LE(gap, margin) << label << ": prompt " << p << " step " << j << " is not a near-tie";
  }
  std::cout << "[ greedy   ] " << label << ": " << equal_steps << "/" << total_steps
            << " steps equal to transformers before any flip, " << flips << " near-tie flips"
            << std::endl;
}

class OracleGpuTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(OracleGpuTest, LogitsAndGreedyMatchTransformersOnBothBackendsAndPageSizes) {
  const fs::path dir = oracle_dir() / GetParam();
  const Expected want = load_expected(dir);
  auto probe = make_runner(dir, "cuda", 16, "cuda-paged");
  if (!probe.is_ok()) {
    // Only a head dim outside the kernels' set may be refused, and by name.
    EXPECT_EQ(probe.status().code(), StatusCode::kUnimplemented) << probe.status().to_string();
    EXPECT_NE(probe.status().to_string().find("head_dim"), std::string::npos)
        << probe.status().to_string();
    GTEST_SKIP() << "refused on CUDA: " << probe.status().to_string();
  }
  probe->reset();
  auto cpu = make_runner(dir, "cpu", 1, "native");
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  const int64_t vocab = (*cpu)->config().vocab_size;
  std::vector<float> want_logits;
  for (const auto& row : want.last_logits)
    want_logits.insert(want_logits.end(), row.begin(), row.end());
  for (const std::string backend : {"cuda-paged", "cuda-ragged"}) {
    for (int32_t page_size : {1, 16, 64}) {
      const std::string label = GetParam() + " " + backend + " page " + std::to_string(page_size);
      auto r = make_runner(dir, "cuda", page_size, backend);
      ASSERT_TRUE(r.is_ok()) << label << ": " << r.status().to_string();
      const std::vector<float> got = prefill_logits(**r, want.prompts);
      const test_support::LogitsAgreement a =
          test_support::logits_agreement(want_logits, got, vocab);
      std::cout << "[ prefill  ] " << label << ": rel L2 " << a.rel_l2 << ", max |diff| "
                << a.max_abs << ", confident top-1 " << a.confident_agree << "/" << a.confident
                << std::endl;
      EXPECT_LT(a.rel_l2, 0.03) << label;
      EXPECT_EQ(a.confident_agree, a.confident) << label;

      const auto tokens = greedy(**r, want.prompts, int32_t(want.greedy[0].size()));
      expect_greedy_matches(label, **cpu, want, tokens);
    }
  }
}

// Batch 1: each prompt alone, so every decode step is one row (the skinny GEMV at m = 1, one
// request's decode attention), against transformers as above (cuda-paged, page 16; graphs as
// generation uses them).
TEST_P(OracleGpuTest, BatchOneGreedyMatchesTransformers) {
  const fs::path dir = oracle_dir() / GetParam();
  const Expected want = load_expected(dir);
  auto r = make_runner(dir, "cuda", 16, "cuda-paged");
  if (!r.is_ok() && r.status().code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << "refused on CUDA: " << r.status().to_string();  // the test above checks why
  }
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto cpu = make_runner(dir, "cpu", 1, "native");
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  std::vector<std::vector<int32_t>> tokens;
  for (const auto& prompt : want.prompts) {
    auto one = greedy(**r, {prompt}, int32_t(want.greedy[0].size()));
    ASSERT_EQ(one.size(), 1u);
    tokens.push_back(std::move(one[0]));
  }
  expect_greedy_matches(GetParam() + " batch 1", **cpu, want, tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OracleGpuTest, testing::ValuesIn(fixture_names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OracleGpuTest);

// The families and scalings this suite exists for must be among the fixtures CUDA runs.
TEST(OracleGpu, NewFamiliesAreCovered) {
  const std::vector<std::string> names = fixture_names();
  for (const char* want : {"gemma2", "gemma3", "qwen3", "llama_rope_linear", "llama_rope_dynamic",
                           "llama_rope_longrope", "llama_gqa4_hd128_llama3"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

}  // namespace
}  // namespace kvserve
