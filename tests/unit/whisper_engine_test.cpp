// Whisper requests through the engine (engine::Engine and engine::Scheduler over a ModelRunner of
// a Whisper checkpoint: the encoder runs in the prefill, decode steps batch continuously, the
// model's suppress / begin-suppress tokens are per-request logit rules) against the second code
// path, model::whisper_generate on a WhisperRunner (whose tokens and logits whisper_model_test and
// demo_whisper_test check against transformers):
//   * greedy and sampled requests, with and without audio, submitted together: the same tokens,
//     for both encoder KV layouts and page sizes 1, 4 and 16;
//   * a request retracted when the KV cache runs short recomputes its encoder on readmission and
//     ends with the same tokens (the scheduler driven step by step: deterministic);
//   * abort mid-decode frees everything; a wrong-sized encoder input is refused;
//   * LogitRules: suppress at every step, begin-suppress at the first only.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <tuple>
#include <vector>

#include "kvserve/engine/engine.h"
#include "kvserve/engine/logit_rules.h"
#include "kvserve/engine/scheduler.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/whisper_generate.h"
#include "support/whisper_test_util.h"
#include "unit/model_test_util.h"

namespace kvserve::engine {
namespace {

using model::WhisperGenerateOptions;
using model::WhisperRequest;

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason finish;
  bool finished = false;
};

Collected collect(RequestStream& stream) {
  Collected c;
  StreamEvent e;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!c.finished && std::chrono::steady_clock::now() < deadline) {
    if (!stream.pop(e, std::chrono::milliseconds(100))) continue;
    c.tokens.insert(c.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finished) {
      c.finished = true;
      c.finish = e.finish;
    }
  }
  return c;
}

SamplingParams sampling(float temperature, uint64_t seed, int32_t max_new_tokens,
                        bool ignore_eos = false) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_new_tokens = max_new_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

class WhisperEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new model::testing::TempDir();
    ASSERT_TRUE(
        model::testing::make_whisper_checkpoint("whisper-test", dir_->path() / "m").is_ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::filesystem::path model() { return dir_->path() / "m"; }
  static inline model::testing::TempDir* dir_ = nullptr;
};

TEST(LogitRules, SuppressEveryStepBeginSuppressFirstOnly) {
  const float inf = std::numeric_limits<float>::infinity();
  const LogitRules rules{.suppress_tokens = {1, 7}, .begin_suppress_tokens = {2, -3, 99}};
  std::vector<float> first = {0.f, 1.f, 2.f, 3.f};
  rules.apply(first, 0);
  EXPECT_EQ(first, (std::vector<float>{0.f, -inf, -inf, 3.f}));
  std::vector<float> later = {0.f, 1.f, 2.f, 3.f};
  rules.apply(later, 1);
  EXPECT_EQ(later, (std::vector<float>{0.f, -inf, 2.f, 3.f}));
}

class WhisperEngineTokens
    : public WhisperEngineTest,
      public ::testing::WithParamInterface<std::tuple<int32_t, mem::EncoderKvLayout>> {};

TEST_P(WhisperEngineTokens, SameTokensAsWhisperGenerate) {
  const auto [page_size, layout] = GetParam();
  auto reference_runner = model::testing::make_whisper_runner(model(), page_size, layout);
  ASSERT_NE(reference_runner, nullptr);
  const checkpoint::WhisperConfig c = reference_runner->config();  // a copy: the runner goes
  const uint64_t seed = 20261202;
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  // Three clips (one sampled) and a text-only request (no encoder input).
  std::vector<WhisperRequest> requests(4);
  for (int i = 0; i < 3; ++i) {
    requests[i].features = model::testing::random_features(rng, c.num_mel_bins, c.input_frames());
  }
  requests[1].temperature = 0.8f;
  requests[1].seed = 77;
  const WhisperGenerateOptions gopt{.max_new_tokens = 20};
  auto expected = model::whisper_generate(*reference_runner, requests, gopt);
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  reference_runner.reset();

  EngineOptions eo;
  eo.model_path = model();
  eo.runner.page_size = page_size;
  eo.runner.encoder_kv_layout = layout;
  eo.runner.max_running_requests = 4;
  auto engine = Engine::create(eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  ASSERT_TRUE((*engine)->is_encoder_decoder());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const WhisperRequest& r : requests) {
    SubmitRequest s;
    s.input_ids = (*expected)[streams.size()].prompt;
    s.sampling = sampling(r.temperature, r.seed, gopt.max_new_tokens);
    if (!r.features.empty()) s.encoder_input = std::make_shared<std::vector<float>>(r.features);
    auto stream = (*engine)->submit(s);
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Collected got = collect(*streams[i]);
    ASSERT_TRUE(got.finished);
    EXPECT_EQ(got.tokens, (*expected)[i].tokens);
    EXPECT_NE(got.finish.kind, FinishKind::kAbort) << got.finish.message;
  }
  // Sampling left the greedy path (near-flat logits of random weights): the comparison above
  // checked the seeded draws, not a second greedy request.
  EXPECT_NE((*expected)[1].tokens, (*expected)[0].tokens);
  // The same engine's accounting: prefill batches and continuous decode steps, the metrics, and
  // every slot back once idle.
  EngineStatus st;
  for (int i = 0; i < 200; ++i) {
    st = (*engine)->status();
    if (st.metrics.requests_finished == 4 && st.invariant_checks > 0 && st.scheduler.running == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(st.metrics.requests_finished, 4);
  EXPECT_GE(st.scheduler.prefill_batches, 1);
  // Continuous batching: the four requests (submitted together) share decode steps; one after
  // the other they would take about 4 x 19.
  EXPECT_GE(st.scheduler.decode_steps, 19);
  EXPECT_LE(st.scheduler.decode_steps, 2 * gopt.max_new_tokens);
  EXPECT_EQ(st.invariant_violations, 0) << st.last_violation;
  EXPECT_EQ(st.scheduler.available_tokens, st.scheduler.total_tokens);
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndPages, WhisperEngineTokens,
                         ::testing::Combine(::testing::Values(1, 4, 16),
                                            ::testing::Values(mem::EncoderKvLayout::kAligned,
                                                              mem::EncoderKvLayout::kRagged)),
                         [](const auto& param_info) {
                           return std::string(
                                      mem::encoder_kv_layout_name(std::get<1>(param_info.param))) +
                                  "_page" + std::to_string(std::get<0>(param_info.param));
                         });

// Request A decodes alone; B is admitted one step later under the new_token_ratio reservation,
// and the pool (page size 1) holds both rows only part of the way: B (fewer outputs) is retracted,
// waits for A, then recomputes encoder + prompt + its outputs and continues with the same draws.
TEST_F(WhisperEngineTest, RetractedRequestRecomputesItsEncoder) {
  auto reference_runner =
      model::testing::make_whisper_runner(model(), 1, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(reference_runner, nullptr);
  const checkpoint::WhisperConfig c = reference_runner->config();  // a copy: the runner goes
  std::mt19937_64 rng(5);
  std::vector<WhisperRequest> requests(2);
  for (WhisperRequest& r : requests)
    r.features = model::testing::random_features(rng, c.num_mel_bins, c.input_frames());
  requests[1].temperature = 0.9f;
  requests[1].seed = 123;
  const int32_t max_new = 40;
  auto expected = model::whisper_generate(*reference_runner, requests,
                                          {.max_new_tokens = max_new, .ignore_eos = true});
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  const auto prompt_len = static_cast<int32_t>((*expected)[0].prompt.size());
  reference_runner.reset();

  // Admission of B needs 2 (E + p) + 1.7 M slots (A's remaining output at ratio 0.7); both to the
  // end need about 2 (E + p + M).
  const int32_t row = c.max_source_positions + prompt_len;
  model::ModelRunnerOptions ro;
  ro.max_running_requests = 2;
  ro.max_total_tokens = 2 * row + (17 * max_new) / 10 + 6;
  auto runner = model::ModelRunner::create(model(), ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  // The engine's setup by hand: the host KV memory of the runner's shape with a chunk cache, and
  // the runner's encoder split.
  mem::HostKvMemory memory((*runner)->kv_shape(), mem::PrefixCacheKind::kChunk);
  SchedulerOptions so;
  so.eos_token_ids = (*runner)->config().eos_token_ids;
  so.encoder = mem::EncoderSplit{(*runner)->page_size(), (*runner)->encoder_kv_layout()};
  Metrics metrics;
  Scheduler scheduler(**runner, std::move(memory), nullptr, so, &metrics);
  const checkpoint::WhisperGenerationConfig& g = (*runner)->whisper_generation_config();
  auto rules = std::make_shared<LogitRules>(LogitRules{
      .suppress_tokens = g.suppress_tokens, .begin_suppress_tokens = g.begin_suppress_tokens});
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto add = [&](size_t i) {
    auto req = std::make_unique<Req>();
    req->id = i + 1;
    req->rid = "r" + std::to_string(i);
    req->origin_input_ids = (*expected)[i].prompt;
    req->sampling = sampling(requests[i].temperature, requests[i].seed, max_new, true);
    req->seed = requests[i].seed;
    req->logit_rules = rules;
    req->encoder_input = std::make_shared<std::vector<float>>(requests[i].features);
    req->encoder_len = c.max_source_positions;
    req->arrival = Clock::now();
    req->stream = std::make_shared<RequestStream>();
    streams.push_back(req->stream);
    scheduler.add_request(std::move(req));
  };
  add(0);
  ASSERT_TRUE(scheduler.step());  // A's prefill
  ASSERT_EQ(scheduler.stats().running, 1);
  add(1);
  int steps = 0;
  while (scheduler.step() && ++steps < 1000) {
  }
  EXPECT_FALSE(scheduler.step());
  EXPECT_TRUE(scheduler.idle());
  EXPECT_GE(scheduler.stats().retractions, 1);
  EXPECT_EQ(metrics.snapshot().retractions, scheduler.stats().retractions);
  StreamOutputs outputs = scheduler.take_outputs();
  for (auto& [stream, event] : outputs)
    stream->push(std::move(event));
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Collected got = collect(*streams[i]);
    ASSERT_TRUE(got.finished);
    EXPECT_EQ(got.finish.kind, FinishKind::kLength);
    EXPECT_EQ(got.tokens, (*expected)[i].tokens);
  }
  EXPECT_TRUE(scheduler.check_idle_invariants().is_ok());
  EXPECT_EQ(scheduler.memory().allocator().available_size(), scheduler.memory().allocator().size());
}

TEST_F(WhisperEngineTest, AbortMidDecodeFreesEverything) {
  EngineOptions eo;
  eo.model_path = model();
  eo.runner.max_running_requests = 2;
  auto engine = Engine::create(eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const checkpoint::WhisperConfig& c = *(*engine)->whisper_config();
  std::mt19937_64 rng(9);
  SubmitRequest s;
  s.input_ids = {*c.decoder_start_token_id};
  s.sampling = sampling(0.0f, 0, 60, /*ignore_eos=*/true);
  s.encoder_input = std::make_shared<std::vector<float>>(
      model::testing::random_features(rng, c.num_mel_bins, c.input_frames()));
  auto stream = (*engine)->submit(s);
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  StreamEvent first;
  ASSERT_TRUE((*stream)->pop(first, std::chrono::seconds(60)));
  (*engine)->abort(s.rid);
  Collected rest = collect(**stream);
  ASSERT_TRUE(rest.finished);
  EXPECT_EQ(rest.finish.kind, FinishKind::kAbort);
  EXPECT_LT(first.token_ids.size() + rest.tokens.size(), 60u);
  EngineStatus st;
  for (int i = 0; i < 200; ++i) {
    st = (*engine)->status();
    if (st.scheduler.running == 0 && st.invariant_checks > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(st.metrics.requests_aborted, 1);
  EXPECT_EQ(st.invariant_violations, 0) << st.last_violation;
  EXPECT_EQ(st.scheduler.available_tokens, st.scheduler.total_tokens);
}

TEST_F(WhisperEngineTest, WrongSizedEncoderInputIsRefused) {
  EngineOptions eo;
  eo.model_path = model();
  eo.runner.max_running_requests = 1;
  auto engine = Engine::create(eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  SubmitRequest s;
  s.input_ids = {*(*engine)->whisper_config()->decoder_start_token_id};
  s.encoder_input = std::make_shared<std::vector<float>>(10, 0.0f);
  auto r = (*engine)->submit(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("encoder input has 10 values"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace kvserve::engine
