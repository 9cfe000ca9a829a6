// Prefill/decode disaggregation inside one process: a prefill Engine and a decode Engine on the
// demo model, KV moved by the loopback transport, control messages over ZeroMQ on localhost.
// References: a third Engine serving the same requests alone (greedy and seeded outputs must be
// equal token for token), and serial answers for concurrent requests. Failures (aborts in every
// state, injected transfer failures and losses, timeouts, a prefill server gone) must end every
// request within its timeout, bring the decode server's memory back to idle with no invariant
// violation, and leave it serving.
#include "unit/disagg_engines.h"

namespace kvserve::engine {
namespace {

const char* kPrompts[] = {
    "The old lighthouse keeper looked at the sea and said",
    "Once upon a time, in a village by the river, there lived a baker who",
    "Q: What is the best way to learn to cook?\nA:",
    "A fortune for today: you will find",
};

class DisaggServingTest : public ::testing::TestWithParam<Shape> {};

// Submits every request to the prefill / decode pair at once; request i's decode half must end by
// length with want[i]'s tokens.
void expect_pairs_answer(Engine& prefill, Engine& decode, const std::vector<SubmitRequest>& reqs,
                         const std::vector<std::vector<int32_t>>& want) {
  std::vector<Pair> pairs;
  for (const SubmitRequest& r : reqs)
    pairs.push_back(submit_pair(prefill, decode, r));
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Outcome got = collect(*pairs[i].decode);
    EXPECT_EQ(got.all.finish.kind, FinishKind::kLength) << i << ": " << got.all.finish.message;
    EXPECT_EQ(got.all.token_ids, want[i]) << "request " << i;
    collect(*pairs[i].prefill);
  }
}

TEST_P(DisaggServingTest, GreedyAndSeededOutputsEqualASingleServer) {
  const Shape shape = GetParam();
  auto single = make(options(DisaggMode::kNone, shape));
  auto prefill = make(options(DisaggMode::kPrefill, shape));
  auto decode = make(options(DisaggMode::kDecode, shape));
  ASSERT_TRUE(single && prefill && decode);
  for (const std::optional<uint64_t> seed :
       {std::optional<uint64_t>{}, std::optional<uint64_t>{7}}) {
    for (const char* text : kPrompts) {
      SCOPED_TRACE(testing::Message() << text << (seed ? " seeded" : " greedy"));
      const SubmitRequest req = request(*single, text, 20, seed);
      const Outcome want = collect(*submit(*single, req));
      Pair pair = submit_pair(*prefill, *decode, req);
      const Outcome got = collect(*pair.decode);
      const Outcome first = collect(*pair.prefill);
      ASSERT_TRUE(got.all.finished);
      EXPECT_EQ(got.all.finish.kind, FinishKind::kLength) << got.all.finish.message;
      EXPECT_EQ(got.all.token_ids, want.all.token_ids);
      // The prefill half answers with the first token once its KV reached the decode side.
      ASSERT_EQ(first.all.token_ids.size(), 1u) << first.all.finish.message;
      EXPECT_EQ(first.all.token_ids[0], want.all.token_ids[0]);
    }
  }
  const EngineStatus ps = prefill->status();
  EXPECT_EQ(ps.disagg.succeeded, 8);
  EXPECT_GT(ps.disagg.transfer_bytes, 0);
  EXPECT_EQ(ps.disagg.transfer_failures, 0);
  // The hand-off's stages add up to it (each measured from the same clock readings).
  EXPECT_GT(ps.disagg.forward_seconds, 0);
  EXPECT_GE(ps.disagg.bootstrap_seconds, 0);
  EXPECT_GE(ps.disagg.last_transfer_seconds, 0);
  EXPECT_NEAR(
      ps.disagg.bootstrap_seconds + ps.disagg.forward_seconds + ps.disagg.last_transfer_seconds,
      ps.disagg.handoff_seconds, 1e-6);
  EXPECT_EQ(decode->status().disagg.succeeded, 8);
  const DisaggStats ds = decode->status().disagg;
  EXPECT_GT(ds.wait_seconds, 0);
  EXPECT_NEAR(ds.bootstrap_seconds + ds.wait_seconds, ds.handoff_seconds, 1e-6);
  EXPECT_TRUE(wait_idle(*decode, 5));
  EXPECT_TRUE(wait_idle(*prefill, 5));
}

TEST_P(DisaggServingTest, SixteenConcurrentSharedPrefixRequestsEqualSerialAnswers) {
  const Shape shape = GetParam();
  auto single = make(options(DisaggMode::kNone, shape));
  auto prefill = make(options(DisaggMode::kPrefill, shape));
  auto decode = make(options(DisaggMode::kDecode, shape));
  ASSERT_TRUE(single && prefill && decode);
  const std::string system =
      "You are a helpful assistant who answers briefly and kindly, with a fortune at the end. ";
  std::vector<SubmitRequest> reqs;
  std::vector<std::vector<int32_t>> serial;
  for (int i = 0; i < 16; ++i) {
    const std::string text = system + (i % 2 ? "Tell me about " : "Write a line on ") +
                             kPrompts[i % 4] + " number " + std::to_string(i);
    reqs.push_back(
        request(*single, text, 12, i % 3 == 0 ? std::optional<uint64_t>(100 + i) : std::nullopt));
    serial.push_back(collect(*submit(*single, reqs.back())).all.token_ids);
  }
  expect_pairs_answer(*prefill, *decode, reqs, serial);
  EXPECT_TRUE(wait_idle(*decode, 5));
  EXPECT_TRUE(wait_idle(*prefill, 5));
}

// Other page sizes on the two sides (prefill 16 with 32-token chunks; decode 1 and 64): the
// prefill writes slots instead of pages. Greedy and seeded outputs equal a single server's at the
// decode side's page size, also for concurrent requests sharing a prefix (the prefill side's radix
// cache hands out slots of earlier requests).
TEST(DisaggServingPageSizes, OtherPageSizesOnTheTwoSidesEqualASingleServer) {
  for (const int32_t decode_page : {1, 64}) {
    SCOPED_TRACE(testing::Message() << "prefill page 16, decode page " << decode_page);
    auto single = make(options(DisaggMode::kNone, Shape{decode_page, 8192}));
    auto prefill = make(options(DisaggMode::kPrefill, Shape{16, 32}));
    auto decode = make(options(DisaggMode::kDecode, Shape{decode_page, 8192}));
    ASSERT_TRUE(single && prefill && decode);
    std::vector<SubmitRequest> reqs;
    for (const std::optional<uint64_t> seed :
         {std::optional<uint64_t>{}, std::optional<uint64_t>{7}}) {
      for (const char* text : kPrompts)
        reqs.push_back(request(*single, text, 16, seed));
    }
    for (int i = 0; i < 4; ++i) {
      reqs.push_back(request(*single,
                             std::string(kPrompts[1]) + " and then number " + std::to_string(i), 8,
                             std::nullopt));
    }
    std::vector<std::vector<int32_t>> want;
    for (const SubmitRequest& r : reqs)
      want.push_back(collect(*submit(*single, r)).all.token_ids);
    expect_pairs_answer(*prefill, *decode, reqs, want);
    EXPECT_EQ(prefill->status().disagg.succeeded, static_cast<int64_t>(reqs.size()));
    EXPECT_TRUE(wait_idle(*decode, 5));
    EXPECT_TRUE(wait_idle(*prefill, 5));
  }
}

// Through the staging buffers (seed 002; both sides with --disaggregation-staging-buffer-mb): the
// prefill gathers token-major pieces into its region, one write each into the request's extent of
// the decode's region, which scatters the whole prompt once its done arrives. Same KV dtype:
// outputs equal a single server's at the decode's page size, with a prefill region of 12 tokens
// (several pieces per prompt and per chunk) and a decode region of 64 tokens (at most two prompts'
// extents at once: the others wait in the prealloc queue).
TEST(DisaggServingStaging, StagedPairsEqualASingleServer) {
  struct Case {
    Shape prefill;
    Shape decode;
  };
  for (const Case c : {Case{{16, 32}, {1, 8192}}, Case{{1, 8192}, {64, 8192}}}) {
    SCOPED_TRACE(testing::Message() << "prefill page " << c.prefill.page_size << ", decode page "
                                    << c.decode.page_size);
    auto single = make(options(DisaggMode::kNone, c.decode));
    EngineOptions po = options(DisaggMode::kPrefill, c.prefill);
    EngineOptions dopt = options(DisaggMode::kDecode, c.decode);
    po.disagg.staging_buffer_mb = staging_mb(12);
    dopt.disagg.staging_buffer_mb = staging_mb(64);
    auto prefill = make(po);
    auto decode = make(dopt);
    ASSERT_TRUE(single && prefill && decode);
    std::vector<SubmitRequest> reqs;
    for (const std::optional<uint64_t> seed :
         {std::optional<uint64_t>{}, std::optional<uint64_t>{7}}) {
      for (const char* text : kPrompts)
        reqs.push_back(request(*single, text, 12, seed));
    }
    for (int i = 0; i < 4; ++i) {
      reqs.push_back(request(*single,
                             std::string(kPrompts[1]) + " and then number " + std::to_string(i), 8,
                             std::nullopt));
    }
    std::vector<std::vector<int32_t>> want;
    int64_t prompt_tokens = 0;
    for (const SubmitRequest& r : reqs) {
      want.push_back(collect(*submit(*single, r)).all.token_ids);
      prompt_tokens += static_cast<int64_t>(r.input_ids.size());
    }
    expect_pairs_answer(*prefill, *decode, reqs, want);
    const DisaggStats ps = prefill->status().disagg;
    EXPECT_EQ(ps.succeeded, static_cast<int64_t>(reqs.size()));
    // Every prompt token went through the staging buffers once, in pieces of at most 12 tokens.
    EXPECT_EQ(ps.transfer_bytes, prompt_tokens * 6 * 2 * 2 * 64 * 4);
    EXPECT_GE(ps.staged_chunks, (prompt_tokens + 11) / 12);
    EXPECT_EQ(decode->status().disagg.staging_tokens, 64);
    EXPECT_TRUE(wait_idle(*decode, 5));
    EXPECT_TRUE(wait_idle(*prefill, 5));
  }
}

// Other KV dtypes on the two sides (f32 prefill, bf16 decode): the prefill's gather rounds each
// value once to bf16 (kv_staging_test checks that value for value). The first token is the f32
// prefill's, so it equals an f32 single server's; the rest come from a bf16 pool whose prompt KV
// was computed in f32, so they are compared with a bf16 single server's and must agree nearly
// everywhere (the count is printed).
TEST(DisaggServingStaging, F32PrefillToBf16DecodeThroughStaging) {
  EngineOptions bf16 = options(DisaggMode::kNone, Shape{16, 8192});
  bf16.runner.kv_cache_dtype = DType::kBF16;
  auto single_f32 = make(options(DisaggMode::kNone, Shape{16, 8192}));
  auto single_bf16 = make(bf16);
  EngineOptions po = options(DisaggMode::kPrefill, Shape{16, 8192});
  EngineOptions dopt = options(DisaggMode::kDecode, Shape{16, 8192});
  dopt.runner.kv_cache_dtype = DType::kBF16;
  po.disagg.staging_buffer_mb = dopt.disagg.staging_buffer_mb = staging_mb(256);
  auto prefill = make(po);
  auto decode = make(dopt);
  ASSERT_TRUE(single_f32 && single_bf16 && prefill && decode);
  int64_t agree = 0;
  int64_t total = 0;
  for (const char* text : kPrompts) {
    SCOPED_TRACE(text);
    const SubmitRequest req = request(*single_f32, text, 16);
    const Outcome f32 = collect(*submit(*single_f32, req));
    const Outcome b16 = collect(*submit(*single_bf16, req));
    Pair pair = submit_pair(*prefill, *decode, req);
    const Outcome got = collect(*pair.decode);
    collect(*pair.prefill);
    ASSERT_EQ(got.all.finish.kind, FinishKind::kLength) << got.all.finish.message;
    ASSERT_EQ(got.all.token_ids.size(), 16u);
    EXPECT_EQ(got.all.token_ids[0], f32.all.token_ids[0]);
    for (size_t i = 1; i < got.all.token_ids.size(); ++i) {
      agree += got.all.token_ids[i] == b16.all.token_ids[i] ? 1 : 0;
      ++total;
    }
  }
  std::printf("f32 -> bf16 through staging: %lld of %lld later tokens equal a bf16 server's\n",
              static_cast<long long>(agree), static_cast<long long>(total));
  EXPECT_GE(agree * 4, total * 3);
  EXPECT_TRUE(wait_idle(*decode, 5));
  EXPECT_TRUE(wait_idle(*prefill, 5));
}

INSTANTIATE_TEST_SUITE_P(Pages, DisaggServingTest, ::testing::Values(Shape{1, 8192}, Shape{16, 32}),
                         [](const auto& param_info) {
                           return fmt::format("page{}_chunk{}", param_info.param.page_size,
                                              param_info.param.chunked_prefill_size);
                         });

}  // namespace
}  // namespace kvserve::engine
